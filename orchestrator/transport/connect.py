"""Opening one SSH connection: ~/.ssh/config, jump hosts, strict host keys, accept-new.

Values the user set in hosts.yaml are passed to asyncssh; ``None`` ones are left out so that
``~/.ssh/config`` (Host aliases, HostName, User, Port, IdentityFile, ProxyJump) fills them, as
OpenSSH would. Jump hosts are opened here, hop by hop, rather than by asyncssh, so that each
hop's host key is checked against the same known_hosts with the same rules and an error names
the hop that failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from orchestrator.errors import HostUnreachable, OrchError
from orchestrator.transport import hostkeys
from orchestrator.transport.translate import Route, connect_error, options_error

KEEPALIVE_INTERVAL_S = 30
KEEPALIVE_COUNT_MAX = 3
MAX_JUMP_DEPTH = 8


@dataclass(frozen=True)
class Endpoint:
    """One SSH destination as described; ``None`` fields are left to ~/.ssh/config."""

    name: str  # inventory name: every error names it
    target: str  # address or ~/.ssh/config alias
    port: int | None = None
    user: str | None = None
    client_keys: Sequence[Any] | None = None  # paths or asyncssh keys
    proxy_jump: str | None = None
    hop: str | None = None  # "jump host bastion" when this is not the final destination


class _Client(asyncssh.SSHClient):
    """Notices when the connection drops, so the pool can reconnect instead of reusing it."""

    def __init__(self) -> None:
        self.lost = False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


@dataclass
class Opened:
    conn: asyncssh.SSHClientConnection
    client: _Client
    jumps: list[asyncssh.SSHClientConnection] = field(default_factory=list)
    route: Route | None = None

    async def close(self) -> None:
        for c in (self.conn, *reversed(self.jumps)):
            c.close()
            with contextlib.suppress(Exception):
                await c.wait_closed()


class Connector:
    """Opens connections with one set of trust rules (a known_hosts file, accept-new or not)."""

    def __init__(
        self,
        *,
        known_hosts: Path,
        accept_new_host_keys: bool,
        ssh_config: Sequence[str] | tuple[()],
    ) -> None:
        self.known_hosts_path = known_hosts
        # a path other than the default was asked for: it replaces UserKnownHostsFile
        self.explicit_known_hosts = known_hosts != hostkeys.DEFAULT_KNOWN_HOSTS.expanduser()
        self.accept_new = accept_new_host_keys
        self.ssh_config = ssh_config
        self._record_lock = asyncio.Lock()
        # the files read for each connection -> (their contents, what they parse to)
        self._parsed: dict[tuple[Path, ...], tuple[tuple[str, ...], asyncssh.SSHKnownHosts]] = {}

    async def open(
        self,
        ep: Endpoint,
        *,
        timeout: float,
        known_hosts: asyncssh.SSHKnownHosts | None = None,
        config: Sequence[str] | tuple[()] | None = None,
    ) -> Opened:
        """Connect and log in. ``known_hosts``/``config`` override the pool's (embedded hosts)."""
        jumps: list[asyncssh.SSHClientConnection] = []
        try:
            return await asyncio.wait_for(
                self._open(ep, timeout, known_hosts, config, jumps, depth=0),
                timeout * 3,  # safety net: each step below has its own `timeout`
            )
        except BaseException as exc:
            for jump in reversed(jumps):
                jump.close()
            if isinstance(exc, asyncio.TimeoutError | TimeoutError):
                route = Route(ep.name, ep.target, ep.port or 22, ep.user or _local_user(), ())
                raise connect_error(exc, route, timeout) from exc
            raise

    async def _open(
        self,
        ep: Endpoint,
        timeout: float,
        known_hosts: asyncssh.SSHKnownHosts | None,
        config: Sequence[str] | tuple[()] | None,
        jumps: list[asyncssh.SSHClientConnection],
        *,
        depth: int,
        tunnel: asyncssh.SSHClientConnection | None = None,
    ) -> Opened:
        client = _Client()
        kwargs: dict[str, Any] = {
            "host": ep.target,
            "config": self.ssh_config if config is None else config,
            "client_factory": lambda: client,
            "connect_timeout": timeout,
            "keepalive_interval": KEEPALIVE_INTERVAL_S,
            "keepalive_count_max": KEEPALIVE_COUNT_MAX,
        }
        if ep.port is not None:
            kwargs["port"] = ep.port
        if ep.user is not None:
            kwargs["username"] = ep.user
        if ep.client_keys is not None:
            kwargs["client_keys"] = [
                os.path.expanduser(k) if isinstance(k, str) else k for k in ep.client_keys
            ]
        if tunnel is not None:
            kwargs["tunnel"] = tunnel
        identity = next((k for k in ep.client_keys or () if isinstance(k, str)), None)
        try:
            opts = await asyncssh.SSHClientConnectionOptions.construct(**kwargs)
        except (OSError, ValueError, asyncssh.Error) as exc:
            raise options_error(exc, ep.name, identity) from exc

        via = ep.proxy_jump or (opts.tunnel if isinstance(opts.tunnel, str) else None)
        if tunnel is None and via and via.lower() != "none":
            if depth >= MAX_JUMP_DEPTH:
                raise HostUnreachable(
                    ep.name,
                    f"ProxyJump chain deeper than {MAX_JUMP_DEPTH} hops (a loop in ~/.ssh/config?)",
                )
            tunnel = await self._open_jumps(ep, via, timeout, jumps, depth)
            kwargs["tunnel"] = tunnel
        route = _route(ep, opts, via)
        target = hostkeys.KeyTarget(
            name=ep.name,
            host=opts.host_key_alias or opts.host,
            port=opts.port,
            addr=await _address(opts.host, tunnel),
        )
        if known_hosts is None:
            known_hosts = await self._trust(target, kwargs, opts)
        try:
            conn = await asyncssh.connect(**kwargs, known_hosts=known_hosts)
        except (asyncssh.HostKeyNotVerifiable, asyncssh.KeyExchangeFailed) as exc:
            recorded = target.match(known_hosts)
            if isinstance(exc, asyncssh.KeyExchangeFailed) and not recorded:
                raise connect_error(exc, route, timeout) from exc
            raise await self._host_key_error(target, recorded, kwargs, opts) from exc
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            raise connect_error(exc, route, timeout) from exc
        return Opened(conn=conn, client=client, jumps=jumps, route=route)

    async def _open_jumps(
        self,
        ep: Endpoint,
        spec: str,
        timeout: float,
        jumps: list[asyncssh.SSHClientConnection],
        depth: int,
    ) -> asyncssh.SSHClientConnection:
        """Open ``[user@]host[:port],...`` hop by hop, each through the previous one."""
        tunnel: asyncssh.SSHClientConnection | None = None
        for hop in spec.split(","):
            user, _, hostport = hop.strip().rpartition("@")
            host, port = split_host_port(hostport)
            hop_ep = Endpoint(
                name=ep.name, target=host, port=port, user=user or None, hop=f"jump host {hop}"
            )
            opened = await self._open(
                hop_ep, timeout, None, None, jumps, depth=depth + 1, tunnel=tunnel
            )
            jumps.append(opened.conn)
            tunnel = opened.conn
        assert tunnel is not None
        return tunnel

    def known_hosts_files(
        self, opts: asyncssh.SSHClientConnectionOptions
    ) -> tuple[Path, list[Path]]:
        """(the file new keys are recorded in, every file read), as OpenSSH picks them:
        UserKnownHostsFile (several allowed; ``--known-hosts`` replaces them) and
        GlobalKnownHostsFile from the ssh_config, else their defaults."""
        config = opts.config
        users = [Path(p).expanduser() for p in _config_list(config, "UserKnownHostsFile")]
        if self.explicit_known_hosts or not users:
            users = [self.known_hosts_path]
            if not self.explicit_known_hosts:
                users += [p.expanduser() for p in hostkeys.DEFAULT_USER_FILES[1:]]
        globals_ = [Path(p).expanduser() for p in _config_list(config, "GlobalKnownHostsFile")]
        if not globals_:
            globals_ = list(hostkeys.DEFAULT_GLOBAL_FILES)
        return users[0], [*users, *globals_]

    async def _trust(
        self,
        target: hostkeys.KeyTarget,
        kwargs: dict[str, Any],
        opts: asyncssh.SSHClientConnectionOptions,
    ) -> asyncssh.SSHKnownHosts:
        """known_hosts for this connection; with accept-new, a host never seen is recorded first
        (unless its key is @revoked: that is refused, and never recorded)."""
        record_in, files = self.known_hosts_files(opts)
        known = self.known_hosts(files)
        if not self.accept_new or target.match(known):
            return known
        async with self._record_lock:  # two hosts may append at once
            known = self.known_hosts(files)
            if target.match(known):
                return known
            key = await self._fetch_key(kwargs, ())
            if key is None:
                return known
            if target.is_revoked(known, key):
                raise hostkeys.revoked_error(target, key, files)
            hostkeys.record(record_in, target, key)
            return self.known_hosts(files)

    def known_hosts(self, files: Sequence[Path]) -> asyncssh.SSHKnownHosts:
        """``hostkeys.load_all(files)``, parsed again only when a file's content has changed.

        Every host of a fan-out reads the same files: parsing them for each connection made
        checking N hosts, with one known_hosts line each, parse N² lines (at 64 hosts, a tenth
        of the controller's CPU), all of it blocking the event loop. Reading is cheap and is
        still done each time, so an edited file is seen at once, as before.
        """
        paths = tuple(files)
        texts = _contents(paths)
        cached = self._parsed.get(paths)
        if texts is not None and cached is not None and cached[0] == texts:
            return cached[1]
        known = hostkeys.load_all(paths)  # an unreadable or broken file: its own error
        if texts is not None and _contents(paths) == texts:  # not changed while parsed
            self._parsed[paths] = (texts, known)
        return known

    async def _host_key_error(
        self,
        target: hostkeys.KeyTarget,
        recorded: list[asyncssh.SSHKey],
        kwargs: dict[str, Any],
        opts: asyncssh.SSHClientConnectionOptions,
    ) -> OrchError:
        _, files = self.known_hosts_files(opts)
        known = hostkeys.load_all(files)
        if target.revoked(known):
            offered = await self._fetch_key(kwargs, ())
            if offered is not None and target.is_revoked(known, offered):
                return hostkeys.revoked_error(target, offered, files)
        if not recorded:
            offered = await self._fetch_key(kwargs, ())
            return hostkeys.unknown_key_error(target, offered, self.known_hosts_path)
        # Ask for a key of a recorded type first: that is the one that failed to match.
        algs = sorted({alg.decode() for key in recorded for alg in key.sig_algorithms})
        offered = await self._fetch_key(kwargs, algs) or await self._fetch_key(kwargs, ())
        return hostkeys.mismatch_error(target, offered, recorded, self.known_hosts_path)

    async def _fetch_key(
        self, kwargs: dict[str, Any], algs: Sequence[str] | tuple[()]
    ) -> asyncssh.SSHKey | None:
        """The key the server presents (a separate, unauthenticated handshake)."""
        fetch = {k: v for k, v in kwargs.items() if k in {"host", "port", "tunnel", "config"}}
        try:
            return await asyncio.wait_for(
                asyncssh.get_server_host_key(**fetch, server_host_key_algs=algs),
                kwargs["connect_timeout"],
            )
        except (OSError, asyncssh.Error, asyncio.TimeoutError, ValueError):
            return None


