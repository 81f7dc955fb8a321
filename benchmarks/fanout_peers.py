"""The fan-out benchmark's peers: ``ssh host true`` on every host at once, and Ansible's ping.

Both reach the same sshd fleet as orch, with the same client key and the same known_hosts,
host keys checked strictly, and ~/.ssh/config left out (``-F`` an empty file). Ansible
(ansible-core from PyPI) lives in ``benchmarks/.venvs/ansible``, installed on first use.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchmarks.sshd import CLOCK_TICKS, Fleet, Host

ANSIBLE_VENV = Path(__file__).resolve().parent / ".venvs" / "ansible"
ANSIBLE_PACKAGE = "ansible-core"


@dataclass(frozen=True)
class Sample:
    """One timed command: wall seconds, and the controller's CPU seconds (user + system) of
    every process it started."""

    wall: float
    cpu: float


def children_cpu() -> float:
    """CPU seconds of every child this process has waited for, so far."""
    got = resource.getrusage(resource.RUSAGE_CHILDREN)
    return got.ru_utime + got.ru_stime


def ssh_argv(fleet: Fleet, host: Host) -> list[str]:
    """OpenSSH as a script would call it: no prompt, strict host keys, our key only."""
    return [
        "ssh",
        "-F",
        str(fleet.ssh_config),
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={fleet.known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "IdentitiesOnly=yes",
        "-i",
        str(fleet.client_key),
        "-p",
        str(host.port),
        f"{host.user}@127.0.0.1",
    ]


def ssh_parallel(fleet: Fleet, n: int) -> Sample:
    """``ssh host true`` on the first ``n`` hosts, all started at once; every one must succeed."""
    cpu, started = children_cpu(), time.perf_counter()
    procs = [
        subprocess.Popen(
            [*ssh_argv(fleet, host), "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for host in fleet.hosts[:n]
    ]
    errors = [p.communicate()[1] for p in procs]
    sample = Sample(time.perf_counter() - started, children_cpu() - cpu)
    failed = [(p.returncode, e) for p, e in zip(procs, errors, strict=True) if p.returncode]
    if failed:
        raise SystemExit(f"ssh host true failed on {len(failed)} hosts: {failed[0]!r}")
    return sample


def ansible() -> Path:
    """The ``ansible`` command, installing ansible-core into its own venv when it is missing."""
    command = ANSIBLE_VENV / "bin" / "ansible"
    if not command.exists():
        print(f"installing {ANSIBLE_PACKAGE} into {ANSIBLE_VENV}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(ANSIBLE_VENV)], check=True)
        pip = [str(ANSIBLE_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, ANSIBLE_PACKAGE], check=True)
    return command


def ansible_version(command: Path) -> str:
    done = subprocess.run([str(command), "--version"], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()[0]


@dataclass(frozen=True)
class AnsibleSetup:
    """Ansible's inventories (one per host count) and its environment, all under ``tmp``."""

    tmp: Path
    fleet: Fleet

    def inventory(self, n: int) -> Path:
        ssh_args = (
            f"-F {self.fleet.ssh_config} -o StrictHostKeyChecking=yes "
            f"-o UserKnownHostsFile={self.fleet.known_hosts} -o GlobalKnownHostsFile=/dev/null "
            "-o IdentitiesOnly=yes"
        )
        hosts = {
            h.name: {"ansible_host": "127.0.0.1", "ansible_port": h.port}
            for h in self.fleet.hosts[:n]
        }
        variables = {
            "ansible_user": self.fleet.hosts[0].user,
            "ansible_ssh_private_key_file": str(self.fleet.client_key),
            "ansible_python_interpreter": sys.executable,
            "ansible_ssh_common_args": ssh_args,
        }
        path = self.tmp / f"inventory-{n}.yaml"
        path.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": variables}}))
        return path

    @property
    def control_dir(self) -> Path:
        return self.tmp / "cp"

    def env(self, forks: int) -> dict[str, str]:
        """Ansible's defaults, but for no retry files, no cowsay, its files kept in ``tmp`` and
        forks raised to the number of hosts (its default is 5): every host at once, as orch."""
        config = self.tmp / "ansible.cfg"
        config.write_text("[defaults]\n")  # not ./ansible.cfg nor ~/.ansible.cfg
        return {
            **os.environ,
            "ANSIBLE_CONFIG": str(config),
            "ANSIBLE_HOME": str(self.tmp / "ansible-home"),
            "ANSIBLE_LOCAL_TEMP": str(self.tmp / "ansible-local"),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(self.control_dir),
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "ANSIBLE_NOCOWS": "1",
            "ANSIBLE_FORKS": str(forks),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }

    def masters(self) -> list[int]:
        """The ssh ControlPersist masters Ansible left running (they outlive each command)."""
        tag = str(self.control_dir).encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if tag in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def masters_cpu(self) -> float:
        total = 0
        for pid in self.masters():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total / CLOCK_TICKS

    def ping(self, command: Path, n: int) -> tuple[Sample, float]:
        """``ansible all -m ping`` on the first ``n`` hosts, and the CPU the hosts spent on it.
        Its own CPU counts the ssh masters it keeps (ControlPersist, Ansible's default) as well
        as the processes it waited for."""
        argv = [str(command), "all", "-i", str(self.inventory(n)), "-m", "ping", "-f", str(n)]
        hosts, masters = self.fleet.cpu_s(), self.masters_cpu()
        cpu, started = children_cpu(), time.perf_counter()
        done = subprocess.run(argv, env=self.env(n), capture_output=True, text=True, check=False)
        wall = time.perf_counter() - started
        spent = children_cpu() - cpu + self.masters_cpu() - masters
        if done.returncode != 0:
            raise SystemExit(f"ansible failed ({done.returncode}):\n{done.stdout[-2000:]}")
        # no waiting for sessions to end: the masters' stay open
        return Sample(wall, spent), self.fleet.cpu_s() - hosts

    def stop_masters(self) -> None:
        """Stop the ControlPersist masters this benchmark's Ansible started (by their pids)."""
        for pid in self.masters():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + 5
        while self.masters() and time.monotonic() < deadline:
            time.sleep(0.02)
