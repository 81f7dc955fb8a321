"""Fan-out: `orch hosts check` over 1, 8, 32 and 64 real sshd hosts, against ssh and Ansible.

Every host is its own OpenSSH ``sshd`` on 127.0.0.1 (``benchmarks/sshd.py``), a simulated GPU
host; orch, ssh and Ansible reach them with one client key and one known_hosts file, host keys
checked. For each host count N:

- `orch hosts check` on N hosts (a new process, as a user runs it), warm: the agent was pushed
  by a run before; its wall time, the controller's CPU (the orch process), and the CPU the
  hosts spent meanwhile (every sshd session, shell, agent and probe, as their listeners reaped
  them). Cold (the agent removed from the N hosts first, so pushed again): wall time only;
- the sequential loop: one `orch hosts check --only HOST` after another, N invocations;
- `ssh host true` on the N hosts, all at once (N ssh processes);
- Ansible (ansible-core from PyPI): `ansible all -m ping` with forks = N, as shipped otherwise
  (ssh ControlPersist on, pipelining off), warm: its ssh masters are up from a run before.

Each figure but the sequential loop's is the median of ``--repeats`` runs.

    python -m benchmarks.fanout
    python -m benchmarks.fanout --smoke          # 1 and 2 hosts, orch and parallel ssh, for CI
    python -m benchmarks.fanout --profile 64     # cProfile of the controller on 64 hosts
"""

from __future__ import annotations

import io
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from benchmarks.common import Bench, Target, arguments, orch, replace_file
from benchmarks.fanout_peers import (
    AnsibleSetup,
    Sample,
    ansible,
    ansible_version,
    children_cpu,
    ssh_parallel,
)
from benchmarks.sshd import Fleet

SIZES = [1, 8, 32, 64]
SMOKE_SIZES = [1, 2]
RATIO_LIMIT = 3.0  # 64 hosts in at most 3x the time of one
PROFILE_LINES = 30


@dataclass
class Figures:
    """Everything measured at one host count (None: not measured in this run)."""

    orch: Sample
    hosts_cpu: float
    cold: float
    parallel_ssh: Sample
    sequential: float | None = None
    ansible: Sample | None = None
    ansible_hosts_cpu: float | None = None
    ansible_cold: float | None = None


@dataclass
class Setup:
    tmp: Path
    fleet: Fleet
    env: dict[str, str] = field(default_factory=lambda: {**os.environ, "NO_COLOR": "1"})

    def hosts_file(self, n: int) -> Path:
        """hosts.yaml for the first ``n`` hosts: address, port, user, key, the venv's python."""
        entries = {
            h.name: {
                "address": "127.0.0.1",
                "port": h.port,
                "user": h.user,
                "identity_file": str(self.fleet.client_key),
                "python": sys.executable,
                "workdir": str(h.workdir),
                "gpus": "2 x RTX A6000",  # what the simulated hosts have: a check that passes
            }
            for h in self.fleet.hosts[:n]
        }
        doc = {
            "known_hosts": str(self.fleet.known_hosts),
            "ssh_config": str(self.fleet.ssh_config),
            "hosts": entries,
        }
        path = self.tmp / f"hosts-{n}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def check_args(self, n: int, *only: str) -> list[str]:
        args = ["hosts", "check", "--hosts", str(self.hosts_file(n)), "--json"]
        args += ["--known-hosts", str(self.fleet.known_hosts)]
        return [*args, *(a for name in only for a in ("--only", name))]

    def check(self, n: int, *only: str) -> tuple[Sample, float]:
        """One `orch hosts check`: its sample, and the CPU the hosts spent on it."""
        kept, hosts_cpu = self.fleet.sessions(), self.fleet.cpu_s()
        cpu, started = children_cpu(), time.perf_counter()
        orch(self.check_args(n, *only), self.env)
        sample = Sample(time.perf_counter() - started, children_cpu() - cpu)
        self.fleet.settle(kept)
        return sample, self.fleet.cpu_s() - hosts_cpu

    def forget_agent(self, n: int) -> None:
        """Remove the pushed agent from the first ``n`` hosts: the next check pushes it."""
        for host in self.fleet.hosts[:n]:
            for pyz in host.workdir.glob("agent-*.pyz"):
                pyz.unlink()


