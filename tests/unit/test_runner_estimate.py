"""`orch run --dry-run`'s plan and estimate (``runner/estimate.py``): the guess from the
workload, earlier results taking its place, placement on shared GPUs, and what the CLI prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.config import load_inventory, load_playbook
from orchestrator.config.playbook import WorkloadSpec
from orchestrator.engines.plan import PlannedLaunch, plan_launches
from orchestrator.results.model import RunResult, RunTimes
from orchestrator.runner.estimate import (
    Past,
    duration_text,
    estimate,
    guess_measurement_s,
    past_from,
    plan_json,
    read_past,
    server_plan,
)
from tests.fixtures.sweep_results import measurement, write_sweep

T0 = 1_767_225_600.0


@pytest.mark.parametrize(
    ("workload", "warmup", "seconds"),
    [
        # closed loop: ceil(10 / 4) = 3 waves of 100 tokens at 25 tok/s, + 2 s overhead
        ({"concurrency": 4, "num_prompts": 10, "max_tokens": 100, "warmup": 2}, False, 14.0),
        # ... and its server's first measurement warms up first: one wave of 2 requests
        ({"concurrency": 4, "num_prompts": 10, "max_tokens": 100, "warmup": 2}, True, 18.0),
        ({"concurrency": 4, "num_prompts": 10, "max_tokens": 100, "warmup": 0}, True, 14.0),
        # open loop: 10 requests at 2/s, the last one's 2 s of decoding, + 2 s
        ({"request_rate": 2.0, "num_prompts": 10, "max_tokens": 50, "warmup": 2}, False, 9.0),
        ({"request_rate": 2.0, "num_prompts": 10, "max_tokens": 50, "warmup": 2}, True, 12.0),
        # duration_s ends a measurement before num_prompts would; warm-up: 2 x 96 / 25 s
        (
            {"concurrency": 1, "num_prompts": 1000, "max_tokens": 96, "duration_s": 6},
            True,
            15.68,
        ),
        # ... unless num_prompts ends it first: 2 waves of 25 tokens
        ({"concurrency": 4, "num_prompts": 8, "max_tokens": 25, "duration_s": 60}, False, 4.0),
    ],
)
def test_a_measurement_is_guessed_from_its_workload(
    workload: dict[str, object], warmup: bool, seconds: float
) -> None:
    spec = WorkloadSpec.model_validate(workload)
    assert guess_measurement_s(spec, warmup=warmup) == pytest.approx(seconds, abs=1e-9)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (59.4, "59 s"),
        (60, "1 min 00 s"),
        (200, "3 min 20 s"),
        (3599, "59 min 59 s"),
        (3600, "1 h 00 min"),
        (7500, "2 h 05 min"),
    ],
)
def test_durations_read_as_people_say_them(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


HOSTS = """hosts:
  h1: {transport: embedded, gpus: 4 x RTX A6000}
  h2: {transport: embedded, gpus: 2 x RTX A6000}
  h3: {transport: embedded}
"""
SWEEP = """name: est
share_gpus: {share}
hosts: [h1]
defaults:
  engine: vllm
  model: Qwen/Qwen3-8B
  workload: {{num_prompts: 10, max_tokens: 160, warmup: 2}}
runs:
  - name: sweep
    port: 8100
    workload:
      concurrency: [1, 2]
      repeat: 2
      slo: {{targets: ["tpot_ms_median <= 50"], search: concurrency, range: [1, 16], max_points: 4}}
  - name: tp2
    port: 8200
    tensor_parallel: 2
  - name: pinned
    port: 8300
    env: {{CUDA_VISIBLE_DEVICES: "3"}}
  - name: other
    hosts: [h2]
    port: 8400
  - name: third
    hosts: [h3]
    port: 8500
