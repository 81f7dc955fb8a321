"""`orch loadgen URL`: the load generator on its own writes a run's files, says a failed
measurement is failed, and refuses bad input with one message before touching anything."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.cli.main import run as run_cli
from orchestrator.commands.loadgen import (
    LoadgenOptions,
    base_url,
    summarize,
    workload_of,
)
from orchestrator.engines import engine_serving
from orchestrator.errors import ConfigError
from orchestrator.loadgen.records import ClientLag, LagStats, LoadgenResult, RequestRecord
from orchestrator.remote.wire import Chunk
from orchestrator.results.model import RunResult, RunTimes
from tests.fixtures.simserver import MODEL as SIM_MODEL
from tests.fixtures.simserver import start_sim, stop_sim

MODEL = SIM_MODEL
NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3})


# ---------------------------------------------------------------- input, pure


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("http://gpu-1:8000/v1", "http://gpu-1:8000"),
        ("https://example.org/serving/v1/", "https://example.org/serving"),
    ],
)
def test_base_url(url: str, base: str) -> None:
    assert base_url(url) == base


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://host/", "http://", "http://h/?a=1"])
def test_a_url_that_is_not_a_servers_is_refused(url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        base_url(url)
    assert refused.value.path == "URL"


def test_options_become_a_playbooks_workload() -> None:
    opts = LoadgenOptions(url="http://h:1", model="m", prompts="random:128", concurrency=8)
    w = workload_of(opts)
    assert (w.prompts, w.input_len, w.concurrency, w.request_rate) == ("random", 128, 8, None)
    assert (w.num_prompts, w.max_tokens, w.warmup, w.seed) == (64, 256, 2, 0)  # its defaults
    assert w.ramp_s is None  # the load generator's default ramp
    burst = workload_of(LoadgenOptions(url="http://h:1", model="m", concurrency=8, ramp_s=0.0))
    assert burst.ramp_s == 0.0
    capped = workload_of(
        LoadgenOptions(url="http://h:1", model="m", request_rate=5.0, concurrency=4)
    )
    assert capped.open_loop_cap == 4
    free = workload_of(LoadgenOptions(url="http://h:1", model="m", request_rate=5.0))
    assert free.open_loop_cap is None  # no --concurrency: the open loop has no cap


def test_the_engine_serving_a_scrape() -> None:
    scrape = "# HELP vllm:num_requests_running x\nvllm:num_requests_running 0\n"
    assert engine_serving(scrape) == "vllm"
    assert engine_serving('sglang:num_running_reqs{model_name="m"} 0\n') == "sglang"
    assert engine_serving("process_cpu_seconds_total 1.5\n") is None
    assert engine_serving(None) is None


def _record(index: int, tokens: int = 8) -> RequestRecord:
    chunks = tuple(Chunk(0.1 + 0.01 * i, 1) for i in range(tokens))
    return RequestRecord(
        index=index, warmup=False, start=float(index), start_wall=1e9 + index, end=index + 0.2,
        due=float(index), status=200, ttft=0.1, e2el=chunks[-1].t, chunks=chunks,
        output_tokens=tokens, prompt_tokens=5, token_count_method="usage",
    )  # fmt: skip


def _lag(loop_p99: float) -> ClientLag:
    send = LagStats(n=2, mean=0.0, p50=0.0, p99=0.0, max=0.0)
    loop = LagStats(n=50, mean=1.0, p50=1.0, p99=loop_p99, max=loop_p99)
    return ClientLag(send_lag_ms=send, loop_delay_ms=loop, loop_tick_ms=20.0)


def _judged(
    loop_p99: float, records: list[RequestRecord], failed: int = 0, limit: float | None = None
) -> tuple[RunResult, list[str]]:
    opts = LoadgenOptions(url="http://127.0.0.1:9/v1", model="m", concurrency=2, num_prompts=2,
                          max_failed_fraction=limit)  # fmt: skip
    loadgen = LoadgenResult(
        requests=len(records), completed=len(records) - failed, failed=failed, duration_s=1.2,
        started_at=1e9, ended_at=1e9 + 1.2, output_tokens=8 * (len(records) - failed),
        concurrency=2, client_lag=_lag(loop_p99), token_count_method="usage",
    )  # fmt: skip
    times = RunTimes.from_epoch(started_at=1e9 - 1, ended_at=1e9 + 2)
    return summarize(opts, workload_of(opts), folder="x", run_id="T-x", loadgen=loadgen, records=records, times=times)  # fmt: skip


def _result(loop_p99: float, records: list[RequestRecord], failed: int = 0) -> RunResult:
    return _judged(loop_p99, records, failed)[0]


def test_a_client_that_kept_up_is_a_right_measurement() -> None:
    result, reasons = _judged(5.0, [_record(0), _record(1)])
    assert result.error is None and result.verdict == "ok"
    assert result.run.host == "127.0.0.1:9" and result.run.folder == "x"
    assert result.settings.engine == "unknown"  # no /metrics scrape to tell
    assert result.requests is not None and result.requests.completed == 2
    assert result.point is not None and result.point.label == "c=2"
    assert reasons == [] and result.warnings == []


def test_a_lagging_client_fails_the_measurement() -> None:
    records = [_record(0), _record(1)]
    result, (reason,) = _judged(45.0, records)
    assert reason.startswith("client saturated: event-loop delay p99 45.0 ms > 15 ms")
    assert result.error is not None
    assert (result.error.type, result.error.kind) == ("MeasurementFailed", "client_saturated")
    assert result.error.message == reason and result.verdict == "failed"


def test_failed_requests_fail_the_measurement_and_are_counted() -> None:
    bad = RequestRecord(index=2, warmup=False, start=2.0, start_wall=1e9 + 2, end=2.1, due=2.0,
                        status=500, error="HTTP 500: boom")  # fmt: skip
    records = [_record(0), _record(1), bad]
    result, reasons = _judged(5.0, records, failed=1)
    assert reasons == [
        "1 of 3 measured requests failed (33.3%, more than max_failed_fraction 0 allows): "
        "1 x HTTP 500: boom"
    ]
    assert result.error is not None and result.error.cause is None
    assert result.error.kind == "requests_failed"
    (warning,) = result.warnings
    assert warning.details["by_kind"] == {"http_status": 1}
    # with --max-failed-fraction 0.5 one of three is within it: kept, and said to be partial
    kept, none = _judged(5.0, records, failed=1, limit=0.5)
    assert none == [] and kept.error is None and kept.verdict == "ok"
    assert kept.requests is not None and kept.requests.completed == 2
    assert [w.kind for w in kept.warnings] == ["requests_failed"]
    assert "within max_failed_fraction 0.5" in kept.warnings[0].message


# ---------------------------------------------------------------- bad input, on the CLI


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "5", "--duration", "3"], "give --num-prompts or --duration, not both"),
        (["--prompts", "random:lots"], "--prompts: 'random:lots': random prompts need a length"),
        (["--prompts", "notes.txt"], "--prompts: Value error, expected 'builtin:<name>'"),
        (["--prompts", "missing.jsonl"], "prompt file"),
        (["--request-rate", "0"], "--request-rate: Input should be greater than 0"),
        (["--max-failed-fraction", "1"], "--max-failed-fraction: Input should be less than 1"),
        (["--max-failed-fraction", "-0.1"], "--max-failed-fraction: Input should be greater than"),
        (["--api-key-env", "ORCH_TEST_UNSET_KEY"], "ORCH_TEST_UNSET_KEY is not set"),
        (["--tokenizer", "/nonexistent/tok"], "cannot load the tokenizer '/nonexistent/tok'"),
    ],
)
def test_bad_input_is_one_message_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    os.environ.pop("ORCH_TEST_UNSET_KEY", None)
    out = tmp_path / "results"
    code = run_cli(["loadgen", "http://127.0.0.1:9", "-m", MODEL, "--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in " ".join(err.split()) and "Traceback" not in err
    assert not out.exists()


# ---------------------------------------------------------------- against the simulator


@pytest.fixture(scope="module")
def spec_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A speculative server: every step 1 ms and exactly 3 tokens per chunk."""
    env = {"ORCH_SIM_STEP_MS": "1", "ORCH_SIM_CHUNK_TOKENS": "3"}
    proc, url = start_sim(tmp_path_factory.mktemp("sim"), env, "--speculative-config", NGRAM)
    yield url
    stop_sim(proc)


