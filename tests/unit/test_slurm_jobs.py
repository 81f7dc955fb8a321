"""Slurm's commands as data: the argv orch sends, and what it reads from each output form.

The ``CAPTURED_*`` texts were printed by the test fixture's real cluster (slurm-wlm 22.05.8,
node ``vm``, two ``a6000`` GPUs); the others are hand-written in the forms other Slurm versions
print (``GRES_IDX=`` before 20.11, untyped gres, several nodes, federations).
"""

from __future__ import annotations

import pytest

from orchestrator.config.hostconfig import ClusterConfig, HostConfig
from orchestrator.slurm.jobs import (
    JOB_SCRIPT,
    Allocation,
    AllocationRequest,
    JobState,
    SlurmOutputError,
    expand_hostlist,
    job_script_path,
    parse_allocation,
    parse_sbatch,
    parse_squeue,
    parse_stdout_path,
    sbatch_argv,
    scancel_argv,
    scontrol_show_job_argv,
    squeue_argv,
)

FORMAT = "%A|%T|%r|%N|%M|%u|%j"

# `squeue -h -o FORMAT`: one job running, one waiting for GPUs, one behind it in priority
CAPTURED_SQUEUE = (
    "2|PENDING|Resources||0:00|root|orch-def ghi\n"
    "3|PENDING|Priority||0:00|root|other\n"
    "1|RUNNING|None|vm|0:01|root|orch-abc\n"
)
# `scontrol show job -d 1` of a running 2-GPU job (trailing lines cut)
CAPTURED_RUNNING = """\
JobId=1 JobName=orch-abc
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=(null) QOS=(null)
   JobState=RUNNING Reason=None Dependency=(null)
   Partition=gpu AllocNode:Sid=localhost:30124
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=vm
   BatchHost=vm
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=1,node=1,billing=1
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=gpu:a6000:2
     Nodes=vm CPU_IDs=1 Mem=0 GRES=gpu:a6000:2(IDX:0-1)
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   Command=/tmp/slurmcap/job.sh sh -c echo "$CUDA_VISIBLE_DEVICES $SLURM_JOB_ID"
   WorkDir=/work/main
   StdErr=/tmp/slurmcap/1.out
   StdIn=/dev/null
   StdOut=/tmp/slurmcap/1.out
   Power=
   TresPerNode=gres:gpu:a6000:2

"""
# `scontrol show job -d 2`: pending, no node yet, no detail line
CAPTURED_PENDING = """\
JobId=2 JobName=orch-def ghi
   JobState=PENDING Reason=Resources Dependency=(null)
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   StdErr=/tmp/slurmcap/2.out
   StdIn=/dev/null
   StdOut=/tmp/slurmcap/2.out
   TresPerNode=gres:gpu:2
"""
# a cancelled job keeps its node, but its GPUs are released
CAPTURED_CANCELLED = """\
JobId=1 JobName=orch-abc
   JobState=CANCELLED Reason=None Dependency=(null)
   NodeList=vm
   BatchHost=vm
   JOB_GRES=gpu:a6000:2
     Nodes=vm CPU_IDs=1 Mem=0 GRES=
   StdOut=/tmp/slurmcap/1.out
"""
# Slurm 19.05 / 20.02: GRES_IDX=, with and without a type
WITH_MEMORY = """\
JobId=5 JobName=orch-m
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=g1
   NumNodes=1 NumCPUs=16 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=16,mem=64G,node=1,billing=16,gres/gpu=2
     Nodes=g1 CPU_IDs=0-15 Mem=65536 GRES=gpu:a6000:2(IDX:0-1)
"""

OLD_TYPED = """\
JobId=4242 JobName=orch-r1
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=gpu-node07
     Nodes=gpu-node07 CPU_IDs=0-7 Mem=64000 GRES_IDX=gpu:v100(IDX:2-3)
   StdOut=/home/me/orch/jobs/4242.out
"""
OLD_UNTYPED = """\
JobId=77 JobName=orch-r2
   NodeList=n1
     Nodes=n1 CPU_IDs=0-3 Mem=0 GRES_IDX=gpu(IDX:0,2)
"""
# Slurm 23.x: untyped gres, a gpu next to another gres, two nodes in one detail line each
NEW_UNTYPED = """\
JobId=9 JobName=orch-r3
   NodeList=a100-[01-02]
     Nodes=a100-01 CPU_IDs=0-15 Mem=0 GRES=gpu:4(IDX:4-7),shard:2(0/2)
     Nodes=a100-02 CPU_IDs=0-15 Mem=0 GRES=gpu:4(IDX:0-3)
   StdOut=/scratch/out dir/9.out
"""
MIXED_TYPES = """\
JobId=10 JobName=orch-r4
   NodeList=n2
     Nodes=n2 CPU_IDs=0-1 Mem=0 GRES=gpu:a100:1(IDX:0),gpu:v100:1(IDX:3)
   StdOut=(null)
"""
NO_INDEX = """\
JobId=11 JobName=orch-r5
   NodeList=n3
     Nodes=n3 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:N/A)
"""


