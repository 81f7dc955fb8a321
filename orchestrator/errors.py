"""The project's own error types.

Every layer raises these (translating third-party errors at its boundary, ``raise X(...) from
exc``); only the CLI turns them into text for people. Each carries the message (what went wrong,
with the values involved) and a ``hint`` (what to do about it).
"""

from __future__ import annotations

from typing import Any

from orchestrator.remote.wire import ErrorKind


class OrchError(Exception):
    """Base of every error a user can cause or fix."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ConfigError(OrchError):
    """A hosts.yaml or playbook that does not validate.

    ``file``, ``line`` and ``column`` (1-based) locate the problem; ``path`` is the key path
    (``runs[2].speculative.method``).
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        path: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.file = file
        self.line = line
        self.column = column
        self.path = path

    @property
    def location(self) -> str:
        parts = [self.file or "<input>"]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)

    def __str__(self) -> str:
        where = f"{self.location}: "
        at = f"{self.path}: " if self.path else ""
        return f"{where}{at}{self.message}"


FieldPath = tuple[str | int, ...]  # a setting inside a run: ("speculative", "draft_model")


class SpecError(OrchError):
    """A run spec that parses but cannot be launched as asked (checked before any host is touched).

    ``field`` is the path of the offending setting inside the run, as data
    (``("speculative", "draft_model")``, ``("extra_args", 3)``), so the planner can turn the
    error into a ConfigError at that line of the playbook without reading the message.
    """

    def __init__(
        self,
        message: str,
        *,
        run: str | None = None,
        hint: str | None = None,
        field: FieldPath | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.run = run
        self.field = field

    @property
    def dotted_field(self) -> str | None:
        """``field`` as the playbook's dotted path: ``speculative.draft_model``, ``extra_args.3``."""
        return ".".join(str(part) for part in self.field) if self.field else None

    def __str__(self) -> str:
        return f"run {self.run!r}: {self.message}" if self.run else self.message


class HostError(OrchError):
    """Something went wrong with one host; ``host`` is its inventory name."""

    def __init__(self, host: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.host = host

    def __str__(self) -> str:
        return f"{self.host}: {self.message}"


class HostUnreachable(HostError):
    """TCP connection refused, DNS failure, no route, proxy jump failed."""


class HostTimeout(HostError):
    """Connecting or a remote step took longer than allowed."""


class NoFreeChannel(HostError):
    """A background stream (the session agent, a spare load generator) found every channel
    of its connection busy: it is not opened rather than wait, so it can never hold up, or
    deadlock with, the calls of the runs themselves. The caller goes on without it."""


class AuthFailed(HostError):
    """The server refused every key / password we offered."""


class HostKeyUnknown(HostError):
    """The host's key is not in known_hosts (and --accept-new-host-keys was not given)."""


class HostKeyMismatch(HostError):
    """The host's key differs from the one recorded in known_hosts: always refused."""


class RemoteCommandError(HostError):
    """A remote command exited non-zero or produced output we could not understand."""


class RemoteDiskFull(RemoteCommandError):
    """A write on the host failed because its filesystem has no space left (``path``: where)."""

    def __init__(self, host: str, message: str, *, path: str, hint: str | None = None) -> None:
        super().__init__(host, message, hint=hint)
        self.path = path


class AgentError(HostError):
    """The remote agent reported an error record (``kind`` names it, e.g. ``port_in_use``)."""

    def __init__(
        self,
        host: str,
        message: str,
        *,
        kind: ErrorKind = ErrorKind.INTERNAL,
        details: dict[str, Any] | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(host, message, hint=hint)
        self.kind = kind
        self.details = details or {}


class EngineError(HostError):
    """An engine server failed to start, died, or did not become ready."""

    def __init__(
        self,
        host: str,
        message: str,
        *,
        cause: str | None = None,
        log_tail: list[str] | None = None,
        exit_code: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(host, message, hint=hint)
        self.cause = cause
        self.log_tail = log_tail or []
        self.exit_code = exit_code


class ResultsWriteError(OrchError):
    """A file of the local results folder could not be written (the disk is full, read-only ...).

    ``path`` is the file or folder, ``errno`` the OS error number (``errno.ENOSPC``), ``reason``
    its text ("no space left on device"). A full results disk ends the whole playbook: every
    later run would fail the same way, after loading its model for nothing.
    """

    def __init__(
        self, path: str, reason: str, *, errno: int | None = None, hint: str | None = None
    ) -> None:
        super().__init__(f"cannot write {path}: {reason}", hint=hint)
        self.path = path
        self.reason = reason
        self.errno = errno
