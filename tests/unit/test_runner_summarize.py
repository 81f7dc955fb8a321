"""One run's result (pure): the log's missing figure explained, client saturation warnings,
phase times, settings and provenance."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from pathlib import Path

import pytest

from orchestrator import __version__
from orchestrator.config import load_inventory, load_playbook
from orchestrator.engines import get_engine
from orchestrator.engines.logs import LogFollower
from orchestrator.engines.plan import PlannedLaunch, plan_launches
from orchestrator.errors import SpecError
from orchestrator.loadgen.prompts import PromptSet
from orchestrator.loadgen.records import Chunk, LoadgenResult, RequestRecord
from orchestrator.loadgen.records import ClientLag as WireClientLag
from orchestrator.loadgen.records import LagStats as WireLagStats
from orchestrator.metrics.summary import ClientLag, LagStats
from orchestrator.results.model import RunResult, RunTimes, WorkloadSettings
from orchestrator.runner.assemble import build_result
from orchestrator.runner.state import LiveState, RunJob
from orchestrator.runner.summarize import (
    FIRST_READ_SHARED_WARN_PCT,
    LOOP_DELAY_WARN_MS,
    RATE_SHORTFALL,
    SEND_LAG_WARN_MS,
    SHARED_READ_WARN_PCT,
    DecodeSteps,
    client_warnings,
    decode_steps,
    log_missing_note,
    send_rates,
)

HOSTS = """\
hosts:
  gpu-a: {address: 10.0.0.1, gpus: 2 x RTX A6000}
"""
PLAYBOOK = """\
name: t
hosts: [gpu-a]
runs:
  - name: vllm-dflash
    engine: vllm
    model: Qwen/Qwen3.6-27B
    speculative: {method: dflash, draft_model: z-lab/Qwen3.6-27B-DFlash, num_draft_tokens: 3}
    env: {VLLM_LOG_STATS_INTERVAL: "5"}
    workload: {num_prompts: 2, concurrency: 1, max_tokens: 8}
  - name: sglang-mtp
    engine: sglang
    model: Qwen/Qwen3.6-27B
    speculative: {method: mtp, num_draft_tokens: 3}
    workload: {num_prompts: 2, request_rate: 4, max_tokens: 8}
