"""Connections to hosts: run an argv, stream its lines, move files over SFTP.

The only command strings ever sent are argv lists joined with ``shlex.quote``: the remote
login shell splits them back into exactly the items given, so nothing in them is interpreted.
Every failure leaves here as an ``orchestrator.errors`` type naming the host.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import posixpath
import secrets
import shlex
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import asyncssh

from orchestrator.config.hostconfig import HostConfig
from orchestrator.errors import (
    HostTimeout,
    HostUnreachable,
    NoFreeChannel,
    OrchError,
    RemoteCommandError,
)
from orchestrator.transport import hostkeys
from orchestrator.transport.connect import Connector, Endpoint, Opened
from orchestrator.transport.inprocess import EmbeddedFactory, EmbeddedHosts, no_embedded_hosts
from orchestrator.transport.translate import LOST_HINT, no_space_error, session_error

T = TypeVar("T")

# OpenSSH's sshd allows 10 sessions per connection (MaxSessions): one is SFTP's, the rest are
# commands. runner/slots.py budgets them: two per run at once (its log's tail, its load
# generator), the agent's background streams (agent/client.py: the session, a spare load
# generator) and one for short calls.
MAX_CHANNELS = 9
# a background stream asked to end (stdin EOF) gets this long to exit before SIGTERM
FINISH_WAIT_S = 3.0
OPEN_RETRIES = 25
CLOSE_WAIT_S = 5.0
STDERR_TAIL_LINES = 40
DEFAULT_CONNECT_TIMEOUT = 15.0
# An SFTP step (stat, mkdir, a small file) answers in well under a second on a live host; one
# blocked in the kernel (stale NFS, a D-state disk) never does: then this ends it.
DEFAULT_SFTP_TIMEOUT = 60.0


@dataclass(frozen=True)
class CompletedProcess:
    """Mirrors subprocess.CompletedProcess (returncode is -N when killed by signal N)."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


def command_line(argv: Sequence[str]) -> str:
    """The one way a command is sent: each item quoted, so the remote shell splits it back."""
    if not argv:
        raise ValueError("empty argv")
    for item in argv:
        if not isinstance(item, str) or "\0" in item:
            raise ValueError(f"argv items must be str without NUL bytes, got {item!r}")
    return " ".join(shlex.quote(item) for item in argv)


def _tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def _failed(host: str, argv: Sequence[str], returncode: int, stderr: str) -> RemoteCommandError:
    tail = _tail(stderr)
    detail = f":\n{tail}" if tail else " (no stderr)"
    return RemoteCommandError(host, f"`{command_line(argv)}` exited with {returncode}{detail}")


