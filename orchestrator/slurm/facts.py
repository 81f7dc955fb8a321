"""What a login node says about its cluster, as pyinfra-style facts: an argv and a pure parser.

Each fact is the command to run on the login node (``argv``) and ``process``, which turns that
command's exit status and output into a typed value. Running them is the caller's business
(`run_fact` over any connection), so every parser is tested on captured output alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from orchestrator.config.hostconfig import ClusterConfig
from orchestrator.errors import OrchError
from orchestrator.slurm.jobs import AllocationRequest, sbatch_argv

T = TypeVar("T", covariant=True)

_VERSION = re.compile(r"^slurm(?:-wlm)?\s+(\d+(?:\.\d+)+\S*)\s*$", re.MULTILINE)
# sbatch prefixes its refusals; the reason is what is left (the last line says it best)
_REFUSAL_PREFIXES = ("sbatch: error: ", "Batch job submission failed: ", "allocation failure: ")
NOT_FOUND = 127  # the shell's status for a command it cannot find
CHECK_RUN_ID = "hosts-check"


class Output(Protocol):
    """A finished command (the transport's ``CompletedProcess`` is one)."""

    @property
    def returncode(self) -> int: ...

    @property
    def stdout(self) -> str: ...

    @property
    def stderr(self) -> str: ...


class Runner(Protocol):
    """Anything that runs an argv on the login node (a transport ``Connection``)."""

    async def run(self, argv: Sequence[str], *, timeout: float | None = None) -> Output: ...


class Fact(Protocol, Generic[T]):
    @property
    def argv(self) -> Sequence[str]: ...

    def process(self, done: Output) -> T: ...


class SlurmFactError(OrchError):
    """A Slurm command on the login node failed where it should answer on any cluster."""


def _failed(argv: Sequence[str], done: Output) -> SlurmFactError:
    said = _last_line(done.stderr) or _last_line(done.stdout)
    message = f"`{' '.join(argv)}` exited with {done.returncode}" + (f": {said}" if said else "")
    if done.returncode == NOT_FOUND:
        hint = (
            "install Slurm's client commands on the login node, or put them on the PATH of a "
            "non-interactive SSH session (~/.bashrc before any 'return if not interactive')"
        )
    else:
        hint = "run the command on the login node to see whether Slurm's controller answers"
    return SlurmFactError(message, hint=hint)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@dataclass(frozen=True)
class SlurmVersion:
    """``sinfo --version``: ``slurm 23.02.7`` (Debian's build says ``slurm-wlm 22.05.8``)."""

    argv: tuple[str, ...] = ("sinfo", "--version")

    def process(self, done: Output) -> str:
        if done.returncode != 0:
            raise _failed(self.argv, done)
        found = _VERSION.search(done.stdout)
        if found is None:
            raise SlurmFactError(
                f"`sinfo --version` printed no Slurm version: {done.stdout.strip()[:200]!r}"
            )
        return found.group(1)


@dataclass(frozen=True)
class Gres:
    """One generic resource of a node: ``gpu:a6000:2`` -> name gpu, type a6000, count 2."""

    name: str
    type: str | None
    count: int

    def __str__(self) -> str:
        return ":".join([self.name, *([self.type] if self.type else []), str(self.count)])


def parse_gres(text: str) -> tuple[Gres, ...]:
    """sinfo's ``%G``: ``gpu:a6000:2(S:0-1),mps:100``; ``(null)`` when a node has none.

    The socket binding in parentheses is dropped; a count-less entry (``gpu:tesla``) means 1,
    as in slurm.conf.
    """
    found: list[Gres] = []
    for item in _split_outside_parens(text.strip()):
        bare = item.split("(", 1)[0].strip()
        if not bare or bare == "(null)" or item.strip() == "(null)":
            continue
        parts = bare.split(":")
        count = int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else None
        kinds = parts[1:-1] if count is not None else parts[1:]
        found.append(Gres(parts[0], ":".join(kinds) or None, 1 if count is None else count))
    return tuple(found)


def _split_outside_parens(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for at, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(text[start:at])
            start = at + 1
    items.append(text[start:])
    return items


@dataclass(frozen=True)
class Partition:
    """A partition as sinfo shows it; ``node_gres`` is what each group of its nodes offers
    (sinfo prints one line per partition and distinct node configuration)."""

    name: str
    state: str  # "up", "down", "drain", "inactive"
    nodes: int
    node_gres: tuple[tuple[Gres, ...], ...]
    default: bool = False

    @property
    def gres(self) -> tuple[Gres, ...]:
        """Every distinct gres of its nodes, in the order sinfo lists them."""
        return tuple(dict.fromkeys(g for group in self.node_gres for g in group))

    def gpus_per_node(self, gpu_type: str | None) -> int:
        """The most GPUs of ``gpu_type`` (None: of any type) one node of this partition has."""
        return max(
            (
                sum(g.count for g in group if g.name == "gpu" and gpu_type in (None, g.type))
                for group in self.node_gres
            ),
            default=0,
        )


@dataclass(frozen=True)
class Partitions:
    """``sinfo -h -o '%P|%a|%D|%G'``: every partition, its state, node count and GPU gres."""

    argv: tuple[str, ...] = ("sinfo", "-h", "-o", "%P|%a|%D|%G")

    def process(self, done: Output) -> list[Partition]:
        if done.returncode != 0:
            raise _failed(self.argv, done)
        merged: dict[str, Partition] = {}
        for line in done.stdout.splitlines():
            if not line.strip():
                continue
            parts = line.split("|")
            if len(parts) != 4 or not parts[2].strip().isdigit():
                raise SlurmFactError(f"sinfo printed a line orch cannot read: {line!r}")
            name, state, nodes, gres = (p.strip() for p in parts)
            default = name.endswith("*")
            name = name.removesuffix("*")
            old = merged.get(name)
            merged[name] = Partition(
                name=name,
                state=state,
                nodes=int(nodes) + (old.nodes if old else 0),
                node_gres=(*(old.node_gres if old else ()), parse_gres(gres)),
                default=default or (old.default if old else False),
            )
        return list(merged.values())


@dataclass(frozen=True)
class SubmitCheck:
    """Whether Slurm would accept orch's job: ``message`` is its estimate, or why not."""

    ok: bool
    message: str


@dataclass(frozen=True)
class CanSubmit:
    """``sbatch --test-only`` with exactly the options orch's jobs carry (the cluster's
    partition, account, qos, gres, time limit and extra options) and its job script, which
    must already be in the workdir: Slurm validates the request without queueing anything."""

    cluster: ClusterConfig

    @property
    def argv(self) -> list[str]:
        request = AllocationRequest.for_run(
            CHECK_RUN_ID, self.cluster.gpus_per_node, (), workdir=self.cluster.workdir
        )
        sbatch, *rest = sbatch_argv(self.cluster, request)
        return [sbatch, "--test-only", *rest]

    def process(self, done: Output) -> SubmitCheck:
        said = _last_line(done.stderr) or _last_line(done.stdout)
        for prefix in _REFUSAL_PREFIXES:
            said = said.removeprefix(prefix)
        said = said.removeprefix("sbatch: ")
        if done.returncode == 0:
            return SubmitCheck(True, said)
        return SubmitCheck(False, said or f"sbatch exited with {done.returncode}")


async def run_fact(conn: Runner, fact: Fact[T], *, timeout: float | None = None) -> T:
    """Run ``fact`` on the login node behind ``conn`` and parse what it printed."""
    return fact.process(await conn.run(list(fact.argv), timeout=timeout))