def cluster(**overrides: object) -> ClusterConfig:
    values: dict[str, object] = {
        "name": "hpc",
        "login": HostConfig(name="hpc-login", address="login.hpc.example"),
        "partition": "gpu",
        "gres": "a6000",
        "gpus_per_node": 2,
        "workdir": "/shared/scratch/orch",
    }
    values.update(overrides)
    return ClusterConfig(**values)  # type: ignore[arg-type]


def request(**overrides: object) -> AllocationRequest:
    made = AllocationRequest.for_run(
        "r1-a1b2", 2, ["/shared/venvs/vllm/bin/python", "agent.pyz", "serve"], workdir="/w"
    )
    values = {**made.__dict__, **overrides}
    return AllocationRequest(**values)  # type: ignore[arg-type]


# -- the job script and the request ---------------------------------------------------------
def test_the_job_script_only_execs_its_arguments() -> None:
    assert JOB_SCRIPT == '#!/bin/sh\nexec "$@"\n'
    assert job_script_path("/shared/scratch/orch") == "/shared/scratch/orch/orch-job.sh"


def test_a_run_request_is_named_after_the_run_and_writes_into_the_workdir() -> None:
    made = AllocationRequest.for_run("r1-a1b2", 2, ["python", "x y"], workdir="/shared/w")
    assert made == AllocationRequest(
        run_id="r1-a1b2",
        gpus=2,
        job_name="orch-r1-a1b2",
        argv=("python", "x y"),
        output="/shared/w/jobs/%j.out",
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gpus": -1}, "gpus must be >= 0, got -1"),
        ({"job_name": ""}, "a job needs a name (orch finds its own jobs by it)"),
    ],
)
def test_impossible_requests_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        request(**fields)
    assert str(refused.value) == message


# -- sbatch -----------------------------------------------------------------------------
BASE = ["sbatch", "--parsable", "--job-name=orch-r1-a1b2", "--partition=gpu"]
TAIL = [
    "--output=/w/jobs/%j.out",
    "/shared/scratch/orch/orch-job.sh",
    "/shared/venvs/vllm/bin/python",
    "agent.pyz",
    "serve",
]


@pytest.mark.parametrize(
    ("config", "asked", "expected"),
    [
        (
            cluster(),
            request(),
            [*BASE, "--nodes=1", "--ntasks=1", "--gres=gpu:a6000:2", *TAIL],
        ),
        (  # no gres type: plain gpu:N; the run's GPU count, not the node's
            cluster(gres=None, gpus_per_node=8),
            request(gpus=1),
            [*BASE, "--nodes=1", "--ntasks=1", "--gres=gpu:1", *TAIL],
        ),
        (  # no GPU at all: no --gres
            cluster(),
            request(gpus=0),
            [*BASE, "--nodes=1", "--ntasks=1", *TAIL],
        ),
        (  # every optional setting; the site's options last, each its own item
            cluster(
                account="llm-bench",
                qos="normal",
                time_limit="02:00:00",
                sbatch_options=("--constraint=a6000", "--exclusive"),
            ),
            request(),
            [
                *BASE,
                "--account=llm-bench",
                "--qos=normal",
                "--nodes=1",
                "--ntasks=1",
                "--gres=gpu:a6000:2",
                "--time=02:00:00",
                "--output=/w/jobs/%j.out",
                "--constraint=a6000",
                "--exclusive",
                *TAIL[1:],
            ],
        ),
    ],
)
def test_sbatch_argv(config: ClusterConfig, asked: AllocationRequest, expected: list[str]) -> None:
    assert sbatch_argv(config, asked) == expected


def test_sbatch_argv_keeps_awkward_values_as_single_items() -> None:
    awkward = "$(touch /tmp/pwned); `id` 'q' \"d\" *"
    argv = sbatch_argv(
        cluster(partition=awkward, workdir="/my dir"),
        request(job_name=f"orch-{awkward}", argv=(awkward, "-x")),
    )
    assert argv[2:4] == [f"--job-name=orch-{awkward}", f"--partition={awkward}"]
    assert argv[-3:] == ["/my dir/orch-job.sh", awkward, "-x"]


