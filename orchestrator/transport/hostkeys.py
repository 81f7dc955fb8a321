"""known_hosts, the way OpenSSH treats it: strict by default, ``accept-new`` on request.

asyncssh does the actual verification (it also picks the host key algorithm that matches what is
recorded, as OpenSSH does). This module adds what asyncssh leaves to the caller: telling an
*unknown* key from a *changed* one, recording a new key in OpenSSH's own line format, and
error messages that show fingerprints and say exactly what to run.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from orchestrator.errors import ConfigError, HostKeyMismatch, HostKeyUnknown

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
# OpenSSH's defaults: UserKnownHostsFile "~/.ssh/known_hosts ~/.ssh/known_hosts2",
# GlobalKnownHostsFile "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2".
DEFAULT_USER_FILES = (DEFAULT_KNOWN_HOSTS, Path("~/.ssh/known_hosts2"))
DEFAULT_GLOBAL_FILES = (Path("/etc/ssh/ssh_known_hosts"), Path("/etc/ssh/ssh_known_hosts2"))
DEFAULT_PORT = 22


@dataclass(frozen=True)
class KeyTarget:
    """Where a host key is looked up: the name OpenSSH would record, its address and port."""

    name: str  # inventory name, for messages
    host: str  # HostName after ~/.ssh/config (or HostKeyAlias)
    port: int
    addr: str = ""  # resolved IP when known: entries recorded under the IP count too

    @property
    def pattern(self) -> str:
        """The host field of a known_hosts line: ``host`` or ``[host]:port``."""
        return self.host if self.port == DEFAULT_PORT else f"[{self.host}]:{self.port}"

    def match(self, known: asyncssh.SSHKnownHosts) -> list[asyncssh.SSHKey]:
        """Keys recorded for this target (plain keys and CA keys)."""
        port = None if self.port == DEFAULT_PORT else self.port
        host_keys, ca_keys, *_ = known.match(self.host, self.addr, port)
        return list(dict.fromkeys([*host_keys, *ca_keys]))  # an entry may match host and addr

    def revoked(self, known: asyncssh.SSHKnownHosts) -> list[asyncssh.SSHKey]:
        """Keys marked ``@revoked`` that apply to this target (under ``[host]:port`` or ``host``).

        ``known.match`` drops the revoked keys of ``[host]:port`` when no key is trusted there
        (it then retries without the port), so both lookups are made here.
        """
        port = None if self.port == DEFAULT_PORT else self.port
        lookup = getattr(known, "_match", None)
        found = list(lookup(self.host, self.addr, port)[2]) if lookup else []
        found += known.match(self.host, self.addr, port)[2]
        if port is not None:
            found += known.match(self.host, self.addr, None)[2]
        return found

    def is_revoked(self, known: asyncssh.SSHKnownHosts, key: asyncssh.SSHKey) -> bool:
        return any(r.public_data == key.public_data for r in self.revoked(known))


def load_all(paths: Sequence[Path]) -> asyncssh.SSHKnownHosts:
    """Every known_hosts file OpenSSH would read (user and global ones), as one set of entries:
    ``@revoked`` and ``@cert-authority`` lines in any of them apply. Missing files are empty."""
    texts = []
    for path in dict.fromkeys(paths):
        texts.append(_read(path))
        load(path)  # each file parses on its own, so an error names the file that is broken
    return asyncssh.import_known_hosts("\n".join(texts))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise ConfigError(
            f"cannot read known_hosts: {exc.strerror}",
            file=str(path),
            hint="fix the file's permissions, or pass another known_hosts path",
        ) from exc


def load(path: Path) -> asyncssh.SSHKnownHosts:
    """Read known_hosts; a missing file is simply empty (nothing trusted yet)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = ""
    except OSError as exc:
        raise ConfigError(
            f"cannot read known_hosts: {exc.strerror}",
            file=str(path),
            hint="fix the file's permissions, or pass another known_hosts path",
        ) from exc
    try:
        return asyncssh.import_known_hosts(text)
    except (ValueError, asyncssh.KeyImportError) as exc:
        raise ConfigError(
            f"known_hosts does not parse: {exc}",
            file=str(path),
            hint="remove or fix the broken line (each line: HOSTS KEYTYPE BASE64KEY)",
        ) from exc