class Connection:
    """One logged-in SSH connection to a host, reused for every step of a session."""

    supports_sessions = True  # its streams take writes: the agent may run as a session

    def __init__(
        self, host: str, opened: Opened, *, sftp_timeout: float = DEFAULT_SFTP_TIMEOUT
    ) -> None:
        self.host = host
        self.sftp_timeout = sftp_timeout
        self.bytes_pushed = 0  # sum of put_bytes, so callers can report "pushed N bytes"
        self._opened = opened
        self._conn = opened.conn
        self._channels = asyncio.Semaphore(MAX_CHANNELS)
        self._at_close: list[Callable[[], Awaitable[None]]] = []
        self._sftp: asyncssh.SFTPClient | None = None
        self._sftp_lock = asyncio.Lock()
        self._home: str | None = None

    @property
    def peer(self) -> tuple[str, int]:
        """The address and port actually connected to (after ~/.ssh/config)."""
        route = self._opened.route
        return (route.host, route.port) if route else ("", 0)

    @property
    def closed(self) -> bool:
        """True once the connection dropped or was closed: the pool then opens a new one."""
        return self._opened.client.lost

    # -- commands --------------------------------------------------------------------------
    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        check: bool = False,
        input: str | None = None,
    ) -> CompletedProcess:
        """Run ``argv`` to completion; ``check`` raises RemoteCommandError on non-zero exit.

        ``input`` is written to the command's stdin, then stdin is closed (at EOF at once
        without it)."""
        cmd = command_line(argv)
        doing = f"running `{cmd}`"
        async with self._channels:
            proc = await self._create_process(cmd, doing, keep_stdin=input is not None)
            try:
                if input is not None:
                    proc.stdin.write(input)
                    proc.stdin.write_eof()
                result = await proc.wait(check=False, timeout=timeout)
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
                raise session_error(exc, self.host, doing, timeout=timeout) from exc
            finally:
                await _end_process(proc)
        stdout, stderr = str(result.stdout or ""), str(result.stderr or "")
        if result.returncode is None:
            raise self._ended_without_status(doing, stderr)
        done = CompletedProcess(list(argv), result.returncode, stdout, stderr)
        if check and done.returncode != 0:
            raise _failed(self.host, argv, done.returncode, stderr)
        return done

    def open_stream(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        check: bool = True,
        idle_timeout: float | None = None,
        input: str | None = None,
        background: bool = False,
    ) -> RemoteStream:
        """A cancellable stream: ``async with conn.open_stream(argv) as s: async for line in s``.

        ``timeout`` bounds the whole command; ``idle_timeout`` the silence between two lines (a
        HostTimeout when no line came for that long). The command's stdin stays open (after
        ``input``, if given) until the stream ends: a command can watch it and stop when it
        reaches EOF, i.e. when this controller went away or left the stream.

        Leaving the ``async with`` early (break, exception, task cancelled) or calling
        ``cancel()`` asks sshd to send SIGTERM to the command (the exec is PTY-less; OpenSSH
        honours the request for ordinary users but refuses it for root logins) and closes the
        channel. The command's stdout is then gone, so its next write ends it (EPIPE/SIGPIPE);
        a command that never writes runs on until it finishes. Embedded hosts kill the whole
        process group. Processes the command detached into their own session (engines started
        by the agent) are never affected and keep running.

        ``background``: a stream that lives beside the runs (the session agent, a spare load
        generator). It takes a channel only when one is free at once, else NoFreeChannel on
        entering: waiting could deadlock with the runs' own streams.
        """
        return RemoteStream(
            self,
            argv,
            timeout=timeout,
            check=check,
            idle_timeout=idle_timeout,
            input=input,
            background=background,
        )

    def at_close(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Await ``hook`` when this connection closes, before its channels go: what lives on
        the connection (the session agent) ends there, so its process is gone when orch is."""
        if hook not in self._at_close:
            self._at_close.append(hook)

    async def stream(
        self, argv: Sequence[str], *, timeout: float | None = None
    ) -> AsyncIterator[str]:
        """stdout lines (without the newline) as they arrive; RemoteCommandError on non-zero exit.

        To stop early and free the channel at once, prefer ``open_stream`` (an abandoned
        generator is only closed when it is garbage-collected).
        """
        async with self.open_stream(argv, timeout=timeout) as lines:
            async for line in lines:
                yield line

    # -- files (SFTP) ------------------------------------------------------------------------
    async def put_bytes(self, data: bytes, remote_path: str, *, mode: int = 0o600) -> int:
        """Write atomically: to ``<path>.tmp-<random>``, chmod, rename over ``path``.

        A reader never sees a half-written file, and an interrupted push leaves the old file.
        """
        path = await self._resolve(remote_path)
        tmp = f"{path}.tmp-{secrets.token_hex(6)}"
        doing = f"writing {path}"
        sftp = await self._sftp_client(doing)

        async def write() -> None:
            async with sftp.open(tmp, "wb", attrs=asyncssh.SFTPAttrs(permissions=mode)) as f:
                await f.write(data)
            await sftp.chmod(tmp, mode)
            await sftp.posix_rename(tmp, path)

        try:
            await asyncio.wait_for(write(), self.sftp_timeout)
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            with contextlib.suppress(OSError, asyncssh.Error, asyncio.TimeoutError):
                await asyncio.wait_for(sftp.remove(tmp), self.sftp_timeout)
            if await self._out_of_space(sftp, exc, posixpath.dirname(path), len(data)):
                raise no_space_error(self.host, posixpath.dirname(path), doing) from exc
            raise session_error(exc, self.host, doing, timeout=self.sftp_timeout) from exc
        self.bytes_pushed += len(data)
        return len(data)

    async def remove(self, remote_path: str) -> bool:
        """Delete a file; False when it was not there (already gone is fine: nothing to do)."""
        path = await self._resolve(remote_path)

        async def remove(sftp: asyncssh.SFTPClient) -> bool:
            try:
                await sftp.remove(path)
            except asyncssh.SFTPNoSuchFile:
                return False
            return True

        return await self._sftp_call(f"removing {path}", remove)

    async def exists(self, remote_path: str) -> bool:
        path = await self._resolve(remote_path)
        return await self._sftp_call(f"checking {path}", lambda s: s.exists(path))

    async def makedirs(self, remote_path: str, *, mode: int | None = None) -> None:
        """Like ``mkdir -p``: parents created, an existing directory is fine (and unchanged).
        ``mode``: of the directories created (else the server's default, after its umask)."""
        path = await self._resolve(remote_path)
        attrs = asyncssh.SFTPAttrs() if mode is None else asyncssh.SFTPAttrs(permissions=mode)
        await self._sftp_call(
            f"creating directory {path}",
            lambda s: s.makedirs(path, attrs, exist_ok=True),
            path=posixpath.dirname(path),
        )

    async def lstat(self, remote_path: str, *, follow: bool = False) -> asyncssh.SFTPAttrs | None:
        """A file's attributes (of a symlink itself unless ``follow``); None if nothing is there."""
        path = await self._resolve(remote_path)

        async def get(sftp: asyncssh.SFTPClient) -> asyncssh.SFTPAttrs | None:
            try:
                return await (sftp.stat(path) if follow else sftp.lstat(path))
            except asyncssh.SFTPNoSuchFile:
                return None

        return await self._sftp_call(f"checking {path}", get)

    async def read_bytes(self, remote_path: str) -> bytes:
        path = await self._resolve(remote_path)

        async def read(sftp: asyncssh.SFTPClient) -> bytes:
            async with sftp.open(path, "rb") as f:
                data = await f.read()  # bytes in "rb" mode; the stubs say AnyStr
                return data if isinstance(data, bytes) else data.encode()

        return await self._sftp_call(f"reading {path}", read)

    async def free_bytes(self, remote_dir: str) -> int | None:
        """Bytes an unprivileged user may still write under ``remote_dir`` (statvfs through
        OpenSSH's statvfs@openssh.com extension); None when the server cannot say."""
        path = await self._resolve(remote_dir)
        try:
            sftp = await self._sftp_client(f"checking free space in {path}")
            vfs = await asyncio.wait_for(sftp.statvfs(path), self.sftp_timeout)
        except (OrchError, OSError, asyncssh.Error, asyncio.TimeoutError):
            return None
        return int(vfs.bavail) * int(vfs.frsize or vfs.bsize)

    async def _out_of_space(
        self, sftp: asyncssh.SFTPClient, exc: BaseException, directory: str, size: int
    ) -> bool:
        """Whether a failed write failed for want of space: the status says so, or (OpenSSH's
        sftp-server answers ENOSPC with a bare SSH_FX_FAILURE "Failure") the filesystem has
        less room left than the write needed."""
        if isinstance(exc, asyncssh.SFTPNoSpaceOnFilesystem | asyncssh.SFTPQuotaExceeded):
            return True
        if not isinstance(exc, asyncssh.SFTPFailure) or self.closed:
            return False
        free = await self.free_bytes(directory)
        return free is not None and free < max(size, 1)

    async def home(self) -> str:
        """The login directory (where SFTP starts), absolute."""
        if self._home is None:
            self._home = await self._sftp_call(
                "finding the home directory", lambda s: s.realpath(".")
            )
        return self._home

    async def close(self) -> None:
        hooks, self._at_close = self._at_close, []
        if not self.closed:
            for hook in hooks:
                with contextlib.suppress(OrchError, OSError, asyncssh.Error):
                    await asyncio.wait_for(hook(), FINISH_WAIT_S + CLOSE_WAIT_S)
        if self._sftp is not None:
            self._sftp.exit()
            self._sftp = None
        await self._opened.close()

    # -- internals -------------------------------------------------------------------------
    async def _create_process(
        self, cmd: str, doing: str, *, keep_stdin: bool = False
    ) -> asyncssh.SSHClientProcess[str]:
        """Open a session channel for ``cmd``: stdin at EOF, or open (``keep_stdin``) for the
        caller to write to; the command sees EOF when the channel closes.

        sshd frees a closed session slightly after the client sees it closed, so a busy
        connection can briefly hit MaxSessions: a refused open is retried with backoff.
        """
        for attempt in range(OPEN_RETRIES):
            self._check_open(doing)
            try:
                if keep_stdin:
                    return await self._conn.create_process(cmd, encoding="utf-8", errors="replace")
                return await self._conn.create_process(
                    cmd, stdin=asyncssh.DEVNULL, encoding="utf-8", errors="replace"
                )
            except asyncssh.ChannelOpenError as exc:
                if attempt + 1 == OPEN_RETRIES or self.closed:
                    raise session_error(exc, self.host, doing) from exc
            except (OSError, asyncssh.Error) as exc:
                raise session_error(exc, self.host, doing) from exc
            await asyncio.sleep(0.02 * (attempt + 1))
        raise AssertionError("unreachable")

    def _check_open(self, doing: str) -> None:
        if self.closed:
            raise HostUnreachable(self.host, f"connection lost before {doing}", hint=LOST_HINT)

    def _ended_without_status(
        self, doing: str, stderr: str
    ) -> HostUnreachable | RemoteCommandError:
        if self.closed:
            return HostUnreachable(self.host, f"connection lost while {doing}", hint=LOST_HINT)
        tail = _tail(stderr)
        return RemoteCommandError(
            self.host, f"{doing}: ended without an exit status {tail}".strip()
        )

    async def _resolve(self, remote_path: str) -> str:
        """Expand a leading ``~`` (SFTP itself does not)."""
        if remote_path == "~" or remote_path.startswith("~/"):
            return (await self.home()) + remote_path[1:]
        return remote_path

    async def _sftp_client(self, doing: str) -> asyncssh.SFTPClient:
        self._check_open(doing)
        async with self._sftp_lock:
            if self._sftp is None:
                try:
                    self._sftp = await self._conn.start_sftp_client()
                except (OSError, asyncssh.Error) as exc:
                    raise session_error(exc, self.host, doing) from exc
            return self._sftp

    async def _sftp_call(
        self,
        doing: str,
        call: Callable[[asyncssh.SFTPClient], Awaitable[T]],
        *,
        path: str | None = None,
    ) -> T:
        sftp = await self._sftp_client(doing)
        try:
            return await asyncio.wait_for(call(sftp), self.sftp_timeout)
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            raise session_error(
                exc, self.host, doing, timeout=self.sftp_timeout, path=path
            ) from exc


async def _end_process(proc: asyncssh.SSHClientProcess[str], *, terminate: bool = True) -> None:
    """Close the channel (asking the command to stop first, if it still runs) and wait for it.

    OpenSSH delivers the TERM request to the command for ordinary users; for root logins sshd
    refuses it ("session signalling requires privilege separation"). Either way, once the
    channel is closed the command's stdout is gone and its next write ends it (EPIPE/SIGPIPE).
    """
    running = proc.returncode is None
    if running:  # EOF on its stdin: an agent verb watching it ends even where TERM is refused
        with contextlib.suppress(OSError, asyncssh.Error):
            proc.stdin.write_eof()
    if terminate and running:
        with contextlib.suppress(OSError, asyncssh.Error):
            proc.send_signal("TERM")
    proc.close()
    if running:  # sshd answers our close only once the command's output closes: don't wait
        return
    with contextlib.suppress(OSError, asyncssh.Error, asyncio.TimeoutError):
        await asyncio.wait_for(proc.wait_closed(), CLOSE_WAIT_S)


class RemoteStream:
    """A running remote command read line by line; see ``Connection.open_stream``."""

    def __init__(
        self,
        conn: Connection,
        argv: Sequence[str],
        *,
        timeout: float | None,
        check: bool,
        idle_timeout: float | None = None,
        input: str | None = None,
        background: bool = False,
    ) -> None:
        self.argv = list(argv)
        self.returncode: int | None = None
        self._background = background
        self._conn = conn
        self._cmd = command_line(argv)
        self._doing = f"running `{self._cmd}`"
        self._timeout = timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._check = check
        self._idle_timeout = idle_timeout
        self._input = input
        self._proc: asyncssh.SSHClientProcess[str] | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_task: asyncio.Task[None] | None = None
        self._finished = False

    @property
    def stderr(self) -> str:
        """The last lines of stderr seen so far."""
        return "".join(self._stderr)

    async def __aenter__(self) -> RemoteStream:
        if self._background and self._conn._channels.locked():
            raise NoFreeChannel(self._conn.host, f"{self._doing}: every channel is busy")
        await self._conn._channels.acquire()
        try:
            self._proc = await self._conn._create_process(self._cmd, self._doing, keep_stdin=True)
            if self._input is not None:
                self._proc.stdin.write(self._input)
        except BaseException:
            self._conn._channels.release()
            raise
        self._stderr_task = asyncio.ensure_future(self._collect_stderr())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.cancel()
        finally:
            self._conn._channels.release()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        proc = self._proc
        assert proc is not None, "use `async with conn.open_stream(...)`"
        while True:
            line = await self._io(proc.stdout.readline(), idle=True)
            if not line:
                break
            yield line[:-1] if line.endswith("\n") else line
        await self._io(proc.wait_closed())
        if self._stderr_task is not None and not self._stderr_task.cancelled():
            await self._io(self._stderr_task)
        self._finished = True
        code = proc.returncode
        if code is None:
            raise self._conn._ended_without_status(self._doing, self.stderr)
        self.returncode = code
        if self._check and code != 0:
            raise _failed(self._conn.host, self.argv, code, self.stderr)

    def write(self, text: str) -> None:
        """Send ``text`` on the command's stdin (the session agent's request frames)."""
        if self._proc is None:
            raise HostUnreachable(self._conn.host, f"{self._doing}: the stream is closed")
        try:
            self._proc.stdin.write(text)
        except (OSError, asyncssh.Error) as exc:
            raise session_error(exc, self._conn.host, self._doing) from exc

    def write_eof(self) -> None:
        """Close the command's stdin: a command reading it (the session agent) ends."""
        if self._proc is not None:
            with contextlib.suppress(OSError, asyncssh.Error):
                self._proc.stdin.write_eof()

    async def finish(self, wait_s: float = FINISH_WAIT_S) -> None:
        """End a command that stops at stdin EOF: EOF, up to ``wait_s`` for it to exit, then
        as ``cancel``. Its process is gone when this returns (unless it ignored EOF and TERM)."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self.write_eof()
            with contextlib.suppress(OSError, asyncssh.Error, asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait_closed(), wait_s)
            self._finished = self._finished or proc.returncode is not None
        await self.cancel()

    async def cancel(self) -> None:
        """Stop the remote command (SIGTERM, then close the channel); idempotent."""
        proc, self._proc = self._proc, None
        if self._stderr_task is not None:
            self._stderr_task.cancel()
        if proc is not None:
            await _end_process(proc, terminate=not self._finished)

    async def _io(self, aw: Awaitable[T], *, idle: bool = False) -> T:
        remaining = None if self._deadline is None else max(0.0, self._deadline - time.monotonic())
        limit = self._idle_timeout if idle else None
        silent = limit is not None and (remaining is None or limit < remaining)
        try:
            return await asyncio.wait_for(aw, limit if silent else remaining)
        except asyncio.TimeoutError as exc:
            if silent:
                raise HostTimeout(
                    self._conn.host,
                    f"{self._doing}: no output for {self._idle_timeout:g}s",
                ) from exc
            raise session_error(exc, self._conn.host, self._doing, timeout=self._timeout) from exc
        except (OSError, asyncssh.Error) as exc:
            raise session_error(exc, self._conn.host, self._doing, timeout=self._timeout) from exc

    async def _collect_stderr(self) -> None:
        assert self._proc is not None
        with contextlib.suppress(OSError, asyncssh.Error):
            async for line in self._proc.stderr:
                self._stderr.append(line)


class ConnectionPool:
    """One connection per host for a whole session; connects on first use, reconnects if lost.

    ``connect_timeout`` is the default for hosts without one of their own: the inventory leaves
    ``HostConfig.connect_timeout`` None when hosts.yaml does not set it. A host's own value
    always wins, whatever it is (a HostConfig built in code carries its dataclass default).

    ``embedded`` builds the servers of ``transport: embedded`` hosts (``inprocess.py``): the
    entry point that opens the pool hands in the simulator's, so the transport never imports
    it. Without one, such a host is a HostError. ``embedded_root`` is handed to it as is.
    """

    def __init__(
        self,
        *,
        known_hosts: Path | None = None,
        accept_new_host_keys: bool = False,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        ssh_config: Sequence[Path | str] | None = None,
        embedded_root: Path | None = None,
        embedded: EmbeddedFactory | None = None,
    ) -> None:
        self.known_hosts = Path(known_hosts or hostkeys.DEFAULT_KNOWN_HOSTS).expanduser()
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout = connect_timeout
        self.embedded_root = embedded_root
        self._connector = Connector(
            known_hosts=self.known_hosts,
            accept_new_host_keys=accept_new_host_keys,
            ssh_config=()
            if ssh_config is None
            else [str(Path(p).expanduser()) for p in ssh_config],
        )
        self._connections: dict[str, Connection] = {}
        self._pending: dict[str, asyncio.Task[Connection]] = {}
        self._embedded_factory = embedded
        self._embedded: EmbeddedHosts | None = None

    async def __aenter__(self) -> ConnectionPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def get(self, host: HostConfig) -> Connection:
        """The host's connection: opened once (concurrent callers share the attempt), reused."""
        conn = self._connections.get(host.name)
        if conn is not None and not conn.closed:
            return conn
        task = self._pending.get(host.name)
        if task is None:
            task = asyncio.ensure_future(self._connect(host))
            self._pending[host.name] = task
            task.add_done_callback(functools.partial(self._settled, host.name))
        return await asyncio.shield(task)

    def _settled(self, name: str, task: asyncio.Task[Connection]) -> None:
        self._pending.pop(name, None)
        if not task.cancelled():
            task.exception()  # retrieved here too: every waiter may have been cancelled

    @property
    def bytes_pushed(self) -> dict[str, int]:
        return {name: conn.bytes_pushed for name, conn in self._connections.items()}

    async def close(self) -> None:
        for task in list(self._pending.values()):
            task.cancel()
        conns, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
        embedded, self._embedded = self._embedded, None
        if embedded is not None:
            with contextlib.suppress(Exception):
                await embedded.stop()

    def timeout_for(self, host: HostConfig) -> float:
        """Seconds to wait for ``host`` to connect: its own setting, else the pool's."""
        own: float | None = host.connect_timeout
        return own if own is not None else self.connect_timeout

    async def _connect(self, host: HostConfig) -> Connection:
        old = self._connections.pop(host.name, None)
        if old is not None:
            await old.close()
        timeout = self.timeout_for(host)
        if host.transport == "embedded":
            opened = await self._open_embedded(host, timeout)
        else:
            endpoint = Endpoint(
                name=host.name,
                target=host.target,
                port=host.port,
                user=host.user,
                client_keys=[host.identity_file] if host.identity_file else None,
                proxy_jump=host.proxy_jump,
            )
            opened = await self._connector.open(endpoint, timeout=timeout)
        own = host.agent_timeout_s
        conn = Connection(
            host.name, opened, sftp_timeout=own if own is not None else DEFAULT_SFTP_TIMEOUT
        )
        self._connections[host.name] = conn
        return conn

    async def _open_embedded(self, host: HostConfig, timeout: float) -> Opened:
        """Same client code path as any host, but trusting only this process's server key."""
        if self._embedded is None:
            if self._embedded_factory is None:
                raise no_embedded_hosts(host)
            self._embedded = self._embedded_factory()
        login = await self._embedded.start(host, self.embedded_root)
        endpoint = Endpoint(
            name=host.name,
            target=login.address,
            port=login.port,
            user=login.user,
            client_keys=[login.client_key],
        )
        return await self._connector.open(
            endpoint, timeout=timeout, known_hosts=login.known_hosts, config=[]
        )


__all__ = [
    "CompletedProcess",
    "Connection",
    "ConnectionPool",
    "RemoteStream",
    "command_line",
]