@pytest.mark.parametrize(
    ("stdout", "job_id"),
    [
        ("1\n", 1),  # captured
        ("123;orchtest\n", 123),  # a federation names the cluster
        ("Submit filter: GPU jobs go to gpu\n4567\n", 4567),  # a site's note before it
    ],
)
def test_parse_sbatch(stdout: str, job_id: int) -> None:
    assert parse_sbatch(stdout) == job_id


@pytest.mark.parametrize(
    ("stdout", "stderr", "message"),
    [
        (  # captured: sbatch --partition=nope (exit 1)
            "",
            "sbatch: error: invalid partition specified: nope\n"
            "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
            "sbatch printed no job id: got ''; stderr: sbatch: error: invalid partition "
            "specified: nope; sbatch: error: Batch job submission failed: Invalid partition "
            "name specified",
        ),
        ("Submitted batch job 12\n", "", "sbatch printed no job id: got 'Submitted batch job 12'"),
    ],
)
def test_parse_sbatch_refuses_anything_else(stdout: str, stderr: str, message: str) -> None:
    with pytest.raises(SlurmOutputError) as refused:
        parse_sbatch(stdout, stderr)
    assert str(refused.value) == message
    assert (refused.value.output, refused.value.stderr) == (stdout, stderr)


# -- squeue -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, []),
        ({"job_ids": [7]}, ["--jobs=7"]),
        ({"job_ids": [7, 9], "all_states": True}, ["--jobs=7,9", "--states=all"]),
        ({"user": "me"}, ["--user=me"]),
        ({"user": "me", "names": ["orch-a", "orch-b"]}, ["--user=me", "--name=orch-a,orch-b"]),
    ],
)
def test_squeue_argv(kwargs: dict[str, object], expected: list[str]) -> None:
    assert squeue_argv(**kwargs) == ["squeue", "-h", "-o", FORMAT, *expected]  # type: ignore[arg-type]


def test_squeue_argv_refuses_a_name_it_cannot_select() -> None:
    with pytest.raises(ValueError) as refused:
        squeue_argv(names=["orch-a,b"])
    assert str(refused.value) == "squeue cannot select job names with a comma: ['orch-a,b']"


def job(
    job_id: int,
    state: str,
    reason: str | None,
    nodes: tuple[str, ...] = (),
    *,
    name: str = "orch-r1",
    time: str = "0:00",
    user: str = "me",
) -> JobState:
    return JobState(job_id, name, state, reason, nodes, time, user)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            CAPTURED_SQUEUE,
            [
                job(2, "PENDING", "Resources", name="orch-def ghi", user="root"),
                job(3, "PENDING", "Priority", name="other", user="root"),
                job(1, "RUNNING", None, ("vm",), name="orch-abc", user="root", time="0:01"),
            ],
        ),
        ("", []),  # captured: squeue -j of a job that just ended
        (  # captured with --states=all, after scancel and after a launch failure
            "1|CANCELLED|None||0:00|root|job.sh\n3|FAILED|JobLaunchFailure|vm|0:00|root|job.sh\n",
            [
                job(1, "CANCELLED", None, name="job.sh", user="root"),
                job(3, "FAILED", "JobLaunchFailure", ("vm",), name="job.sh", user="root"),
            ],
        ),
        (  # a reason with spaces and a hostlist, a name with the separator, a long time used
            "88|PENDING|ReqNodeNotAvail, UnavailableNodes:gpu[01-02]||0:00|me|orch-a|b\n"
            "89|RUNNING|None|gpu[03-04]|1-02:03:04|me|orch-c\n",
            [
                job(88, "PENDING", "ReqNodeNotAvail, UnavailableNodes:gpu[01-02]", name="orch-a|b"),
                job(89, "RUNNING", None, ("gpu03", "gpu04"), name="orch-c", time="1-02:03:04"),
            ],
        ),
    ],
)
def test_parse_squeue(text: str, expected: list[JobState]) -> None:
    assert parse_squeue(text) == expected


@pytest.mark.parametrize(
    "line",
    ["slurm_load_jobs error: Invalid job id specified", "12_[1-3]|PENDING|None||0:00|me|x", "1|2"],
)
def test_parse_squeue_refuses_lines_of_another_format(line: str) -> None:
    with pytest.raises(SlurmOutputError) as refused:
        parse_squeue(line + "\n")
    assert str(refused.value) == f"squeue printed a line orch cannot read: got {line!r}"