def fingerprint(key: asyncssh.SSHKey) -> str:
    """``SHA256:...``, as ``ssh-keygen -lf`` and OpenSSH's prompts print it."""
    return key.get_fingerprint("sha256")


def key_type(key: asyncssh.SSHKey) -> str:
    return key.get_algorithm()


def public_line(key: asyncssh.SSHKey) -> str:
    """``ssh-ed25519 AAAA...`` without a comment."""
    fields = key.export_public_key("openssh").decode().split()
    return f"{fields[0]} {fields[1]}"


def record(path: Path, target: KeyTarget, key: asyncssh.SSHKey) -> str:
    """Append ``target``'s key to known_hosts (creating it 0600 in a 0700 dir); returns the line."""
    line = f"{target.pattern} {public_line(key)}"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "ab") as out:
        if out.tell() > 0 and not _ends_with_newline(path):
            out.write(b"\n")
        out.write(line.encode() + b"\n")
    return line


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def matching_lines(path: Path, target: KeyTarget) -> list[int]:
    """1-based numbers of the known_hosts lines that hold a key for ``target``."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    found = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            if target.match(asyncssh.import_known_hosts(line)):
                found.append(number)
        except (ValueError, asyncssh.KeyImportError):
            continue
    return found


def unknown_key_error(
    target: KeyTarget, offered: asyncssh.SSHKey | None, path: Path
) -> HostKeyUnknown:
    where = f"{target.host}:{target.port}"
    key = f"{key_type(offered)} key {fingerprint(offered)}" if offered else "key"
    scan = f"ssh-keyscan -p {target.port} {shlex.quote(target.host)} >> {shlex.quote(str(path))}"
    return HostKeyUnknown(
        target.name,
        f"host key of {where} is not in {path}: the server offered the {key}",
        hint=(
            "if that fingerprint is the host's, re-run with --accept-new-host-keys to record it, "
            f"or add it yourself: {scan}"
        ),
    )


def mismatch_error(
    target: KeyTarget,
    offered: asyncssh.SSHKey | None,
    recorded: list[asyncssh.SSHKey],
    path: Path,
) -> HostKeyMismatch:
    where = f"{target.host}:{target.port}"
    expected = ", ".join(f"{key_type(k)} {fingerprint(k)}" for k in recorded) or "?"
    got = f"{key_type(offered)} {fingerprint(offered)}" if offered else "a key that does not match"
    lines = matching_lines(path, target)
    at = ", ".join(f"{path}:{n}" for n in lines) or str(path)
    remove = f"ssh-keygen -R {shlex.quote(target.pattern)} -f {shlex.quote(str(path))}"
    return HostKeyMismatch(
        target.name,
        f"HOST KEY CHANGED for {where}: known_hosts expects {expected} but the server offered "
        f"{got}. Someone may be intercepting the connection, or the host was reinstalled. "
        "orch never accepts a changed key, even with --accept-new-host-keys.",
        hint=f"if the change is expected, remove the old entry ({at}): {remove}",
    )


def revoked_error(
    target: KeyTarget, offered: asyncssh.SSHKey, files: Sequence[Path]
) -> HostKeyMismatch:
    """OpenSSH's "REVOKED HOST KEY DETECTED": refused always, never recorded."""
    where = f"{target.host}:{target.port}"
    listed = ", ".join(str(f) for f in files)
    return HostKeyMismatch(
        target.name,
        f"REVOKED HOST KEY for {where}: the server offered the {key_type(offered)} key "
        f"{fingerprint(offered)}, which known_hosts marks @revoked ({listed}). orch refuses it "
        "and never records it, even with --accept-new-host-keys.",
        hint="ask the host's administrator for its current key; do not remove the @revoked line",
    )
