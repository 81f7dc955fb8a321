"""A fleet of real OpenSSH ``sshd`` servers on 127.0.0.1, one port each, for the fan-out benchmark.

The same ideas as the tests' ``tests/fixtures/sshd.py`` (which benchmarks do not import): each
host is its own ``sshd -D -e`` with its own ed25519 host key and a simulated GPU host's sandbox
(the simulator, and an ``nvidia-smi`` replaying the simulated GPUs, on PATH through ``SetEnv``);
every host trusts one client key, and one known_hosts file lists every host, so host keys are
checked strictly. What the hosts spend is read from /proc (``Fleet.cpu_s``).

Nothing may outlive the benchmark: ``Fleet`` is a context manager that stops every listener,
every session under it and every process started through a host (tagged by an environment
marker) on the way out, whether the benchmark ended, failed or was interrupted; and each
listener is told by the kernel to die with the benchmark (``PR_SET_PDEATHSIG``) should it be
killed outright.
"""

from __future__ import annotations

import ctypes
import getpass
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from orchestrator.remote.gpus import APPS_QUERY, GPU_ID_QUERY, GPU_QUERY
from orchestrator.remote.procs import kill_quietly
from orchestrator.sim.hostsandbox import prepare_host_sandbox, session_env
from tests.fixtures.procs import pids_with_env
from tests.fixtures.sshd import banner, free_port, keygen

MARKER = "ORCH_BENCH_SSHD_HOST"
START_TIMEOUT_S = 10.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1

_CONFIG = """\
ListenAddress 127.0.0.1:{port}
HostKey {host_key}
PidFile {pid_file}
AuthorizedKeysFile {authorized_keys}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
Subsystem sftp internal-sftp
PrintMotd no
LogLevel ERROR
{setenv}
"""


def sshd_binary() -> str:
    """The absolute sshd path (sshd refuses to re-exec from a relative one)."""
    found = shutil.which("sshd") or (
        "/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else None
    )
    if found is None:
        raise SystemExit("sshd is missing: install openssh-server (`make sshd` does)")
    return str(Path(found).resolve())


