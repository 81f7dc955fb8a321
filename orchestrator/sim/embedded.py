"""An SSH server inside the controller process, standing in for a GPU host (``transport: embedded``).

Demos and laptops have no GPU host and no sshd to spare. This server listens on 127.0.0.1 on an
ephemeral port, and the controller reaches it through exactly the same client code as any real
host: an SSH handshake, a host key checked against known_hosts (one holding only this server's
in-memory key, trusted by this process alone), public-key auth with a per-process key, commands
as ``/bin/sh -c <command>`` and SFTP. Commands run as local subprocesses in the host's sandbox
(the simulator and a fake ``nvidia-smi`` on PATH, unless the host's ``python`` is a real
engine's or it is declared ``gpus: none``: ``sim.hostsandbox``), with the sandbox home as
HOME and cwd.

``SimulatedHosts`` is what the entry point hands the pool (``transport.inprocess``): the
transport reaches these servers only through it, never by importing the simulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import getpass
import os
import posixpath
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path

import asyncssh

from orchestrator.config.hostconfig import HostConfig
from orchestrator.sim.hostsandbox import prepare_host_sandbox, session_env
from orchestrator.transport.hostkeys import public_line
from orchestrator.transport.inprocess import EmbeddedLogin

ROOT_ENV = "ORCH_EMBEDDED_ROOT"
DEFAULT_ROOT = Path("~/.cache/orch/embedded")
KILL_GRACE_S = 2.0


def embedded_root(name: str, *, base: Path | None = None) -> Path:
    """``$ORCH_EMBEDDED_ROOT/<name>`` or ``~/.cache/orch/embedded/<name>``: kept between runs,
    so an agent pushed once is found again next time."""
    chosen = base or os.environ.get(ROOT_ENV) or DEFAULT_ROOT
    return Path(chosen).expanduser() / name


@functools.cache
def client_key() -> asyncssh.SSHKey:
    """The key this process logs in to its embedded hosts with (never written to disk)."""
    return asyncssh.generate_private_key("ssh-ed25519", comment="orch-embedded-client")


class _HomeSFTPServer(asyncssh.SFTPServer):
    """Plain SFTP on the real filesystem, but relative paths start at the sandbox home, as
    OpenSSH's start in the login directory (so ``realpath('.')`` is the home)."""

    def __init__(self, chan: asyncssh.SSHServerChannel, *, home: bytes) -> None:
        super().__init__(chan)
        self._home = home

    def map_path(self, path: bytes) -> bytes:
        return path if path.startswith(b"/") else posixpath.join(self._home, path)


class _ServerConnections(asyncssh.SSHServer):
    def __init__(self, live: set[asyncssh.SSHServerConnection]) -> None:
        self._live = live
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._live.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._live.discard(self._conn)


