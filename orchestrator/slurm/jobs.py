"""Slurm's client commands as data: the argv orch sends and the records it reads back.

Pure (no I/O), so every Slurm version's output form can be checked by unit tests; the login node
is reached in ``allocation.py``. Nothing user-given ever goes into a shell string: the batch
script is the fixed ``JOB_SCRIPT``, and options, paths and the job's own command are separate
argv items (``sbatch`` hands the items after the script's path to the script as ``"$@"``).
Options take their value in the same item (``--partition=gpu``), so a value that starts with a
dash can never be read as another option.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.config.hostconfig import ClusterConfig
from orchestrator.errors import OrchError
from orchestrator.remote.prune import JOBS_DIR  # the job folders: one name, the agent's

JOB_SCRIPT = '#!/bin/sh\nexec "$@"\n'
JOB_SCRIPT_NAME = "orch-job.sh"
JOB_NAME_PREFIX = "orch-"

# squeue's output format: the job name last, as the only field a user may fill with anything
# (a "|" in it then stays in the name). %A, not %i: an array task's own numeric id.
SQUEUE_FIELDS = ("%A", "%T", "%r", "%N", "%M", "%u", "%j")
SQUEUE_FORMAT = "|".join(SQUEUE_FIELDS)

# Slurm's long state names. A job in one of these never runs (again): waiting for it is over.
ENDED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "COMPLETING",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
RUNNING = "RUNNING"
_NO_VALUE = ("", "None", "(null)")

_SBATCH_ID = re.compile(r"(\d+)(?:;\S+)?")
_JOB_ID = re.compile(r"^JobId=(\d+)\b", re.MULTILINE)
_NODE_LIST = re.compile(r"^\s*NodeList=(\S*)", re.MULTILINE)
_NUM_CPUS = re.compile(r"\bNumCPUs=(\d+)\b")
_TRES_MEM = re.compile(r"^\s*TRES=(?:\S*,)?mem=(\d+(?:\.\d+)?)([KMGT]?)\b", re.MULTILINE)
_STDOUT = re.compile(r"^\s*StdOut=(.*?)\s*$", re.MULTILINE)
# one line per node (group) in `scontrol show job -d`: GRES= since 20.11, GRES_IDX= before
_NODE_DETAIL = re.compile(r"^\s+Nodes=\S+ .*?\bGRES(?:_IDX)?=(\S*)", re.MULTILINE)
# gpu(IDX:0,1) | gpu:a6000(IDX:0-1) | gpu:a6000:2(IDX:0-1), possibly among other gres
_GPU_IDX = re.compile(r"(?:^|,)gpu(?::[^\s(,:]+)*\(IDX:([^)]*)\)")


class SlurmOutputError(OrchError):
    """A Slurm command printed something other than what its options promise.

    ``output`` is what it printed, ``stderr`` what it said meanwhile (Slurm explains a refusal
    there: ``sbatch: error: Batch job submission failed: Invalid partition name specified``).
    """

    def __init__(
        self, message: str, *, output: str, stderr: str = "", hint: str | None = None
    ) -> None:
        said = "; ".join(line.strip() for line in stderr.splitlines() if line.strip())
        full = f"{message}: got {output.strip()[:200]!r}" + (f"; stderr: {said}" if said else "")
        super().__init__(full, hint=hint)
        self.output = output
        self.stderr = stderr


@dataclass(frozen=True)
class AllocationRequest:
    """One batch job to ask for: ``argv`` is what the job script execs on the node.

    ``output`` is Slurm's ``--output`` pattern (``%j`` becomes the job id); its directory must
    exist before the job starts, or the job fails at launch (``JobLaunchFailure``).
    """

    run_id: str
    gpus: int
    job_name: str
    argv: tuple[str, ...]
    output: str

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ValueError(f"gpus must be >= 0, got {self.gpus}")
        if not self.job_name:
            raise ValueError("a job needs a name (orch finds its own jobs by it)")

    @classmethod
    def for_run(
        cls, run_id: str, gpus: int, argv: Sequence[str], *, workdir: str
    ) -> AllocationRequest:
        """The request orch makes for a run: named ``orch-<run id>``, output in the workdir."""
        return cls(
            run_id=run_id,
            gpus=gpus,
            job_name=JOB_NAME_PREFIX + run_id,
            argv=tuple(argv),
            output=posixpath.join(workdir, JOBS_DIR, "%j.out"),
        )


@dataclass(frozen=True)
class JobState:
    """One line of squeue: a job as the scheduler sees it now.

    ``reason`` is why a pending job waits (``Resources``, ``Priority`` ...), None when Slurm
    gives none; ``nodes`` the expanded node list (empty while pending); ``time`` the time used,
    as Slurm prints it (``1-02:03:04``).
    """

    job_id: int
    name: str
    state: str
    reason: str | None
    nodes: tuple[str, ...]
    time: str
    user: str

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    @property
    def ended(self) -> bool:
        """It will not run (again): waiting for it makes no sense. Unknown states are not
        ended, so a newer Slurm's extra waiting state is waited on, within the time limit."""
        return self.state in ENDED_STATES

    def describe(self) -> str:
        """``PENDING (Resources)``, as a person reads a queue."""
        return f"{self.state} ({self.reason})" if self.reason else self.state


