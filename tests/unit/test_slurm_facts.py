"""Slurm facts: each parser on output captured from the test cluster (Debian's slurm-wlm 22.05)
and on the forms other sites print, with exact values; the partition check of `hosts check`."""

from __future__ import annotations

import pytest

from orchestrator.backends.slurm import partition_problems
from orchestrator.config.hostconfig import ClusterConfig, HostConfig
from orchestrator.slurm.facts import (
    CanSubmit,
    Gres,
    Partition,
    Partitions,
    SlurmFactError,
    SlurmVersion,
    SubmitCheck,
    parse_gres,
)
from orchestrator.transport.ssh import CompletedProcess

# captured from the fixture cluster (tests/fixtures/slurm.py) through a login sshd
SINFO_VERSION = "slurm-wlm 22.05.8\n"
SINFO_PARTITIONS = "gpu*|up|1|gpu:a6000:2\n"
SBATCH_OK = (
    "sbatch: Job 1 to start at 2026-12-03T08:33:50 using 1 processors on nodes vm in "
    "partition gpu\n"
)
SBATCH_BAD_PARTITION = (
    "sbatch: error: invalid partition specified: nope\n"
    "allocation failure: Invalid partition name specified\n"
)
SBATCH_TOO_MANY_GPUS = "allocation failure: Requested node configuration is not available\n"
SBATCH_NO_SCRIPT = "sbatch: error: Unable to open file /nonexistent/orch-job.sh\n"
# what a site with accounting says for an account that may not use the partition
SBATCH_BAD_ACCOUNT = (
    "sbatch: error: Batch job submission failed: "
    "Invalid account or account/partition combination specified\n"
)
# a bigger site: two node types in one partition (one line each), a CPU partition, a down one
SINFO_SITE = """\
gpu*|up|4|gpu:a100:4(S:0-1)
gpu*|up|2|gpu:a6000:2(S:0),mps:200
cpu|up|16|(null)
old|down|3|gpu:2
"""


def done(returncode: int, stdout: str = "", stderr: str = "") -> CompletedProcess:
    return CompletedProcess([], returncode, stdout, stderr)


def cluster(**overrides: object) -> ClusterConfig:
    values: dict[str, object] = {
        "name": "hpc",
        "login": HostConfig(name="hpc"),
        "partition": "gpu",
        "gres": "a6000",
        "gpus_per_node": 2,
        "time_limit": "02:00:00",
        "python": "/shared/venvs/vllm/bin/python",
        "workdir": "/shared/scratch/orch",
    }
    values.update(overrides)
    return ClusterConfig(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("stdout", "version"),
    [
        (SINFO_VERSION, "22.05.8"),
        ("slurm 23.02.7\n", "23.02.7"),
        ("slurm 24.11.0-0rc1\n", "24.11.0-0rc1"),
    ],
)
def test_slurm_version(stdout: str, version: str) -> None:
    fact = SlurmVersion()
    assert fact.argv == ("sinfo", "--version")
    assert fact.process(done(0, stdout)) == version


def test_slurm_version_when_sinfo_is_missing_or_says_nothing_useful() -> None:
    with pytest.raises(SlurmFactError) as info:
        SlurmVersion().process(done(127, stderr="bash: line 1: sinfo: command not found\n"))
    assert info.value.message == (
        "`sinfo --version` exited with 127: bash: line 1: sinfo: command not found"
    )
    assert info.value.hint is not None and "PATH of a non-interactive" in info.value.hint
    with pytest.raises(SlurmFactError, match=r"printed no Slurm version: 'hello'"):
        SlurmVersion().process(done(0, "hello\n"))


@pytest.mark.parametrize(
    ("text", "gres"),
    [
        ("gpu:a6000:2", (Gres("gpu", "a6000", 2),)),
        ("gpu:a6000:2(S:0)", (Gres("gpu", "a6000", 2),)),
        ("gpu:a100:4(S:0-1)", (Gres("gpu", "a100", 4),)),
        ("gpu:a100:4(S:0,1),mps:200", (Gres("gpu", "a100", 4), Gres("mps", None, 200))),
        ("gpu:2", (Gres("gpu", None, 2),)),
        ("gpu:tesla", (Gres("gpu", "tesla", 1),)),
        ("(null)", ()),
        ("", ()),
    ],
)
def test_parse_gres(text: str, gres: tuple[Gres, ...]) -> None:
    assert parse_gres(text) == gres


def test_partitions_of_the_test_cluster() -> None:
    fact = Partitions()
    assert fact.argv == ("sinfo", "-h", "-o", "%P|%a|%D|%G")
    assert fact.process(done(0, SINFO_PARTITIONS)) == [
        Partition("gpu", "up", 1, ((Gres("gpu", "a6000", 2),),), default=True)
    ]