def median(samples: list[Sample]) -> Sample:
    return Sample(
        statistics.median(s.wall for s in samples), statistics.median(s.cpu for s in samples)
    )


def measure(setup: Setup, n: int, repeats: int, peers: AnsibleSetup | None) -> Figures:
    setup.forget_agent(n)
    cold, _ = setup.check(n)
    command = ansible() if peers else None
    ansible_cold = None
    if peers and command:
        peers.stop_masters()  # those of a smaller host count: cold is cold for every host
        ansible_cold = peers.ping(command, n)[0].wall
    checks, hosts_cpu, ssh, pings, ansible_hosts = [], [], [], [], []
    for _ in range(repeats):  # the tools take turns: a noisy moment hurts none alone
        sample, spent = setup.check(n)
        checks.append(sample)
        hosts_cpu.append(spent)
        ssh.append(ssh_parallel(setup.fleet, n))
        if peers and command:
            ping, spent = peers.ping(command, n)
            pings.append(ping)
            ansible_hosts.append(spent)
    sequential = None
    if peers:  # the full run only: N new processes, one after another
        started = time.perf_counter()
        for host in setup.fleet.hosts[:n]:
            orch(setup.check_args(n, host.name), setup.env)
        sequential = time.perf_counter() - started
    return Figures(
        orch=median(checks),
        hosts_cpu=statistics.median(hosts_cpu),
        cold=cold.wall,
        parallel_ssh=median(ssh),
        sequential=sequential,
        ansible=median(pings) if pings else None,
        ansible_hosts_cpu=statistics.median(ansible_hosts) if ansible_hosts else None,
        ansible_cold=ansible_cold,
    )


def rows(sizes: list[int], got: dict[int, Figures]) -> list[list[str | float | int | None]]:
    def row(label: str, value: Callable[[Figures], float | None]) -> list[str | float | int | None]:
        return [label, *(value(got[n]) for n in sizes)]

    cores = os.cpu_count() or 1
    return [
        row("`orch hosts check`, warm: wall s", lambda f: f.orch.wall),
        row("… orch's CPU s (the controller)", lambda f: f.orch.cpu),
        row("… the hosts' CPU s (sshd, agent, probe)", lambda f: f.hosts_cpu),
        row(
            f"… CPU floor on {cores} cores s ((controller + hosts) / cores)",
            lambda f: (f.orch.cpu + f.hosts_cpu) / cores,
        ),
        row("`orch hosts check`, cold (agent pushed): wall s", lambda f: f.cold),
        row("orch one host at a time (N invocations): wall s", lambda f: f.sequential),
        row("`ssh host true`, N at once: wall s", lambda f: f.parallel_ssh.wall),
        row("… the ssh processes' CPU s", lambda f: f.parallel_ssh.cpu),
        row(
            "`ansible all -m ping`, forks = N, warm: wall s",
            lambda f: f.ansible.wall if f.ansible else None,
        ),
        row(
            "… Ansible's CPU s (its ssh masters included)",
            lambda f: f.ansible.cpu if f.ansible else None,
        ),
        row("… the hosts' CPU s", lambda f: f.ansible_hosts_cpu),
        row("`ansible all -m ping`, cold: wall s", lambda f: f.ansible_cold),
    ]


def targets(sizes: list[int], got: dict[int, Figures]) -> list[Target]:
    most = max(sizes)
    found = [
        Target(
            f"orch: {most} hosts against 1 (warm wall time)",
            got[most].orch.wall / got[1].orch.wall,
            RATIO_LIMIT,
            "×",
        )
    ]
    for n in sizes:
        peer = got[n].ansible
        if peer is not None:
            found.append(
                Target(f"orch against Ansible at {n} hosts", got[n].orch.wall / peer.wall, 1.0, "×")
            )
    return found


# the controller under cProfile, timed in CPU seconds (waiting for the hosts costs nothing)
_PROFILED = """\
import cProfile, runpy, sys, time
out, sys.argv = sys.argv[1], ["orch", *sys.argv[2:]]
profiler = cProfile.Profile(time.process_time)
profiler.enable()
try:
    runpy.run_module("orchestrator", run_name="__main__")
except SystemExit as exc:
    if exc.code:
        raise
finally:
    profiler.disable()
    profiler.dump_stats(out)
"""