def _contents(paths: Sequence[Path]) -> tuple[str, ...] | None:
    """Each file's text ('' when missing, as ``hostkeys.load_all`` reads it); None when one
    cannot be read (``load_all`` then says why)."""
    texts = []
    for path in paths:
        try:
            texts.append(path.read_text())
        except FileNotFoundError:
            texts.append("")
        except (OSError, UnicodeDecodeError):
            return None
    return tuple(texts)


def _route(ep: Endpoint, opts: asyncssh.SSHClientConnectionOptions, via: str | None) -> Route:
    identities: tuple[str, ...]
    if ep.client_keys is not None:
        identities = tuple(k if isinstance(k, str) else "<in-memory key>" for k in ep.client_keys)
    else:
        configured = opts.config.get("IdentityFile", ())
        identities = (
            tuple(str(p) for p in configured) if isinstance(configured, list | tuple) else ()
        )
    return Route(ep.name, opts.host, opts.port, opts.username, identities, via, ep.hop)


def _config_list(config: Any, name: str) -> list[str]:
    value = config.get(name, ())
    if isinstance(value, str):
        return value.split()
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def split_host_port(hostport: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]:port`` as in a ProxyJump spec."""
    if hostport.startswith("["):  # [v6addr]:port
        host, _, rest = hostport[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if hostport.count(":") == 1:
        host, port = hostport.split(":")
        return host, int(port)
    return hostport, None


async def _address(host: str, tunnel: object) -> str:
    """The IP that ``host`` resolves to (entries recorded by IP count), '' if unknown."""
    if tunnel is not None:
        return ""
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return host
    except OSError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return ""
    return str(infos[0][4][0]) if infos else ""


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