def test_partitions_merge_the_lines_of_one_partition() -> None:
    gpu, cpu, old = Partitions().process(done(0, SINFO_SITE))
    assert (gpu.name, gpu.state, gpu.nodes, gpu.default) == ("gpu", "up", 6, True)
    assert gpu.gres == (Gres("gpu", "a100", 4), Gres("gpu", "a6000", 2), Gres("mps", None, 200))
    assert [gpu.gpus_per_node(t) for t in ("a100", "a6000", "h100", None)] == [4, 2, 0, 4]
    assert (cpu.name, cpu.nodes, cpu.gres, cpu.default, cpu.gpus_per_node(None)) == (
        "cpu",
        16,
        (),
        False,
        0,
    )
    assert (old.state, old.gpus_per_node(None), old.gpus_per_node("a100")) == ("down", 2, 0)


def test_partitions_refuse_what_they_cannot_read() -> None:
    with pytest.raises(SlurmFactError, match=r"sinfo printed a line orch cannot read: 'gpu\*'"):
        Partitions().process(done(0, "gpu*\n"))
    with pytest.raises(SlurmFactError) as info:
        Partitions().process(
            done(1, stderr="slurm_load_partitions: Unable to contact slurm controller\n")
        )
    assert info.value.message == (
        "`sinfo -h -o %P|%a|%D|%G` exited with 1: "
        "slurm_load_partitions: Unable to contact slurm controller"
    )


def test_can_submit_tests_exactly_the_job_orch_would_submit() -> None:
    fact = CanSubmit(
        cluster(account="llm-bench", qos="normal", sbatch_options=("--constraint=a6000",))
    )
    assert fact.argv == [
        "sbatch",
        "--test-only",
        "--parsable",
        "--job-name=orch-hosts-check",
        "--partition=gpu",
        "--account=llm-bench",
        "--qos=normal",
        "--nodes=1",
        "--ntasks=1",
        "--gres=gpu:a6000:2",
        "--time=02:00:00",
        "--output=/shared/scratch/orch/jobs/%j.out",
        "--constraint=a6000",
        "/shared/scratch/orch/orch-job.sh",
    ]
    plain = CanSubmit(cluster(gres=None, gpus_per_node=1, time_limit=None)).argv
    assert [a for a in plain if a.startswith(("--gres", "--time"))] == ["--gres=gpu:1"]


@pytest.mark.parametrize(
    ("returncode", "stderr", "check"),
    [
        (
            0,
            SBATCH_OK,
            SubmitCheck(
                True,
                "Job 1 to start at 2026-12-03T08:33:50 using 1 processors on nodes vm in "
                "partition gpu",
            ),
        ),
        (1, SBATCH_BAD_PARTITION, SubmitCheck(False, "Invalid partition name specified")),
        (
            1,
            SBATCH_TOO_MANY_GPUS,
            SubmitCheck(False, "Requested node configuration is not available"),
        ),
        (1, SBATCH_NO_SCRIPT, SubmitCheck(False, "Unable to open file /nonexistent/orch-job.sh")),
        (
            1,
            SBATCH_BAD_ACCOUNT,
            SubmitCheck(False, "Invalid account or account/partition combination specified"),
        ),
        (255, "", SubmitCheck(False, "sbatch exited with 255")),
    ],
)
def test_can_submit_reads_slurms_answer(returncode: int, stderr: str, check: SubmitCheck) -> None:
    assert CanSubmit(cluster()).process(done(returncode, stderr=stderr)) == check


SITE = Partitions().process(done(0, SINFO_SITE))


@pytest.mark.parametrize(
    ("overrides", "problems"),
    [
        ({}, []),
        ({"gres": "a100", "gpus_per_node": 4}, []),
        ({"gres": None, "gpus_per_node": 4}, []),
        (
            {"gres": "a6000", "gpus_per_node": 4},
            [
                "partition 'gpu' has no node with gpu:a6000:4 (its nodes offer gpu:a100:4, gpu:a6000:2)"
            ],
        ),
        (
            {"gres": "h100"},
            [
                "partition 'gpu' has no node with gpu:h100:2 (its nodes offer gpu:a100:4, gpu:a6000:2)"
            ],
        ),
        (
            {"partition": "cpu", "gres": None, "gpus_per_node": 1},
            ["partition 'cpu' has no node with gpu:1 (its nodes offer no GPUs)"],
        ),
        ({"partition": "old", "gres": None}, ["partition 'old' is down"]),
        ({"partition": "gpus"}, ["partition 'gpus' does not exist; partitions: gpu, cpu, old"]),
    ],
)
def test_partition_problems(overrides: dict[str, object], problems: list[str]) -> None:
    assert partition_problems(cluster(**overrides), SITE) == problems


def test_no_partition_at_all() -> None:
    assert partition_problems(cluster(), []) == [
        "partition 'gpu' does not exist; partitions: (none)"
    ]