def profile(setup: Setup, n: int, out: Path) -> Path:
    """The controller's CPU checking ``n`` warm hosts, by function: the top entries, as text."""
    setup.check(n)  # warm: the agent is there
    raw = setup.tmp / "check.prof"
    argv = [sys.executable, "-c", _PROFILED, str(raw), *setup.check_args(n)]
    subprocess.run(argv, env=setup.env, capture_output=True, check=True)
    text = io.StringIO()
    stats = pstats.Stats(str(raw), stream=text)
    stats.strip_dirs().sort_stats("cumulative").print_stats(PROFILE_LINES)
    stats.sort_stats("tottime").print_stats(PROFILE_LINES)
    path = out / "profiles" / f"fanout-{n}-hosts.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    title = f"`orch hosts check` on {n} warm hosts: the controller's CPU seconds by function"
    kept = [line for line in text.getvalue().splitlines() if str(raw) not in line]  # no /tmp
    return replace_file(path, "\n".join([title, *kept, ""]))


def describe(
    sizes: list[int], got: dict[int, Figures], repeats: int, ansible_is: str | None
) -> list[str]:
    """What the table does not say: how it was measured, and why a target is missed."""
    cores = os.cpu_count() or 1
    runs = "One run of each" if repeats == 1 else f"Medians of {repeats} runs"
    notes = [
        f"{runs} (the sequential loop: one). Warm: the agent was pushed by a run before. Each "
        "`orch hosts check` is a new process: Python start-up and imports are in its wall time "
        "and CPU, as for a user. The sequential loop is orch itself, one `orch hosts check "
        "--only HOST` per host.",
    ]
    most, one = got[max(sizes)], got[1]
    floor = (most.orch.cpu + most.hosts_cpu) / cores
    notes.append(
        f"Every host is an sshd on this machine, so the hosts' work shares the controller's "
        f"{cores} cores, where {max(sizes)} real hosts would each do their own: at "
        f"{max(sizes)} hosts they spent {most.hosts_cpu:.3g} s of CPU "
        f"({most.hosts_cpu / max(sizes):.2g} s a host: sshd, SFTP, the agent's Python and its "
        "probe; each host's nvidia-smi replays the simulator's at a native binary's speed), "
        f"so that check cannot take "
        f"less than {floor:.3g} s here, against {one.orch.wall:.3g} s for one host. What orch "
        f"itself spends grows less: the controller's CPU went from {one.orch.cpu:.3g} s to "
        f"{most.orch.cpu:.3g} s ({most.orch.cpu / one.orch.cpu:.2g}×)."
    )
    if ansible_is:
        notes.append(
            f"Ansible: {ansible_is}, forks raised to N (its default is 5) for every host at "
            "once, as orch; otherwise as shipped: ssh ControlPersist on (a warm run reuses the "
            "connections of the run before, while orch connects anew each time), pipelining "
            "off. Host keys are checked against the same known_hosts; the remote python is "
            "the same interpreter as orch's. Its CPU counts its ssh masters'."
        )
    return notes


def main() -> None:
    args = arguments(
        __doc__ or "",
        "1 and 2 hosts, orch and parallel ssh, one repeat",
        repeats=3,
        most=64,
        profile=0,
    )
    sizes = SMOKE_SIZES if args.smoke else [n for n in SIZES if n <= args.most]
    repeats = 1 if args.smoke else args.repeats
    with tempfile.TemporaryDirectory(prefix="orch-bench-fanout-") as name:
        tmp = Path(name)
        with Fleet(tmp / "fleet", args.profile or max(sizes)) as fleet:
            setup = Setup(tmp, fleet)
            if args.profile:
                print(f"wrote {profile(setup, args.profile, args.out)}")
                return
            peers = None if args.smoke else AnsibleSetup(tmp, fleet)
            peers_version = ansible_version(ansible()) if peers else None
            try:
                got = {n: measure(setup, n, repeats, peers) for n in sizes}
            finally:
                if peers:
                    peers.stop_masters()
    notes = describe(sizes, got, repeats, peers_version)
    bench = Bench(
        name="fanout",
        title="Fan-out of `orch hosts check` against ssh and Ansible",
        columns=["what", *(f"{n} host{'s' if n > 1 else ''}" for n in sizes)],
        rows=rows(sizes, got),
        targets=targets(sizes, got),
        notes=notes,
        smoke=args.smoke,
    )
    bench.publish(args.out)


if __name__ == "__main__":
    main()