"""
PREFIX = "(APIServer pid=1) INFO 12-02 10:57:11 [metrics.py:120] "
ENGINE_LINE = (
    PREFIX + "Engine 000: Avg prompt throughput: 20.0 tokens/s, Avg generation "
    "throughput: {gen} tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: "
    "1.0%, Prefix cache hit rate: 0.0%"
)
SPEC_LINE = (
    PREFIX + "SpecDecoding metrics: Mean acceptance length: 3.00, Accepted throughput: "
    "2.00 tokens/s, Drafted throughput: 3.00 tokens/s, Accepted: 20 tokens, Drafted: 30 "
    "tokens, Per-position acceptance rate: 0.800, 0.700, 0.500, Avg Draft acceptance "
    "rate: 66.7%"
)
T0 = datetime(2026, 12, 2, 10, 0, 0, tzinfo=timezone.utc).timestamp()


@pytest.fixture
def plans(tmp_path: Path) -> dict[str, PlannedLaunch]:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    (tmp_path / "play.yaml").write_text(PLAYBOOK)
    found = plan_launches(
        load_playbook(tmp_path / "play.yaml"), load_inventory(tmp_path / "hosts.yaml"), environ={}
    )
    return {p.run_name: p for p in found}


def record(index: int, *, start: float, due: float, warmup: bool = False) -> RequestRecord:
    chunks = (Chunk(0.05, 1), Chunk(0.10, 3), Chunk(0.15, 3), Chunk(0.20, 1))
    return RequestRecord(
        index=index,
        warmup=warmup,
        start=start,
        start_wall=T0 + start,
        end=start + 0.2,
        due=due,
        status=200,
        ttft=0.05,
        e2el=0.2,
        chunks=chunks,
        output_tokens=8,
        prompt_tokens=5,
        token_count_method="usage",
    )


def loadgen(
    *, mode: str = "closed", rate: float | None = None, duration: float = 0.6, loop_p99: float = 2.0
) -> LoadgenResult:
    return LoadgenResult(
        requests=2,
        completed=2,
        failed=0,
        duration_s=duration,
        started_at=T0 + 1.0,
        ended_at=T0 + 1.0 + duration,
        mode=mode,
        request_rate=rate,
        client_lag=WireClientLag(
            send_lag_ms=WireLagStats(n=2, mean=0.0, p50=0.0, p99=0.0, max=0.0),
            loop_delay_ms=WireLagStats(n=30, mean=0.5, p50=0.5, p99=loop_p99, max=loop_p99),
            loop_tick_ms=20.0,
        ),
    )


def live(
    engine: str, before: list[str], inside: list[str], records: list[RequestRecord]
) -> LiveState:
    """The followers as the tail fed them: ``inside`` arrived after the window opened."""
    state = LiveState(follower=LogFollower(engine=engine), records=records)
    for line in before:
        state.follower.feed_line(line)
    state.window_first_line = state.follower.line_no + 1
    state.window = LogFollower(engine=engine)
    for line in inside:
        state.follower.feed_line(line)
        state.window.feed_line(line)
    return state


def summarize(plan: PlannedLaunch, state: LiveState, result: LoadgenResult) -> RunResult:
    job = RunJob(
        key="k",
        order=0,
        plan=plan,
        run_dir=Path("/nonexistent/k"),
        prompts=PromptSet(source="builtin:chat"),
        run_id="r-1",
    )
    times = RunTimes.from_epoch(
        started_at=T0,
        ended_at=T0 + 9.5,
        ready_at=T0 + 0.75,
        measure_started_at=result.started_at,
        measure_ended_at=result.ended_at,
    )
    return build_result(job, state=state, loadgen=result, error=None, times=times)


def test_no_spec_line_in_a_short_window_is_explained(plans) -> None:
    """The window (0.6 s) is shorter than the stats interval: the only SpecDecoding line came
    before it, so the log has no figure, and the summary says why and what to set."""
    state = live(
        "vllm",
        [ENGINE_LINE.format(gen=10.0), SPEC_LINE],
        [ENGINE_LINE.format(gen=12.0)],
        [record(0, start=1.0, due=1.0), record(1, start=1.3, due=1.3)],
    )
    result = summarize(plans["vllm-dflash"], state, loadgen())
    acc = result.acceptance
    assert acc is not None and acc.log is None
    assert acc.client == pytest.approx(7 / 3)  # 8 - 1 tokens over the 3 steps after chunk 1
    assert result.provenance.log_lines == (3, 3)
    notes = [n for n in acc.notes if n.startswith("log:")]
    assert notes == [
        "log: no SpecDecoding metrics line fell in the measured window (0.6 s): vLLM prints one "
        "every VLLM_LOG_STATS_INTERVAL = 5 s; set it lower in the run's env (e.g. env: "
        '{VLLM_LOG_STATS_INTERVAL: "1"}), or measure longer: at the measured 3.33 requests/s, '
        "num_prompts 34 (or duration_s 10) would hold 2 intervals"
    ]
    # and the console says it (issue 9, item 4)
    assert [(w.kind, w.message) for w in result.warnings] == [("acceptance_log_missing", notes[0])]


def test_a_spec_line_in_the_window_needs_no_note(plans) -> None:
    state = live(
        "vllm",
        [ENGINE_LINE.format(gen=10.0)],
        [ENGINE_LINE.format(gen=12.0), SPEC_LINE],
        [record(0, start=1.0, due=1.0), record(1, start=1.3, due=1.3)],
    )
    acc = summarize(plans["vllm-dflash"], state, loadgen()).acceptance
    assert acc is not None and acc.log == pytest.approx(3.0)
    assert not [n for n in acc.notes if n.startswith("log:")]


def test_client_figure_left_out_when_the_engine_merged_decode_steps(plans) -> None:
    """num_draft_tokens 3: a step makes at most 4 tokens, so a 7-token chunk is two steps the
    server sent as one: tokens per chunk would overstate acceptance; without one it stands."""
    lines = [ENGINE_LINE.format(gen=12.0), SPEC_LINE]
    steady = [record(0, start=1.0, due=1.0), record(1, start=1.3, due=1.3)]
    acc = summarize(plans["vllm-dflash"], live("vllm", [], lines, steady), loadgen()).acceptance
    assert acc is not None and acc.client == pytest.approx(7 / 3)  # (3 + 3 + 1) / 3 steps
    assert not [n for n in acc.notes if n.startswith("client:")]
    merged = dataclasses.replace(steady[1], chunks=(Chunk(0.05, 1), Chunk(0.15, 7)))
    state = live("vllm", [], lines, [steady[0], merged])
    acc = summarize(plans["vllm-dflash"], state, loadgen()).acceptance
    assert acc is not None and acc.client is None and acc.length == pytest.approx(3.0)
    assert [n for n in acc.notes if n.startswith("client:")] == [
        "client: 1 chunk(s) carried more than 4 tokens, more than one decode step makes: the "
        "engine's server merged steps (it fell behind), so tokens per chunk would overstate the "
        "acceptance length and is left out"
    ]


@pytest.mark.parametrize(
    ("engine", "env", "argv", "expected"),
    [
        ("vllm", {}, [], "VLLM_LOG_STATS_INTERVAL = 10 s"),
        ("vllm", {"VLLM_LOG_STATS_INTERVAL": "30"}, [], "VLLM_LOG_STATS_INTERVAL = 30 s"),
        ("sglang", {}, ["--decode-log-interval", "40"], "one every 40 decode steps"),
        (
            "sglang",
            {},
            ["--decode-log-interval", "40", "--decode-log-interval=100"],
            "one every 100 decode steps",
        ),
        ("sglang", {}, [], "one every 40 decode steps"),
    ],
)
def test_log_missing_note_names_the_interval(engine, env, argv, expected) -> None:
    assert expected in log_missing_note(engine, window_s=2.0, env=env, argv=argv)


SGLANG_HEAD = (
    "log: no Decode batch line with an accept len fell in the measured window (0.6 s): "
    "SGLang prints one every 40 decode steps (--decode-log-interval: orch sets it, a "
    "run cannot)"
)


def test_sglang_note_sizes_a_longer_window_instead_of_a_flag_orch_refuses(plans) -> None:
    """orch passes --decode-log-interval itself and refuses it in extra_args, so the note must
    not send the user there: it says how many steps the window held (two requests decoding
    0.15 s each, apart, at 50 ms a step: 6) against the 80 that surely hold a line."""
    plan = plans["sglang-mtp"]
    extra = plan.run.model_copy(update={"extra_args": ["--decode-log-interval", "10"]})
    with pytest.raises(SpecError, match="--decode-log-interval, which orch sets"):
        get_engine("sglang").validate(extra)
    state = live("sglang", [], [], [record(0, start=1.0, due=1.0), record(1, start=1.3, due=1.3)])
    acc = summarize(plan, state, loadgen(mode="open", rate=4.0)).acceptance
    assert acc is not None and acc.log is None
    assert [n for n in acc.notes if n.startswith("log:")] == [
        SGLANG_HEAD + "; the window held about 6 decode steps (50.0 ms each): measure at least "
        "80 steps, 13.3x longer at this load (num_prompts 27 or duration_s 8)"
    ]


def test_sglang_note_without_a_step_estimate_or_with_enough_steps() -> None:
    argv = ["--decode-log-interval", "40"]
    assert log_missing_note("sglang", window_s=0.6, env={}, argv=argv) == (
        SGLANG_HEAD + "; measure longer (more num_prompts or duration_s)"
    )
    enough = DecodeSteps(count=95.0, step_s=0.02)
    assert log_missing_note(
        "sglang", window_s=0.6, env={}, argv=argv, steps=enough, completed=2
    ) == (
        SGLANG_HEAD + "; the window held about 95 decode steps (20.0 ms each), enough for a line: "
        "check that server.log holds them"
    )


def test_decode_steps_count_overlapping_requests_once() -> None:
    """Two requests decoding at once share the engine's steps: 0.15 s busy twice over, overlapped
    by 0.05 s, is 0.25 s of decoding, 5 steps of 50 ms. Warm-up requests do not count."""
    records = [
        record(0, start=1.0, due=1.0),
        record(1, start=1.1, due=1.1),
        record(2, start=0.0, due=0.0, warmup=True),
    ]
    steps = decode_steps(records)
    assert steps is not None
    assert (steps.count, steps.step_s) == (pytest.approx(5.0), pytest.approx(0.05))
    assert decode_steps(records[2:]) is None


def test_times_and_no_warning_for_a_healthy_client(plans) -> None:
    state = live(
        "vllm", [], [SPEC_LINE], [record(0, start=1.0, due=1.0), record(1, start=1.3, due=1.3)]
    )
    result = summarize(plans["vllm-dflash"], state, loadgen())
    assert result.times.model_dump(mode="json") == {
        "started_at": "2026-12-02T10:00:00.000+00:00",
        "ready_at": "2026-12-02T10:00:00.750+00:00",
        "measure_started_at": "2026-12-02T10:00:01.000+00:00",
        "measure_ended_at": "2026-12-02T10:00:01.600+00:00",
        "ended_at": "2026-12-02T10:00:09.500+00:00",
        "duration_s": 9.5,
        "server_start_s": 0.75,
        "measure_s": 0.6,
    }
    assert [w for w in result.warnings if w.kind == "client_saturated"] == []
    assert result.error is None
    # the line that fell in is a whole 5 s interval, mostly outside the 0.6 s window
    assert [w.message for w in result.warnings if w.kind == "short_log_window"] == [
        "short measuring window: 0.6 s is shorter than VLLM_LOG_STATS_INTERVAL = 5 s, so the "
        "log's acceptance figure covers mostly time outside it; measure longer: at the measured "
        "3.33 requests/s, num_prompts 34 (or duration_s 10) would hold 2 intervals"
    ]
    assert result.requests is not None and result.requests.client_lag.loop_delay_ms is not None
    assert result.requests.client_lag.loop_delay_ms.p99 == 2.0
    assert result.loadgen is not None and result.loadgen.achieved_request_rate is None  # closed


def test_saturated_client_fails_the_measurement(plans) -> None:
    """Open loop at 4 req/s: requests due 0.25 s apart went out 1 s apart, the event loop lagged:
    the client set the pace, so the measurement is failed, not an ok figure with a warning."""
    records = [record(i, start=1.0 + i * 1.0, due=1.0 + i * 0.25) for i in range(3)]
    state = live("sglang", [], [], records)
    result = summarize(plans["sglang-mtp"], state, loadgen(mode="open", rate=4.0, loop_p99=35.0))
    assert result.loadgen is not None
    assert result.loadgen.achieved_request_rate == pytest.approx(1.0)
    assert result.loadgen.scheduled_request_rate == pytest.approx(4.0)
    saturated = [w for w in result.warnings if w.kind == "client_saturated"]
    # which signals pass is the detector's calibration (benchmarks/saturation.py); the loop's
    # delay and the open loop's shortfall are far past any threshold here
    assert saturated[0].message.startswith("client saturated: event-loop delay p99 35.0 ms")
    assert saturated[0].details == {
        "signal": "loop_delay_p99_ms", "value": 35.0, "limit": LOOP_DELAY_WARN_MS,
    }  # fmt: skip
    assert saturated[-1].details == {
        "signal": "achieved_rate_fraction", "value": 0.25, "limit": RATE_SHORTFALL,
    }  # fmt: skip
    assert result.verdict == "failed" and result.error is not None
    assert (result.error.type, result.error.kind) == ("MeasurementFailed", "client_saturated")
    assert result.error.message == " | ".join(w.message for w in saturated)


@pytest.mark.parametrize(
    ("lag", "rate", "achieved", "scheduled", "count"),
    [
        (
            ClientLag(
                loop_delay_ms=LagStats(p99=LOOP_DELAY_WARN_MS),
                send_lag_ms=LagStats(p50=SEND_LAG_WARN_MS, p99=1000.0),  # a wave's tail
                shared_read_pct=SHARED_READ_WARN_PCT,
                first_read_shared_pct=FIRST_READ_SHARED_WARN_PCT,
            ),
            None,
            None,
            None,
            0,
        ),
        (
            ClientLag(first_read_shared_pct=FIRST_READ_SHARED_WARN_PCT + 0.1),
            None,
            None,
            None,
            1,
        ),
        (ClientLag(loop_delay_ms=LagStats(p99=LOOP_DELAY_WARN_MS + 0.1)), None, None, None, 1),
        (ClientLag(send_lag_ms=LagStats(p50=SEND_LAG_WARN_MS + 0.5)), None, None, None, 1),
        (ClientLag(shared_read_pct=SHARED_READ_WARN_PCT + 0.1), None, None, None, 1),
        (ClientLag(), 10.0, 8.0, 10.0, 0),  # 80%: still keeping up
        (ClientLag(), 10.0, 7.9, 10.0, 1),
        (ClientLag(), None, 1.0, 10.0, 0),  # closed loop: no schedule to fall behind
        (None, 10.0, None, None, 0),
    ],
)
def test_client_warning_thresholds(lag, rate, achieved, scheduled, count) -> None:
    warnings = client_warnings(
        client_lag=lag, request_rate=rate, achieved_rate=achieved, scheduled_rate=scheduled
    )
    assert len(warnings) == count
    assert all(w.kind == "client_saturated" for w in warnings)


@pytest.mark.parametrize(("clock", "count"), [("kernel", 0), ("loop", 1), ("mixed", 1), (None, 1)])
def test_a_late_loop_counts_only_where_the_loop_stamps_the_chunks(clock, count) -> None:
    """With the kernel's receive time on every read, a late loop moves a chunk's time only by
    reading it with the next one, which the shared reads count; elsewhere its delay is the time."""
    late = ClientLag(loop_delay_ms=LagStats(p99=LOOP_DELAY_WARN_MS * 3), shared_read_pct=0.0)
    warnings = client_warnings(
        client_lag=late,
        request_rate=None,
        achieved_rate=None,
        scheduled_rate=None,
        arrival_clock=clock,
    )
    assert [w.details.get("signal") for w in warnings] == ["loop_delay_p99_ms"] * count


def test_send_rates_ignore_warmup() -> None:
    records = [
        record(0, start=0.0, due=0.0, warmup=True),
        record(1, start=5.0, due=5.0),
        record(2, start=5.5, due=5.25),
        record(3, start=6.0, due=5.5),
    ]
    assert send_rates(records) == (pytest.approx(2.0), pytest.approx(4.0))
    assert send_rates(records[:2]) == (None, None)


def test_settings_identity_and_provenance_are_recorded(plans) -> None:
    """The result says what ran and under which load, so the CSV and plot need nothing else."""
    state = live("sglang", [], [], [record(0, start=1.0, due=1.0), record(1, start=1.3, due=1.3)])
    result = summarize(plans["sglang-mtp"], state, loadgen(mode="open", rate=4.0))
    assert (result.run.name, result.run.key, result.run.host, result.run.run_id) == (
        "sglang-mtp",
        "k",
        "gpu-a",
        "r-1",
    )
    settings = result.settings
    assert (settings.engine, settings.model, settings.configuration) == (
        "sglang",
        "Qwen/Qwen3.6-27B",
        "sglang mtp",
    )
    assert (settings.speculative.method, settings.speculative.num_draft_tokens) == ("mtp", 3)
    # an open loop whose run wrote no concurrency has no cap on requests in flight
    assert settings.workload == WorkloadSettings(
        prompts="builtin:chat",
        num_prompts=2,
        concurrency=None,
        request_rate=4.0,
        max_tokens=8,
        warmup=2,
    )
    assert result.provenance.orch_version == __version__
    assert result.schema_version == 5 and result.error is None
    # what summary.json holds reads back as the same result
    assert RunResult.from_json(result.to_json()) == result


def test_failed_requests_fail_it_and_an_unmarked_window_is_warned_about(plans) -> None:
    """A failed request fails the measurement (max_failed_fraction 0); figures over a log that
    includes warm-up are said to be so: a partly failed run is not silently ok."""
    records = [record(0, start=1.0, due=1.0), record(1, start=1.3, due=1.3)]
    state = live("vllm", [], [SPEC_LINE], records)
    state.window = None  # the load generator never sent its "measure" phase
    partial = dataclasses.replace(loadgen(), completed=1, failed=1)
    result = summarize(plans["vllm-dflash"], state, partial)
    assert [(w.kind, w.message) for w in result.warnings[:2]] == [
        (
            "requests_failed",
            "1 of 2 measured requests failed (50.0%, more than max_failed_fraction 0 allows)",
        ),
        (
            "log_window_unmarked",
            "the load generator never marked its measured window: log figures were read over "
            "the whole server log, warm-up included",
        ),
    ]
    assert result.error is not None and result.error.kind == "requests_failed"
