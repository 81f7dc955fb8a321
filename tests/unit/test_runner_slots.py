"""The GPU slot scheduler of ``share_gpus`` (``runner/slots.py``): which runs of a host run at
once, on which GPUs, in which order; and the plan-time refusal of a run no host could hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.agent.client import BACKGROUND_CHANNELS
from orchestrator.commands.run import plan_run
from orchestrator.config.hostconfig import GpuSpec, HostConfig
from orchestrator.errors import ConfigError
from orchestrator.runner.slots import (
    MAX_RUNS_PER_HOST,
    GpuSlots,
    Grant,
    Placement,
    SlotNeed,
    host_gpu_count,
    overlapping,
    simulate,
)
from orchestrator.transport.ssh import MAX_CHANNELS


def need(key: str, gpus: int = 1, port: int | None = None, *, alone: bool = False) -> SlotNeed:
    return SlotNeed(key, gpus, port if port is not None else 8000 + ord(key[0]), alone=alone)


# (GPU count, needs, durations) -> [(key, start, end, GPU ids, waited for)]
CASES = {
    "three 2-GPU runs on 4 GPUs: two at once, the third when one ends": (
        4,
        [need("a", 2), need("b", 2), need("c", 2)],
        [10, 20, 10],
        [
            ("a", 0, 10, (0, 1), ()),
            ("b", 0, 20, (2, 3), ()),
            ("c", 10, 20, (0, 1), ("a", "b")),
        ],
    ),
    "one port: the second waits for the first, GPUs free or not": (
        4,
        [need("a", 1, 8000), need("b", 1, 8000), need("c", 1, 9000)],
        [10, 5, 1],
        [
            ("a", 0, 10, (0,), ()),
            ("b", 10, 15, (0,), ("a",)),  # c holds back behind b: playbook order
            ("c", 10, 11, (1,), ()),
        ],
    ),
    "never overtaking: a 1-GPU run waits behind a 4-GPU one": (
        4,
        [need("a", 2), need("b", 4), need("c", 1)],
        [10, 10, 10],
        [
            ("a", 0, 10, (0, 1), ()),
            ("b", 10, 20, (0, 1, 2, 3), ("a",)),
            ("c", 20, 30, (0,), ("b",)),
        ],
    ),
    "a run whose env picks its GPUs runs alone, without ids": (
        4,
        [need("a"), need("b", alone=True), need("c")],
        [10, 5, 5],
        [
            ("a", 0, 10, (0,), ()),
            ("b", 10, 15, None, ("a",)),
            ("c", 15, 20, (0,), ("b",)),
        ],
    ),
    "more GPUs than the host has: alone (the doctor and the agent say why)": (
        2,
        [need("a"), need("b", 3), need("c")],
        [4, 4, 4],
        [
            ("a", 0, 4, (0,), ()),
            ("b", 4, 8, None, ("a",)),
            ("c", 8, 12, (0,), ("b",)),
        ],
    ),
    "unknown GPU count: one after another, as without share_gpus": (
        None,
        [need("a"), need("b")],
        [3, 4],
        [("a", 0, 3, None, ()), ("b", 3, 7, None, ("a",))],
    ),
    "a 2-GPU run takes the first two GPUs freed, when two are": (
        4,
        [need("a"), need("b"), need("c"), need("d"), need("e", 2)],
        [5, 10, 15, 20, 1],
        [
            ("a", 0, 5, (0,), ()),
            ("b", 0, 10, (1,), ()),
            ("c", 0, 15, (2,), ()),
            ("d", 0, 20, (3,), ()),
            ("e", 10, 11, (0, 1), ("a", "b", "c", "d")),
        ],
    ),
    "at most three runs of a host at once (their SSH connection's channels)": (
        4,
        [need("a"), need("b"), need("c"), need("d")],
        [5, 10, 15, 1],
        [
            ("a", 0, 5, (0,), ()),
            ("b", 0, 10, (1,), ()),
            ("c", 0, 15, (2,), ()),
            ("d", 5, 6, (0,), ("a", "b", "c")),
        ],
    ),
    "runs ending together free their GPUs together": (
        2,
        [need("a"), need("b"), need("c", 2)],
        [5, 5, 1],
        [("a", 0, 5, (0,), ()), ("b", 0, 5, (1,), ()), ("c", 5, 6, (0, 1), ("a", "b"))],
    ),
}


# cases whose host may run more runs at once than a real SSH connection allows
MAX_RUNS = {"a 2-GPU run takes the first two GPUs freed, when two are": 4}


@pytest.mark.parametrize("case", list(CASES))
def test_simulate_places_runs_in_playbook_order(case: str) -> None:
    count, needs, durations, expected = CASES[case]
    placed = simulate(needs, count, durations, max_runs=MAX_RUNS.get(case, MAX_RUNS_PER_HOST))
    assert [(p.key, p.start, p.end, p.gpu_ids, p.waited_for) for p in placed] == expected


def test_slots_grant_release_and_refuse_to_take_what_is_held() -> None:
    slots = GpuSlots(4)
    a, b = need("a", 3), need("b", 2)
    assert slots.take(a) == Grant((0, 1, 2))
    assert slots.free == [3]
    assert slots.fits(b) is None and slots.blockers(b) == ["a"]
    with pytest.raises(ValueError, match="b cannot start now: a"):
        slots.take(b)
    slots.release("a")
    assert slots.fits(b) == Grant((0, 1))
    assert not GpuSlots(None).shares(need("x"))
    assert not GpuSlots(2).shares(need("x", alone=True))


def test_a_hosts_runs_at_once_fit_its_ssh_connections_channels() -> None:
    """Each run keeps two channels open (its log's tail, its load generator), the agent its
    session and a spare load generator: all of them, plus one for a short call, must fit the
    connection, so a short call never waits for a stream that lasts as long as a server."""
    assert 2 * MAX_RUNS_PER_HOST + BACKGROUND_CHANNELS + 1 <= MAX_CHANNELS
    assert MAX_CHANNELS <= 9  # sshd's MaxSessions (10) less SFTP's channel


def test_overlapping_names_the_runs_live_at_once() -> None:
    placed = [
        Placement("a", 0, 10, (0,)),
        Placement("b", 0, 5, (1,)),
        Placement("c", 5, 12, (1,)),
        Placement("d", 12, 13, (0,)),
    ]
    assert overlapping(placed) == {"a": ["b", "c"], "b": ["a"], "c": ["a"], "d": []}


def test_the_host_gpu_count_is_the_probes_then_hosts_yamls() -> None:
    declared = HostConfig(name="h", gpus=GpuSpec(4, "RTX A6000"))
    assert host_gpu_count(declared, 2) == 2
    assert host_gpu_count(declared, None) == 4
    assert host_gpu_count(HostConfig(name="h"), None) is None


HOSTS = "hosts:\n  emb-1:\n    transport: embedded\n    gpus: 2 x RTX A6000\n"
PLAYBOOK = """name: share
share_gpus: {share}
hosts: [emb-1]
defaults: {{model: Qwen/Qwen3-8B, engine: vllm, workload: {{num_prompts: 2}}}}
runs:
  - name: small
    port: 8100
  - name: same-port
    port: 8100
  - name: big
    port: 8200
    tensor_parallel: {tp}
"""


def write(tmp_path: Path, *, share: bool, tp: int) -> tuple[Path, Path]:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    (tmp_path / "play.yaml").write_text(PLAYBOOK.format(share=str(share).lower(), tp=tp))
    return tmp_path / "play.yaml", tmp_path / "hosts.yaml"


def test_a_run_no_host_could_hold_is_refused_at_plan_time_naming_run_and_host(
    tmp_path: Path,
) -> None:
    play, hosts = write(tmp_path, share=True, tp=4)
    with pytest.raises(ConfigError) as info:
        plan_run(play, hosts, None)
    error = info.value
    assert (error.file, error.line, error.path) == (str(play), 12, "runs[2].tensor_parallel")
    assert error.message == (
        "run 'big' needs 4 GPUs (tensor_parallel 4) but host emb-1 has 2 (hosts.yaml: gpus: "
        "2 x RTX A6000): with share_gpus it could never get them"
    )
    assert error.hint is not None and "extra_args) to 2 or less" in error.hint
    # without share_gpus, as before: the doctor judges it on the host (and --force may launch)
    play, hosts = write(tmp_path, share=False, tp=4)
    assert [p.run_name for p in plan_run(play, hosts, None).plans] == ["small", "same-port", "big"]


def test_runs_of_one_host_on_one_port_are_not_a_collision_with_share_gpus(tmp_path: Path) -> None:
    """They wait for each other (the scheduler's port rule), so the plan is not refused."""
    play, hosts = write(tmp_path, share=True, tp=2)
    plan = plan_run(play, hosts, None)
    assert plan.playbook.share_gpus is True
    assert [(p.run_name, p.port, p.gpus) for p in plan.plans] == [
        ("small", 8100, 1),
        ("same-port", 8100, 1),
        ("big", 8200, 2),
    ]