@dataclass(frozen=True)
class Allocation:
    """What a running job was given: its id, its nodes and the GPU indices on the first node
    (orch asks for one node per job; these are the node's ``CUDA_VISIBLE_DEVICES``)."""

    job_id: int
    nodes: tuple[str, ...]
    gpus: tuple[int, ...]
    cpus: int | None = None  # NumCPUs: what the engine and the load generator share
    memory_mib: int | None = None  # the job's memory (TRES mem=), None when not tracked


def job_script_path(workdir: str) -> str:
    return posixpath.join(workdir, JOB_SCRIPT_NAME)


def sbatch_argv(cluster: ClusterConfig, request: AllocationRequest) -> list[str]:
    """``sbatch --parsable ... <script> <argv...>`` for one single-node job.

    The GPU count is the request's (what the run needs), the gres type the cluster's; the
    cluster's own ``sbatch_options`` come last, so a site can override any option orch sets.
    """
    argv = ["sbatch", "--parsable", f"--job-name={request.job_name}"]
    if cluster.partition:
        argv.append(f"--partition={cluster.partition}")
    if cluster.account:
        argv.append(f"--account={cluster.account}")
    if cluster.qos:
        argv.append(f"--qos={cluster.qos}")
    argv += ["--nodes=1", "--ntasks=1"]
    if request.gpus:
        kind = f"gpu:{cluster.gres}" if cluster.gres else "gpu"
        argv.append(f"--gres={kind}:{request.gpus}")
    if cluster.time_limit:
        argv.append(f"--time={cluster.time_limit}")
    argv.append(f"--output={request.output}")
    argv += cluster.sbatch_options
    return [*argv, job_script_path(cluster.workdir), *request.argv]


def parse_sbatch(stdout: str, stderr: str = "") -> int:
    """The job id from ``sbatch --parsable``: ``123``, or ``123;cluster`` on a federation.

    The last line counts: a site's submit filter may print notes before it.
    """
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    found = _SBATCH_ID.fullmatch(lines[-1]) if lines else None
    if found is None:
        raise SlurmOutputError("sbatch printed no job id", output=stdout, stderr=stderr)
    return int(found.group(1))


def squeue_argv(
    job_ids: Sequence[int] = (),
    *,
    user: str | None = None,
    names: Sequence[str] = (),
    all_states: bool = False,
) -> list[str]:
    """squeue in ``SQUEUE_FORMAT`` without a header.

    Without ``all_states`` squeue lists pending, running and completing jobs only; with it,
    also those that ended recently (while the controller still remembers them: MinJobAge).
    """
    argv = ["squeue", "-h", "-o", SQUEUE_FORMAT]
    if job_ids:
        argv.append("--jobs=" + ",".join(str(job_id) for job_id in job_ids))
    if user:
        argv.append(f"--user={user}")
    if names:
        if any("," in name for name in names):
            raise ValueError(f"squeue cannot select job names with a comma: {list(names)}")
        argv.append("--name=" + ",".join(names))
    if all_states:
        argv.append("--states=all")
    return argv