@pytest.mark.parametrize(
    ("state", "reason", "running", "ended", "shown"),
    [
        ("PENDING", "Resources", False, False, "PENDING (Resources)"),
        ("CONFIGURING", None, False, False, "CONFIGURING"),
        ("RUNNING", None, True, False, "RUNNING"),
        ("COMPLETING", None, False, True, "COMPLETING"),
        ("FAILED", "NonZeroExitCode", False, True, "FAILED (NonZeroExitCode)"),
        ("CANCELLED", None, False, True, "CANCELLED"),
        ("SOME_NEW_STATE", None, False, False, "SOME_NEW_STATE"),
    ],
)
def test_job_state_phases(
    state: str, reason: str | None, running: bool, ended: bool, shown: str
) -> None:
    seen = job(1, state, reason)
    assert (seen.running, seen.ended, seen.describe()) == (running, ended, shown)


# -- scontrol show job -d ----------------------------------------------------------------------
def test_scontrol_show_job_argv() -> None:
    assert scontrol_show_job_argv(42) == ["scontrol", "show", "job", "-d", "42"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (CAPTURED_RUNNING, Allocation(job_id=1, nodes=("vm",), gpus=(0, 1), cpus=1)),
        (CAPTURED_PENDING, Allocation(job_id=2, nodes=(), gpus=(), cpus=1)),
        (WITH_MEMORY, Allocation(5, ("g1",), (0, 1), cpus=16, memory_mib=65536)),
        (WITH_MEMORY.replace("mem=64G", "mem=24105M"), Allocation(5, ("g1",), (0, 1), 16, 24105)),
        (CAPTURED_CANCELLED, Allocation(job_id=1, nodes=("vm",), gpus=())),
        (OLD_TYPED, Allocation(job_id=4242, nodes=("gpu-node07",), gpus=(2, 3))),
        (OLD_UNTYPED, Allocation(job_id=77, nodes=("n1",), gpus=(0, 2))),
        (NEW_UNTYPED, Allocation(job_id=9, nodes=("a100-01", "a100-02"), gpus=(4, 5, 6, 7))),
        (MIXED_TYPES, Allocation(job_id=10, nodes=("n2",), gpus=(0, 3))),
        (NO_INDEX, Allocation(job_id=11, nodes=("n3",), gpus=())),
    ],
)
def test_parse_allocation(text: str, expected: Allocation) -> None:
    assert parse_allocation(text) == expected


def test_parse_allocation_refuses_text_without_a_job() -> None:
    with pytest.raises(SlurmOutputError) as refused:
        parse_allocation("slurm_load_jobs error: Invalid job id specified\n")
    assert str(refused.value) == (
        "scontrol printed no JobId: got 'slurm_load_jobs error: Invalid job id specified'"
    )


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (CAPTURED_RUNNING, "/tmp/slurmcap/1.out"),
        (OLD_TYPED, "/home/me/orch/jobs/4242.out"),
        (NEW_UNTYPED, "/scratch/out dir/9.out"),
        (MIXED_TYPES, None),
        (OLD_UNTYPED, None),
    ],
)
def test_parse_stdout_path(text: str, path: str | None) -> None:
    assert parse_stdout_path(text) == path


# -- scancel and host lists --------------------------------------------------------------------
def test_scancel_argv() -> None:
    assert scancel_argv([3, 1]) == ["scancel", "3", "1"]
    with pytest.raises(ValueError) as refused:
        scancel_argv([])
    assert str(refused.value) == "scancel needs at least one job id"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("", ()),
        ("vm", ("vm",)),
        ("gpu[01-02,5],login", ("gpu01", "gpu02", "gpu5", "login")),
        ("n[08-10]", ("n08", "n09", "n10")),
        ("rack[1-2]-n[1,3]", ("rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3")),
        ("a,b[7]", ("a", "b7")),
    ],
)
def test_expand_hostlist(text: str, names: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == names


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu[01-02", "unbalanced brackets in a host list: got 'gpu[01-02'"),
        ("gpu[[1]]", "unbalanced brackets in a host list: got 'gpu[[1]]'"),
        ("gpu[a-b]", "cannot read the range 'a-b': got 'gpu[a-b]'"),
    ],
)
def test_expand_hostlist_refuses_what_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(SlurmOutputError) as refused:
        expand_hostlist(text)
    assert str(refused.value) == message
