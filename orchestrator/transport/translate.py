"""asyncssh and OS exceptions -> orch's own errors, each naming the host and what to do.

This is the only place that knows asyncssh's exception classes: nothing from asyncssh ever
escapes the transport package.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

import asyncssh

from orchestrator.errors import (
    AuthFailed,
    ConfigError,
    HostError,
    HostTimeout,
    HostUnreachable,
    OrchError,
    RemoteCommandError,
    RemoteDiskFull,
)

LOST_HINT = "the host went down or the network dropped; orch reconnects on its next step"


@dataclass(frozen=True)
class Route:
    """Who we tried to be, where, and how: what an auth or network error message needs."""

    name: str
    host: str
    port: int
    user: str
    identities: tuple[str, ...]
    via: str | None = None  # the ProxyJump spec used to get there
    hop: str | None = None  # "jump host bastion" when this is not the final destination

    @property
    def target(self) -> str:
        return f"{self.hop} {self.host}:{self.port}" if self.hop else f"{self.host}:{self.port}"

    @property
    def where(self) -> str:
        via = f" (via {self.via})" if self.via else ""
        hop = f"{self.hop} " if self.hop else ""
        return f"{hop}{self.user}@{self.host}:{self.port}{via}"


def options_error(exc: BaseException, name: str, identity: str | None) -> OrchError:
    """Failures while reading ~/.ssh/config or loading keys, before any network traffic."""
    if isinstance(exc, asyncssh.config.ConfigParseError):
        return ConfigError(
            f"ssh config for host {name!r} does not parse: {exc}",
            hint="fix the line in your ssh config (see `man ssh_config`)",
        )
    if isinstance(exc, OSError | ValueError) and identity:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return AuthFailed(
            name,
            f"cannot load identity file {identity}: {reason}",
            hint="check identity_file in hosts.yaml (an unencrypted private key, readable by you)",
        )
    return HostUnreachable(name, f"cannot prepare the SSH connection: {exc}")


def connect_error(exc: BaseException, route: Route, timeout: float) -> OrchError:
    """Failures while connecting and logging in."""
    if isinstance(exc, OrchError):
        return exc
    name, target = route.name, route.target
    if isinstance(exc, asyncio.TimeoutError | TimeoutError | socket.timeout):
        return HostTimeout(
            name,
            f"no SSH answer from {route.where} within {timeout:g}s",
            hint="check that the host is up and the address/port are right (a firewall may drop "
            "the traffic); raise connect_timeout for slow links",
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        tried = ", ".join(route.identities) or "ssh-agent and the default keys (~/.ssh/id_*)"
        return AuthFailed(
            name,
            f"{target} refused user {route.user!r} with every key offered ({tried})",
            hint="check `user` and `identity_file` in hosts.yaml (or User/IdentityFile in "
            "~/.ssh/config), and that the public key is in the host's ~/.ssh/authorized_keys",
        )
    if isinstance(exc, socket.gaierror):
        return HostUnreachable(
            name,
            f"cannot resolve {route.host!r}: {exc.strerror}",
            hint="check `address` in hosts.yaml or HostName in ~/.ssh/config",
        )
    if isinstance(exc, ConnectionRefusedError):
        return HostUnreachable(
            name,
            f"connection refused by {target}" + (f" (via {route.via})" if route.via else ""),
            hint="is sshd running there, on that port? check `port` in hosts.yaml",
        )
    if isinstance(exc, asyncssh.ChannelOpenError):
        return HostUnreachable(
            name,
            f"jump host {route.via} could not reach {target}: {exc.reason}",
            hint="check proxy_jump and that the jump host can reach the address",
        )
    if isinstance(exc, asyncssh.DisconnectError):
        return HostUnreachable(
            name,
            f"{route.where} closed the connection during the SSH handshake: {exc.reason}",
            hint="check the host's sshd log (MaxStartups, AllowUsers, supported algorithms)",
        )
    if isinstance(exc, OSError):
        return HostUnreachable(
            name,
            f"cannot connect to {target}: {exc.strerror or exc}",
            hint="check the address, the network route and any VPN or proxy_jump needed",
        )
    return HostUnreachable(name, f"cannot connect to {route.where}: {exc}")


def no_space_error(host: str, path: str, doing: str) -> RemoteDiskFull:
    """A write that failed for want of space, said as such (OpenSSH's sftp-server reports
    ENOSPC as a bare SSH_FX_FAILURE "Failure": the caller checked the free space)."""
    return RemoteDiskFull(
        host,
        f"no space left on {host}:{path} ({doing})",
        path=path,
        hint=f"free some space on that filesystem (`df -h {path}` on the host), or set `workdir` "
        "in hosts.yaml to a filesystem with room",
    )


def session_error(
    exc: BaseException,
    host: str,
    doing: str,
    *,
    timeout: float | None = None,
    path: str | None = None,
) -> HostError:
    """Failures on an established connection (commands, SFTP); ``path``: the remote file or
    directory an SFTP step was about, named when its filesystem is full."""
    if isinstance(exc, HostError):
        return exc
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        limit = f" ({timeout:g}s)" if timeout is not None else ""
        return HostTimeout(host, f"{doing} took longer than allowed{limit}")
    if isinstance(exc, asyncssh.SFTPNoSuchFile | asyncssh.SFTPNoSuchPath):
        return RemoteCommandError(host, f"{doing}: no such file or directory")
    if isinstance(exc, asyncssh.SFTPNoSpaceOnFilesystem | asyncssh.SFTPQuotaExceeded):
        return no_space_error(host, path or "its workdir's filesystem", doing)
    if isinstance(exc, asyncssh.SFTPPermissionDenied):
        return RemoteCommandError(
            host, f"{doing}: permission denied", hint="check the workdir's owner and permissions"
        )
    if isinstance(exc, asyncssh.SFTPConnectionLost | asyncssh.SFTPNoConnection):
        return HostUnreachable(host, f"connection lost while {doing}", hint=LOST_HINT)
    if isinstance(exc, asyncssh.SFTPError):
        return RemoteCommandError(host, f"{doing}: {exc.reason}")
    if isinstance(exc, asyncssh.ChannelOpenError):
        return RemoteCommandError(
            host,
            f"the server refused a new SSH session while {doing}: {exc.reason}",
            hint="the host's sshd limits sessions per connection (MaxSessions)",
        )
    if isinstance(exc, asyncssh.DisconnectError | ConnectionError | BrokenPipeError):
        return HostUnreachable(host, f"connection lost while {doing}", hint=LOST_HINT)
    if isinstance(exc, asyncssh.ProcessError):
        return RemoteCommandError(host, f"{doing}: {exc.reason or exc}")
    if isinstance(exc, OSError):
        return HostUnreachable(host, f"{doing}: {exc.strerror or exc}", hint=LOST_HINT)
    return RemoteCommandError(host, f"{doing}: {exc}")