def parse_squeue(text: str) -> list[JobState]:
    """Lines of ``squeue -h -o SQUEUE_FORMAT``, in squeue's order."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", len(SQUEUE_FIELDS) - 1)
        if len(parts) != len(SQUEUE_FIELDS) or not parts[0].strip().isdigit():
            raise SlurmOutputError("squeue printed a line orch cannot read", output=line)
        job_id, state, reason, nodes, used, user, name = parts
        jobs.append(
            JobState(
                job_id=int(job_id),
                name=name,
                state=state.strip(),
                reason=None if reason.strip() in _NO_VALUE else reason.strip(),
                nodes=expand_hostlist(nodes.strip()),
                time=used.strip(),
                user=user.strip(),
            )
        )
    return jobs


def scontrol_show_job_argv(job_id: int) -> list[str]:
    return ["scontrol", "show", "job", "-d", str(job_id)]


def parse_allocation(text: str) -> Allocation:
    """The job id, nodes and first node's GPU indices from ``scontrol show job -d``.

    GPU indices come from the per-node detail line: ``GRES=gpu:a6000:2(IDX:0-1)`` (Slurm
    20.11 and later, with or without a type) or ``GRES_IDX=gpu(IDX:0,1)`` (earlier).
    """
    job = _JOB_ID.search(text)
    if job is None:
        raise SlurmOutputError("scontrol printed no JobId", output=text)
    listed = _NODE_LIST.search(text)
    nodes = expand_hostlist(listed.group(1)) if listed and listed.group(1) != "(null)" else ()
    detail = _NODE_DETAIL.search(text)
    gpus: list[int] = []
    for found in _GPU_IDX.finditer(detail.group(1) if detail else ""):
        gpus += _indices(found.group(1), text)
    cpus = _NUM_CPUS.search(text)
    memory = _TRES_MEM.search(text)
    return Allocation(
        job_id=int(job.group(1)),
        nodes=nodes,
        gpus=tuple(gpus),
        cpus=int(cpus.group(1)) if cpus else None,
        memory_mib=_mib(memory.group(1), memory.group(2)) if memory else None,
    )


def _mib(number: str, unit: str) -> int:
    """Slurm's ``24105M`` / ``64G`` / ``1T`` as MiB."""
    return round(float(number) * {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}[unit or "M"])


def parse_stdout_path(text: str) -> str | None:
    """Where the job's output goes (``StdOut=``, its ``%j`` already filled in by Slurm)."""
    found = _STDOUT.search(text)
    return found.group(1) if found and found.group(1) not in _NO_VALUE else None


def srun_argv(job_id: int) -> list[str]:
    """What goes before a command to run it inside job ``job_id``: one task on the job's node,
    sharing the resources its batch step holds (``--overlap``; without it the step would wait
    for GPUs and CPUs the engine already has), with srun's own notes kept off stderr."""
    return ["srun", f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1", "--quiet", "--"]


def scancel_argv(job_ids: Sequence[int]) -> list[str]:
    if not job_ids:
        raise ValueError("scancel needs at least one job id")
    return ["scancel", *(str(job_id) for job_id in job_ids)]


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Slurm's compressed host list as names: ``gpu[01-02,5],login`` -> gpu01 gpu02 gpu5 login.

    Numbers keep the width of the range's start (``[08-10]`` -> 08 09 10).
    """
    names: list[str] = []
    for item in _split_top_level(text):
        names += _expand_item(item, text)
    return tuple(names)


def _split_top_level(text: str) -> list[str]:
    """Split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for at, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth not in (0, 1):
            raise SlurmOutputError("unbalanced brackets in a host list", output=text)
        if char == "," and depth == 0:
            items.append(text[start:at])
            start = at + 1
    if depth:
        raise SlurmOutputError("unbalanced brackets in a host list", output=text)
    items.append(text[start:])
    return [item for item in items if item]


def _expand_item(item: str, text: str) -> list[str]:
    group = re.search(r"\[([^\]]*)\]", item)
    if group is None:
        return [item]
    head, tail = item[: group.start()], item[group.end() :]
    return [
        head + number + rest
        for number in _numbers(group.group(1), text)
        for rest in _expand_item(tail, text)
    ]


def _numbers(ranges: str, text: str) -> list[str]:
    """``01-03,7`` -> 01 02 03 7 (as text, zero-padded like the range's start)."""
    out: list[str] = []
    for part in ranges.split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise SlurmOutputError(f"cannot read the range {part!r}", output=text)
        end = int(last) if last else int(first)
        out += [str(n).zfill(len(first)) for n in range(int(first), end + 1)]
    return out


def _indices(ranges: str, text: str) -> list[int]:
    """GPU indices ``0-1,3`` -> 0 1 3; Slurm's ``N/A`` (no index known) gives none."""
    if ranges.strip() in ("", "N/A"):
        return []
    return [int(number) for number in _numbers(ranges, text)]
