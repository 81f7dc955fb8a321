"""What every benchmark shares: the machine it ran on, its targets, and its files.

A benchmark writes ``<name>.json`` (everything, for tools) and ``<name>.md`` (its table, for
people) into ``benchmarks/results/``, with the machine and the exact command; ``python -m
benchmarks.collect`` joins the Markdown into ``benchmarks/results/README.md``. Files are
replaced whole (written beside, then renamed): a run that dies leaves the last good ones.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

import yaml

RESULTS = Path(__file__).resolve().parent / "results"
# a simulator that loads at once and runs fast, so what orch itself costs shows, not the
# engine's; no faster than one client core can time its streams on a busy machine (decode steps
# of several ms): at 20x the client read chunks together, and orch rightly failed the runs
SIM_ENV = {"ORCH_SIM_LOAD_S": "0", "ORCH_SIM_SPEED": "5"}
PACKAGES = ("orch", "pandas", "matplotlib", "asyncssh", "aiohttp", "pydantic")


@dataclass(frozen=True)
class Machine:
    cores: int | None
    cpu: str | None
    python: str
    system: str
    packages: dict[str, str | None]

    @classmethod
    def here(cls) -> Machine:
        return cls(
            cores=os.cpu_count(),
            cpu=_cpu_model(),
            python=platform.python_version(),
            system=f"{platform.system()} {platform.release()} {platform.machine()}",
            packages={name: _version(name) for name in PACKAGES},
        )

    def line(self) -> str:
        versions = ", ".join(f"{k} {v}" for k, v in self.packages.items() if v)
        return (
            f"{self.cores} cores ({self.cpu or 'unknown CPU'}), Python {self.python}, "
            f"{self.system}; {versions}"
        )


@dataclass(frozen=True)
class Target:
    """One target of the issue: ``value`` against ``limit`` (``at_most``: lower is better)."""

    name: str
    value: float
    limit: float
    unit: str
    at_most: bool = True

    @property
    def met(self) -> bool:
        return self.value <= self.limit if self.at_most else self.value >= self.limit

    def line(self) -> str:
        sign = "≤" if self.at_most else "≥"
        verdict = "met" if self.met else f"missed by {abs(self.value - self.limit):.3g} {self.unit}"
        return (
            f"- {self.name}: {self.value:.3g} {self.unit} (target {sign} {self.limit:g} "
            f"{self.unit}): {verdict}"
        )


@dataclass
class Bench:
    """One benchmark's outcome: a table (``columns`` x ``rows``), its targets and notes."""

    name: str
    title: str
    columns: list[str]
    rows: list[list[str | float | int | None]] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    smoke: bool = False
    machine: Machine = field(default_factory=Machine.here)
    command: str = ""  # default: `python -m benchmarks.<name>` and this run's arguments

    def __post_init__(self) -> None:
        if not self.command:
            self.command = shlex.join(["python", "-m", f"benchmarks.{self.name}", *sys.argv[1:]])

    def markdown(self) -> str:
        head = "| " + " | ".join(self.columns) + " |"
        rule = "|" + "|".join("---" for _ in self.columns) + "|"
        body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in self.rows]
        parts = [f"## {self.title}", "", head, rule, *body, ""]
        if self.targets:
            parts += [*(t.line() for t in self.targets), ""]
        parts += [*(f"{note}" for note in self.notes), ""] if self.notes else []
        parts += [f"Machine: {self.machine.line()}.", "", f"Command: `{self.command}`", ""]
        return "\n".join(parts)

    def write(self, out: Path = RESULTS) -> tuple[Path, Path]:
        """``<name>.json`` and ``<name>.md`` in ``out``, each replaced whole."""
        out.mkdir(parents=True, exist_ok=True)
        data = asdict(self)
        data["targets"] = [{**asdict(t), "met": t.met} for t in self.targets]
        json_path = replace_file(out / f"{self.name}.json", json.dumps(data, indent=2) + "\n")
        md_path = replace_file(out / f"{self.name}.md", self.markdown())
        return json_path, md_path

    def publish(self, out: Path = RESULTS) -> None:
        """Write the files and show the table and where they went: every benchmark's last step."""
        json_path, md_path = self.write(out)
        print(self.markdown())
        print(f"wrote {json_path} and {md_path}")


def _cell(value: str | float | int | None) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def replace_file(path: Path, text: str) -> Path:
    """Write ``text`` beside ``path``, then rename it over: never half a file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def arguments(doc: str, smoke: str, **numbers: int) -> argparse.Namespace:
    """A benchmark's command line: ``--smoke`` (``smoke`` says what it then does), ``--out``,
    and one ``--name N`` per keyword (its default)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    for name, default in numbers.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--smoke", action="store_true", help=smoke)
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args()


def embedded_host(tmp: Path) -> tuple[dict[str, str], Path]:
    """The environment and hosts.yaml of one embedded host, ``sim``, living under ``tmp``."""
    env = {**os.environ, "ORCH_EMBEDDED_ROOT": str(tmp / "embedded"), "NO_COLOR": "1"}
    hosts = tmp / "hosts.yaml"
    hosts.write_text(yaml.safe_dump({"hosts": {"sim": {"transport": "embedded", "env": SIM_ENV}}}))
    return env, hosts


def orch(
    args: list[str], env: dict[str, str], *, allowed: tuple[int, ...] = (0,)
) -> subprocess.CompletedProcess[str]:
    """``python -m orchestrator ARGS``; an exit status not in ``allowed`` ends the benchmark,
    saying what orch said."""
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in allowed:
        raise SystemExit(
            f"orch {' '.join(args[:2])} failed ({done.returncode}):\n"
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return done


def free_port() -> int:
    """A port the kernel says is free now: a fixed one collides with whatever else runs here
    (another suite's servers take ports from the same range)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