def replay_nvidia_smi(smi: Path, env: dict[str, str]) -> None:
    """Make the host's nvidia-smi as quick as the real binary: a shell script printing what the
    simulator's printed for the queries orch makes (the simulator's own for any other).

    The simulator's nvidia-smi is a Python program, run three times by each probe: on this
    machine, where every host's work shares the controller's cores, it was half of what the
    hosts spent, a cost of the simulation that no real GPU host pays in Python.
    """
    sim = smi.with_name("nvidia-smi.sim")
    smi.replace(sim)
    cases = []
    for query in (GPU_QUERY, GPU_ID_QUERY, APPS_QUERY):
        argv = [str(sim), *query]
        printed = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
        cases.append(f"  {shlex.quote(' '.join(query))}) printf %s {shlex.quote(printed)} ;;")
    fallback = f'  *) exec {shlex.quote(str(sim))} "$@" ;;'
    smi.write_text("\n".join(["#!/bin/sh", 'case "$*" in', *cases, fallback, "esac", ""]))
    smi.chmod(0o755)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the benchmark dies, however it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Host:
    """One running sshd: its port, its files, its sandbox."""

    name: str
    root: Path
    client_key: Path
    sshd: str
    port: int = field(default_factory=free_port)
    user: str = field(default_factory=getpass.getuser)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.etc = self.root / "etc"
        self.etc.mkdir(parents=True, exist_ok=True)
        self.host_key = keygen(self.etc / "ssh_host_ed25519_key", comment=f"host-{self.name}")
        (self.etc / "authorized_keys").write_text(
            self.client_key.with_name(self.client_key.name + ".pub").read_text()
        )
        sandbox = prepare_host_sandbox(self.root / "sandbox", python=sys.executable)
        self.workdir = Path(sandbox.home) / ".cache" / "orch"
        self.env = {**session_env(sandbox), MARKER: str(self.root)}
        replay_nvidia_smi(self.root / "sandbox" / "bin" / "nvidia-smi", self.env)

    def known_hosts_line(self) -> str:
        key_type, blob = (
            self.host_key.with_name(self.host_key.name + ".pub").read_text().split()[:2]
        )
        return f"[127.0.0.1]:{self.port} {key_type} {blob}"

    def start(self) -> None:
        """Start sshd; a port taken meanwhile by someone else is retried on a fresh one."""
        for _attempt in range(5):
            if self._try_start():
                return
            self.port = free_port()
        raise RuntimeError(f"sshd for {self.name} could not bind a port:\n{self._log()}")

    def _try_start(self) -> bool:
        config = self.etc / "sshd_config"
        config.write_text(
            _CONFIG.format(
                port=self.port,
                host_key=self.host_key,
                pid_file=self.etc / "sshd.pid",
                authorized_keys=self.etc / "authorized_keys",
                # one line: sshd keeps only the first SetEnv directive it reads
                setenv="SetEnv " + " ".join(f'"{k}={v}"' for k, v in sorted(self.env.items())),
            )
        )
        with (self.etc / "sshd.log").open("ab") as log:
            self.process = subprocess.Popen(
                [self.sshd, "-D", "-e", "-f", str(config)],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 (no threads run while it starts)
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if "Address already in use" in self._log():
                    return False
                raise RuntimeError(f"sshd for {self.name} exited at start:\n{self._log()}")
            if banner("127.0.0.1", self.port).startswith(b"SSH-2.0-OpenSSH"):
                return True
            time.sleep(0.02)
        raise RuntimeError(f"sshd for {self.name} did not answer in {START_TIMEOUT_S}s")

    def stop(self) -> None:
        """The listener, its sessions and anything started through this host: all gone."""
        proc, self.process = self.process, None
        if proc is not None:
            for pid in ProcessTable.now().tree(proc.pid)[1:]:
                kill_quietly(pid)
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in pids_with_env(MARKER, str(self.root)):
            kill_quietly(pid)

    def _log(self) -> str:
        try:
            return (self.etc / "sshd.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""


class Fleet:
    """``n`` hosts under ``base``, started on entry and all stopped on exit.

    SIGTERM is turned into SystemExit while the fleet runs, so that ``kill`` of the benchmark
    stops the fleet as Ctrl-C does.
    """

    def __init__(self, base: Path, n: int) -> None:
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.client_key = keygen(base / "id_ed25519", comment="orch-bench")
        self.known_hosts = base / "known_hosts"
        self.ssh_config = base / "ssh_config"  # empty: ~/.ssh/config plays no part
        self.ssh_config.write_text("")
        sshd = sshd_binary()
        names = [f"host-{i:02d}" for i in range(1, n + 1)]
        with ThreadPoolExecutor(max_workers=4) as pool:  # key generation and sandboxes
            self.hosts = list(
                pool.map(lambda name: Host(name, base / name, self.client_key, sshd), names)
            )
        self._old_term: Callable[[int, FrameType | None], Any] | int | None = None
        self._trapping = False

    def __enter__(self) -> Fleet:
        self._old_term = signal.signal(signal.SIGTERM, _exit_on_term)
        self._trapping = True
        try:
            for host in self.hosts:
                host.start()
        except BaseException:
            self.stop()
            raise
        lines = [h.known_hosts_line() for h in self.hosts]
        self.known_hosts.write_text("".join(line + "\n" for line in lines))
        self.known_hosts.chmod(0o600)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        for host in self.hosts:
            host.stop()
        if self._trapping:
            signal.signal(signal.SIGTERM, self._old_term)
            self._trapping = False

    def _listeners(self, hosts: int | None = None) -> list[int]:
        return [h.process.pid for h in self.hosts[:hosts] if h.process is not None]

    def sessions(self) -> set[int]:
        """Every per-connection sshd of every host (zombies too: not yet reaped)."""
        table = ProcessTable.now()
        return {pid for listener in self._listeners() for pid in table.children(listener)}

    def settle(self, kept: set[int], timeout: float = 10.0) -> None:
        """Wait until every session but ``kept`` (those open before) has ended."""
        deadline = time.monotonic() + timeout
        while self.sessions() - kept and time.monotonic() < deadline:
            time.sleep(0.02)

    def cpu_s(self, hosts: int | None = None) -> float:
        """CPU seconds spent so far under the (first ``hosts``) listeners: sshd, its sessions,
        their shells, agents and probes, ended or still running."""
        table = ProcessTable.now()
        return sum(table.cpu_s(listener) for listener in self._listeners(hosts))


@dataclass(frozen=True)
class ProcessTable:
    """One look at /proc: each process's parent and the CPU it and its reaped children used."""

    kids: dict[int, list[int]]
    ticks: dict[int, int]  # utime + stime + cutime + cstime

    @classmethod
    def now(cls) -> ProcessTable:
        kids: dict[int, list[int]] = {}
        ticks: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid = int(entry.name)
            kids.setdefault(int(fields[1]), []).append(pid)
            ticks[pid] = sum(int(f) for f in fields[11:15])
        return cls(kids, ticks)

    def children(self, pid: int) -> list[int]:
        return self.kids.get(pid, [])

    def tree(self, root: int) -> list[int]:
        """``root`` and every process under it, parents first."""
        found, i = [root], 0
        while i < len(found):
            found += self.children(found[i])
            i += 1
        return found

    def cpu_s(self, root: int) -> float:
        """What ``root``'s tree has used: a process still there counts itself and the children
        it reaped, one that has ended counts in its parent's figure."""
        return sum(self.ticks.get(pid, 0) for pid in self.tree(root)) / CLOCK_TICKS


def _exit_on_term(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