"""


def plans_of(tmp_path: Path, *, share: bool = True) -> list[PlannedLaunch]:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    (tmp_path / "play.yaml").write_text(SWEEP.format(share=str(share).lower()))
    return plan_launches(
        load_playbook(tmp_path / "play.yaml"), load_inventory(tmp_path / "hosts.yaml")
    )


def test_a_sweeps_estimate_guesses_each_measurement_and_bounds_its_search(
    tmp_path: Path,
) -> None:
    sweep = server_plan(plans_of(tmp_path)[0], Past())
    assert (sweep.load_kind, sweep.load_values, sweep.repeat, sweep.measurements) == (
        "concurrency",
        [1.0, 2.0],
        2,
        4,
    )
    # 160 tokens at 25 tok/s = 6.4 s a request; c=1: 10 waves (the first warms up: 2 more);
    # c=2: 5 waves; each + 2 s
    assert sweep.measure_s == pytest.approx((12.8 + 64 + 2) + (64 + 2) + 2 * (32 + 2))
    assert (sweep.start_s, sweep.start_source, sweep.measure_source) == (120.0, "guess", "guess")
    # the search: 4 points x 2 repeats, each at c=4 (sqrt(1 x 16)): 3 waves + 2 s
    assert sweep.search is not None
    assert (sweep.search.kind, sweep.search.low, sweep.search.high) == ("concurrency", 1, 16)
    assert sweep.search.measurements == 8
    assert sweep.search.seconds == pytest.approx(8 * (3 * 6.4 + 2))
    assert sweep.total_s == pytest.approx(120 + 212.8 + 169.6)


def timed(
    value: float, start: float, end: float, *, ready: float | None = None, **kw: object
) -> RunResult:
    result = measurement("sweep", value=value, **kw)  # type: ignore[arg-type]
    times = RunTimes.from_epoch(
        started_at=T0 + start, ended_at=T0 + end, ready_at=None if ready is None else T0 + ready
    )
    return result.model_copy(update={"times": times})


def history() -> list[RunResult]:
    """The sweep's c=1 measured twice on h1 before (the first after a 5 s start), plus results
    that must not count: a failed one, another host's, another workload's."""
    other = timed(1, 0, 999, host="h1", index=5)
    settings = other.settings.model_copy(
        update={"workload": other.settings.workload.model_copy(update={"max_tokens": 7})}  # type: ignore[union-attr]
    )
    return [
        timed(1, 0, 40, ready=5, host="h1", index=0, repeat=1),  # 35 s past the start
        timed(1, 40, 69, host="h1", index=0, repeat=2),  # 29 s
        timed(2, 69, 500, host="h1", index=1, repeat=1, error="engine died"),
        timed(2, 0, 500, host="h9", index=1, repeat=1),
        other.model_copy(update={"settings": settings}),
    ]


def test_earlier_results_of_the_same_run_and_host_replace_the_guess(tmp_path: Path) -> None:
    sweep = server_plan(plans_of(tmp_path)[0], past_from(history()))
    assert (sweep.start_s, sweep.start_source) == (5.0, "history")
    # c=1: the median of 35 and 29 s, for both repeats; c=2 still guessed (34 s each)
    assert sweep.measure_s == pytest.approx(32 + 32 + 34 + 34)
    assert sweep.measure_source == "history and guess"


def test_read_past_reads_the_results_folders_and_passes_over_what_it_cannot(
    tmp_path: Path,
) -> None:
    root = tmp_path / "results"
    write_sweep(root / "20260101T000000Z-est", history())
    aside = root / "20260101T000000Z-est" / "sweep_h1" / "points" / "09-c1-r1.interrupted-1"
    aside.mkdir(parents=True)
    (aside / "summary.json").write_text(json.dumps(timed(1, 0, 1000).to_json()))
    broken = root / "20260102T000000Z-est" / "sweep_h1"
    broken.mkdir(parents=True)
    (broken / "summary.json").write_text("{not json")
    assert read_past(root) == past_from(history())
    assert read_past(tmp_path / "none") == Past()


def test_placement_shares_gpus_and_hosts_run_in_parallel(tmp_path: Path) -> None:
    plan = estimate(plans_of(tmp_path), share_gpus=True)
    h1, h2, h3 = plan.hosts
    assert (h1.host, h1.gpu_count, h1.shared) == ("h1", 4, True)
    sweep, tp2, pinned = h1.servers
    assert (sweep.gpu_ids, sweep.begins_s, sweep.beside) == ([0], 0.0, ["tp2"])
    assert (tp2.gpu_ids, tp2.begins_s, tp2.beside) == ([1, 2], 0.0, ["sweep"])
    # its env picks its GPU: alone on the host once both are done
    assert (pinned.gpu_ids, pinned.alone, pinned.waits_for) == (None, True, ["sweep", "tp2"])
    assert pinned.begins_s == pytest.approx(max(sweep.total_s, tp2.total_s))
    assert h1.total_s == pytest.approx(pinned.ends_s)
    assert (h3.gpu_count, h3.shared, h3.servers[0].gpu_ids) == (None, False, None)
    assert plan.total_s == pytest.approx(max(h.total_s for h in (h1, h2, h3)))
    assert plan.measurements == 4 + 1 + 1 + 1 + 1
    alone = estimate(plans_of(tmp_path, share=False), share_gpus=False)
    one = alone.hosts[0]
    assert [s.gpu_ids for s in one.servers] == [None, None, None]
    assert one.servers[1].begins_s == pytest.approx(one.servers[0].total_s)  # one after another
    assert one.total_s == pytest.approx(sum(s.total_s for s in one.servers))


def test_the_json_plan_carries_every_figure(tmp_path: Path) -> None:
    data = plan_json(estimate(plans_of(tmp_path), share_gpus=True))
    assert data["share_gpus"] is True and data["measurements"] == 8
    first = data["hosts"][0]["servers"][0]
    assert first["slo_search"] == {
        "kind": "concurrency",
        "range": [1.0, 16.0],
        "max_measurements": 8,
        "max_s": 169.6,
    }
    assert {k: first[k] for k in ("run", "gpu_ids", "beside", "measurements", "repeat")} == {
        "run": "sweep",
        "gpu_ids": [0],
        "beside": ["tp2"],
        "measurements": 4,
        "repeat": 2,
    }
    assert first["load"] == {"kind": "concurrency", "values": [1.0, 2.0]}
    assert data["constants"] == {
        "decode_tok_s": 25.0,
        "server_start_s": 120.0,
        "measurement_overhead_s": 2.0,
    }


def test_the_dry_run_prints_the_plan_per_host_and_its_json(tmp_path: Path) -> None:
    plans_of(tmp_path)
    args = ["run", str(tmp_path / "play.yaml"), "--hosts", str(tmp_path / "hosts.yaml")]
    results = ["--results", str(tmp_path / "results"), "--dry-run"]
    text = CliRunner().invoke(app, [*args, *results], terminal_width=400)
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0] == "host h1: 4 GPUs, runs share them at once (share_gpus), about 11 min 41 s"
    assert lines[1] == "  sweep (vllm, port 8100): GPU 0, beside tp2, from 0 s to 8 min 22 s"
    assert "  tp2 (vllm, port 8200): GPUs 1,2, beside sweep, from 0 s to 3 min 19 s" in lines
    assert "    load: concurrency 1, 2 x 2 repeats: 4 measurements" in lines
    assert (
        "    SLO search: concurrency in [1, 16], up to 8 more measurements (at most 2 min 50 s, "
        "guess)"
    ) in lines
    assert (
        "    estimate: server start 2 min 00 s (guess) + measurements 3 min 33 s (guess) + SLO "
        "search = at most 8 min 22 s"
    ) in lines
    assert (
        "  pinned (vllm, port 8300): 1 GPU, alone on the host (its env sets "
        "CUDA_VISIBLE_DEVICES), after sweep, tp2, from 8 min 22 s to 11 min 41 s"
    ) in lines
    assert (
        "host h3: GPU count not in hosts.yaml; runs share them once the probe counts them "
        "(share_gpus), about 3 min 19 s"
    ) in lines
    assert "  third (vllm, port 8500): 1 GPU, from 0 s to 3 min 19 s" in lines
    assert (
        "total: 5 servers, 8 measurements, about 11 min 41 s (hosts in parallel, runs sharing "
        "a host at once)"
    ) in lines
    assert "estimates are rough: 'history' is the median of earlier results" in text.stdout
    as_json = CliRunner().invoke(app, [*args, *results, "--json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert [r["run"] for r in data["runs"]] == ["sweep", "tp2", "pinned", "other", "third"]
    assert data["plan"]["estimated_s"] == pytest.approx(701.2)