class EmbeddedServer:
    """One embedded host: ``await start()``, connect to ``address:port``, ``await stop()``."""

    address = "127.0.0.1"

    def __init__(
        self, name: str, root: Path, *, python: str = sys.executable, gpus: bool = True
    ) -> None:
        self.name = name
        self.root = Path(root)
        self.python = python  # the host's interpreter: orch's own runs the simulator
        self.gpus = gpus  # False: declared `gpus: none`, no simulated GPUs
        self.port = 0
        self.user = _local_user()
        self.client_key = client_key()
        self.home: Path | None = None
        self.env: dict[str, str] = {}
        self._host_key = asyncssh.generate_private_key("ssh-ed25519", comment=f"orch-{name}")
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._processes: set[asyncio.subprocess.Process] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        sandbox = await loop.run_in_executor(
            None,
            functools.partial(prepare_host_sandbox, self.root, python=self.python, gpus=self.gpus),
        )
        self.home = Path(sandbox.home)
        self.env = session_env(sandbox)
        authorized = asyncssh.import_authorized_keys(public_line(self.client_key) + "\n")
        self._acceptor = await asyncssh.listen(
            self.address,
            0,
            server_factory=lambda: _ServerConnections(self._connections),
            server_host_keys=[self._host_key],
            authorized_client_keys=authorized,
            password_auth=False,
            kbdint_auth=False,
            process_factory=self._session,
            sftp_factory=functools.partial(_HomeSFTPServer, home=os.fsencode(self.home)),
            allow_scp=False,
            encoding=None,
        )
        self.port = self._acceptor.get_port()

    def login(self) -> EmbeddedLogin:
        """How the pool reaches this server once started."""
        return EmbeddedLogin(
            self.address, self.port, self.user, self.client_key, self.known_hosts()
        )

    def known_hosts(self) -> asyncssh.SSHKnownHosts:
        """Trust exactly this server's key, at exactly its address and port."""
        line = f"[{self.address}]:{self.port} {public_line(self._host_key)}\n"
        return asyncssh.import_known_hosts(line)

    async def stop(self) -> None:
        """Stop listening, drop every connection, and end any command still running."""
        if self._acceptor is not None:
            self._acceptor.close()
            self._acceptor = None
        for conn in list(self._connections):
            conn.close()
        await asyncio.gather(*(_end(p) for p in list(self._processes)), return_exceptions=True)

    # -- one SSH session ---------------------------------------------------------------------
    async def _session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command
        if command is None:
            process.stderr.write(b"this embedded host runs commands only, no interactive shell\n")
            process.exit(1)
            return
        try:
            local = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.home,
                env=self.env,
                start_new_session=True,  # its own process group: a closed channel ends it all
            )
        except OSError as exc:
            process.stderr.write(f"cannot start /bin/sh: {exc}\n".encode())
            process.exit(127)
            return
        self._processes.add(local)
        try:
            await self._serve(process, local)
        finally:
            self._processes.discard(local)
            await _end(local)

    async def _serve(
        self, process: asyncssh.SSHServerProcess[bytes], local: asyncio.subprocess.Process
    ) -> None:
        """Wire the channel to the subprocess until it exits (report status) or the channel
        closes (kill it), whichever comes first."""
        assert local.stdin is not None and local.stdout is not None and local.stderr is not None
        await process.redirect(stdin=local.stdin)
        process.set_redirect_pid(-local.pid)  # 'signal' requests go to the whole process group
        output = asyncio.gather(
            _pump(local.stdout, process.stdout), _pump(local.stderr, process.stderr)
        )
        finished = asyncio.ensure_future(_exit_after(output, local))
        closed = asyncio.ensure_future(process.wait_closed())
        try:
            await asyncio.wait({finished, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not finished.done():
                finished.cancel()
                output.cancel()
        if finished.done() and not finished.cancelled() and not process.is_closing():
            code = finished.result()
            with contextlib.suppress(OSError, asyncssh.Error):
                if code < 0:
                    process.exit_with_signal(signal.Signals(-code).name.removeprefix("SIG"))
                else:
                    process.exit(code)
        with contextlib.suppress(OSError, asyncssh.Error, asyncio.TimeoutError):
            await asyncio.wait_for(process.wait_closed(), KILL_GRACE_S)  # flushes stdin forwarding


class SimulatedHosts:
    """One pool's embedded hosts (``transport.inprocess.EmbeddedHosts``): an ``EmbeddedServer``
    per host, in its sandbox ``embedded_root(host, base=base)``, kept until the pool closes."""

    def __init__(self) -> None:
        self._servers: dict[str, EmbeddedServer] = {}

    async def start(self, host: HostConfig, base: Path | None) -> EmbeddedLogin:
        server = self._servers.get(host.name)
        if server is None:
            root = embedded_root(host.name, base=base)
            server = EmbeddedServer(host.name, root, python=host.python, gpus=not host.cpu_only)
            await server.start()
            self._servers[host.name] = server
        return server.login()

    async def stop(self) -> None:
        servers, self._servers = list(self._servers.values()), {}
        await asyncio.gather(*(s.stop() for s in servers), return_exceptions=True)


async def _pump(source: asyncio.StreamReader, sink: asyncssh.SSHWriter[bytes]) -> None:
    """Copy until EOF, honouring the channel's flow control; a closed channel ends the copy."""
    try:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
    except (OSError, asyncssh.Error):
        return


async def _exit_after(output: Awaitable[object], local: asyncio.subprocess.Process) -> int:
    """The exit code, once all of stdout/stderr has been forwarded (nothing is cut short)."""
    await output
    return await local.wait()


async def _end(local: asyncio.subprocess.Process) -> None:
    """SIGTERM the process group, then SIGKILL after a grace period; reap the shell."""
    if local.returncode is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(local.pid, sig)
        try:
            await asyncio.wait_for(local.wait(), KILL_GRACE_S)
            return
        except asyncio.TimeoutError:
            continue


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