def test_measures_any_server_and_writes_a_runs_files(
    spec_sim: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["loadgen", spec_sim + "/v1", "-m", MODEL, "-n", "12", "-c", "3", "--warmup", "1"]
    args += ["--max-tokens", "16", "--ignore-eos", "--prompts", "builtin:math", "--out", str(tmp_path)]  # fmt: skip
    code = run_cli([*args, "--json"])
    said = json.loads(capsys.readouterr().out)
    folder = Path(said["folder"])
    assert folder.parent.parent == tmp_path and folder.name == "loadgen"
    assert sorted(p.name for p in folder.iterdir()) == [
        "manifest.json", "metrics_after.txt", "metrics_before.txt", "requests.jsonl", "summary.json",
    ]  # fmt: skip
    records = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    assert [r["warmup"] for r in records].count(True) == 1 and len(records) == 13
    # every chunk but the first (the prefill's token) carries exactly 3 tokens: 1 + 3 x 5 = 16
    assert all([c[1] for c in r["chunks"]] == [1, 3, 3, 3, 3, 3] for r in records)
    result = RunResult.load(folder / "summary.json")
    assert result.to_json() == said["summary"]
    assert (result.run.folder, result.run.run_id) == ("loadgen", folder.parent.name)
    assert said["ok"] == (code == 0) == (result.error is None) == (said["failures"] == [])
    stats = result.requests
    assert stats is not None and (stats.completed, stats.failed) == (12, 0)
    assert stats.total_output_tokens == 12 * 16 and stats.token_count_method == "usage"
    assert stats.tokens_per_chunk == 3.0
    assert (result.settings.engine, result.settings.speculative.method) == ("vllm", "unknown")
    assert result.acceptance is not None and result.acceptance.prometheus == 3.0
    assert result.loadgen is not None and (result.loadgen.concurrency, result.loadgen.warmup) == (
        3,
        1,
    )
    assert (
        result.settings.workload is not None and result.settings.workload.prompts == "builtin:math"
    )
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["url"] == spec_sim and manifest["loadgen_spec"]["api_key"] is None
    assert manifest["loadgen_spec"]["prompts"]["items"] == "13 prompts"
    # the prompts' content is recorded, as a run's is
    sha = result.settings.workload.prompts_sha256
    assert sha is not None and len(sha) == 64 and manifest["prompts"]["sha256"] == sha
    assert result.loadgen.reconciled == 12 and result.loadgen.token_count_mismatches == 0
    # a second invocation never touches the first one's folder; its console says how many
    # requests were reconciled with the server's counts
    capsys.readouterr()
    assert run_cli([*args, "--name", "again"]) in (0, 1)
    said_again = " ".join(capsys.readouterr().out.split())
    assert "12 of 12 reconciled with the server's usage, 0 token count mismatches" in said_again
    assert "results:" in said_again
    assert len(list(tmp_path.iterdir())) == 2


def test_every_request_failing_fails_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc, url = start_sim(tmp_path / "sim", {"ORCH_SIM_FAIL_REQUESTS": "1"})
    try:
        code = run_cli(["loadgen", url, "-m", MODEL, "-n", "4", "--warmup", "0",
                        "--out", str(tmp_path / "results")])  # fmt: skip
    finally:
        stop_sim(proc)
    captured = capsys.readouterr()
    assert code == 1
    err = " ".join(captured.err.split())
    assert "measurement failed:" in err
    assert "every measured request failed (4 of 4): 4 x HTTP 500:" in err
    (summary,) = (tmp_path / "results").glob("*/loadgen/summary.json")
    result = RunResult.load(summary)
    assert result.error is not None and result.error.type == "MeasurementFailed"
    assert result.error.cause == "all_requests_failed" and result.verdict == "failed"


def test_two_loadgens_on_a_rewritten_prompt_file_are_not_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same file name, other content: `orch compare` says "not compared" (the content is
    part of the workload), never a percentage between the two."""
    proc, url = start_sim(tmp_path / "sim", {"ORCH_SIM_STEP_MS": "10", "ORCH_SIM_CHUNK_TOKENS": "1"})  # fmt: skip
    prompts = tmp_path / "prompts.jsonl"
    folders = []
    try:
        for n, text in enumerate(("Say hello.", "Write a long essay about the history of tea.")):
            prompts.write_text(json.dumps({"prompt": text}) + "\n")
            args = ["loadgen", url, "-m", MODEL, "-n", "3", "-c", "1", "--warmup", "0",
                    "--max-tokens", "8", "--ignore-eos", "--prompts", str(prompts),
                    "--out", str(tmp_path / f"out{n}"), "--json"]  # fmt: skip
            assert run_cli(args) in (0, 1)
            folders.append(Path(json.loads(capsys.readouterr().out)["folder"]).parent)
    finally:
        stop_sim(proc)
    a, b = (RunResult.load(f / "loadgen" / "summary.json") for f in folders)
    assert a.settings.workload is not None and b.settings.workload is not None
    assert a.settings.workload.prompts == b.settings.workload.prompts  # the same name ...
    assert a.settings.workload.prompts_sha256 != b.settings.workload.prompts_sha256  # ... not
    out = tmp_path / "compare"
    assert run_cli(["compare", str(folders[0]), str(folders[1]), "--out", str(out)]) in (0, 1)
    md = (out / "compare.md").read_text()
    assert "| loadgen | c=1 | B vs A | prompts_sha256 " in md  # the table of unlike workloads
    cells = [line for line in md.splitlines() if line.startswith("| loadgen | c=1 |")]
    assert cells and all("not compared: prompts_sha256 differ" in c for c in cells[1:])
    assert "%" not in "".join(cells[1:])  # never a percentage between the two
