"""What runs on a host is what orch pushed: checks on the workdir and the agent file.

The agent's file name is deterministic per orch version (``agent-<hash>.pyz``) and every spec,
secrets included, is handed to it. So before anything runs: the workdir and its ``specs/`` must
be directories of the login user (or root) that nobody else can write to, and the agent file a
regular file of that user (or root), not writable by others, whose content hashes to the bundle
orch built. Pure checks on attributes read over SFTP; the client does the reading.
"""

from __future__ import annotations

import hashlib
import shlex
import stat
from typing import Protocol

from orchestrator.errors import HostError


class UnsafeRemotePath(HostError):
    """A workdir or agent file on the host that someone else could have written."""


class Attrs(Protocol):
    """What SFTP tells of a file (``asyncssh.SFTPAttrs`` has these)."""

    @property
    def uid(self) -> int | None: ...
    @property
    def permissions(self) -> int | None: ...


def _describe(attrs: Attrs) -> str:
    mode = attrs.permissions or 0
    return f"owner uid {attrs.uid}, mode {stat.filemode(mode)} ({mode & 0o7777:04o})"


def _owned(attrs: Attrs, uid: int) -> bool:
    return attrs.uid in (uid, 0)


def check_dir(host: str, path: str, attrs: Attrs | None, uid: int) -> None:
    """``path`` is a directory of ``uid`` (or root) that group and others cannot write to."""
    if attrs is None:
        raise UnsafeRemotePath(host, f"{path} is not there after it was created")
    mode = attrs.permissions or 0
    quoted = shlex.quote(path)
    if not stat.S_ISDIR(mode):
        raise UnsafeRemotePath(
            host,
            f"{path} is not a directory ({_describe(attrs)})",
            hint="remove it or set another `workdir` for this host in hosts.yaml",
        )
    if not _owned(attrs, uid):
        raise UnsafeRemotePath(
            host,
            f"refusing to use {path}: it belongs to another user ({_describe(attrs)}; "
            f"you log in as uid {uid}), who could replace the agent orch runs there",
            hint=f"use a workdir of your own (`workdir:` in hosts.yaml), e.g. `{path}-$USER`, "
            "created by orch",
        )
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeRemotePath(
            host,
            f"refusing to use {path}: others can write to it ({_describe(attrs)}), so they "
            "could plant an agent that orch would run with every spec and secret",
            hint=f"run `chmod go-w {quoted}` on the host (or `chmod 700 {quoted}`)",
        )


def check_agent_file(host: str, path: str, attrs: Attrs, uid: int) -> None:
    """The agent file is a regular file of ``uid`` (or root), not writable by group or others."""
    mode = attrs.permissions or 0
    fix = f"remove it (`rm {shlex.quote(path)}` on the host) and run orch again: it pushes its own"
    if not stat.S_ISREG(mode):
        raise UnsafeRemotePath(
            host, f"refusing to run {path}: not a regular file ({_describe(attrs)})", hint=fix
        )
    if not _owned(attrs, uid):
        raise UnsafeRemotePath(
            host,
            f"refusing to run {path}: it belongs to another user ({_describe(attrs)}; "
            f"you log in as uid {uid})",
            hint=fix,
        )
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeRemotePath(
            host,
            f"refusing to run {path}: others can write to it ({_describe(attrs)})",
            hint=fix,
        )


def check_content(host: str, path: str, data: bytes, sha256: str) -> None:
    """What was read back is the bundle (after orch wrote it: nothing else may have changed it)."""
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        raise UnsafeRemotePath(
            host,
            f"refusing to run {path}: its content (sha256 {found[:16]}…) is not the agent orch "
            f"pushed (sha256 {sha256[:16]}…)",
            hint=f"remove it (`rm {shlex.quote(path)}` on the host) and check who can write to "
            "the workdir",
        )


def matches(data: bytes, sha256: str) -> bool:
    return hashlib.sha256(data).hexdigest() == sha256
