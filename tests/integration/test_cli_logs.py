"""`orch logs parse`: the JSON interface, the table, and the errors, on the sample logs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.logs import app
from orchestrator.errors import OrchError

LOGS = Path(__file__).parents[1] / "unit" / "data" / "logs"
REPO = Path(__file__).parents[2]
runner = CliRunner()

# The documented interface: every event carries these keys (null where the line lacks them).
KEYS = {
    "spec_decode": [
        "mean_acceptance_length", "accepted_throughput", "drafted_throughput", "accepted_tokens",
        "drafted_tokens", "per_position_acceptance", "draft_acceptance_rate", "engine_index",
        "time", "pid", "process",
    ],
    "engine_stats": [
        "prompt_throughput", "generation_throughput", "running_reqs", "waiting_reqs",
        "kv_cache_usage", "prefix_cache_hit_rate", "deferred_reqs", "preemptions",
        "external_prefix_cache_hit_rate", "mm_cache_hit_rate", "engine_index",
        "engines_aggregated", "time", "pid", "process",
    ],
    "decode_batch": [
        "running_reqs", "num_tokens", "token_usage", "accept_length", "accept_rate",
        "gen_throughput", "queue_reqs", "cuda_graph", "graph_backend", "mamba_num", "mamba_usage",
        "swa_num_tokens", "swa_token_usage", "cap_length", "block_accept_length", "cached_tokens",
        "iteration", "time", "dp_rank", "pp_rank", "tp_rank", "ep_rank",
    ],
    "prefill_batch": [
        "new_seq", "new_tokens", "cached_tokens", "running_reqs", "queue_reqs",
        "input_throughput", "token_usage", "cuda_graph", "graph_backend", "mamba_usage",
        "swa_token_usage", "iteration", "time", "dp_rank", "pp_rank", "tp_rank", "ep_rank",
    ],
}  # fmt: skip


def ev(kind: str, line_no: int, **fields: object) -> dict:
    unknown = set(fields) - set(KEYS[kind])
    assert not unknown, unknown
    return {"kind": kind, "line_no": line_no} | {k: fields.get(k) for k in KEYS[kind]}


def vllm_stats(line_no: int, time: str, **fields: object) -> dict:
    return ev(
        "engine_stats", line_no, engine_index=0, time=time, pid=4021, process="APIServer", **fields
    )


def vllm_spec(line_no: int, time: str, **fields: object) -> dict:
    return ev("spec_decode", line_no, time=time, pid=4021, process="APIServer", **fields)


VLLM_EXPECTED = {
    "engine": "vllm",
    "events": [
        vllm_stats(
            7,
            "12-02 10:57:11",
            prompt_throughput=2799.5,
            generation_throughput=7.5,
            running_reqs=1,
            waiting_reqs=0,
            kv_cache_usage=11.9,
            prefix_cache_hit_rate=0.0,
        ),
        vllm_spec(
            8,
            "12-02 10:57:11",
            mean_acceptance_length=4.37,
            accepted_throughput=1.96,
            drafted_throughput=4.08,
            accepted_tokens=172,
            drafted_tokens=357,
            per_position_acceptance=[0.863, 0.706, 0.588, 0.471, 0.314, 0.255, 0.176],
            draft_acceptance_rate=48.2,
        ),
        vllm_stats(
            9,
            "12-02 10:57:21",
            prompt_throughput=0.0,
            generation_throughput=96.4,
            running_reqs=1,
            waiting_reqs=0,
            kv_cache_usage=12.3,
            prefix_cache_hit_rate=0.0,
        ),
        vllm_spec(
            10,
            "12-02 10:57:21",
            mean_acceptance_length=5.5,
            accepted_throughput=90.0,
            drafted_throughput=140.0,
            accepted_tokens=900,
            drafted_tokens=1400,
            per_position_acceptance=[0.95, 0.85, 0.75, 0.65, 0.55, 0.45, 0.3],
            draft_acceptance_rate=64.3,
        ),
        vllm_stats(
            13,
            "12-02 10:57:41",
            prompt_throughput=0.0,
            generation_throughput=0.0,
            running_reqs=0,
            waiting_reqs=0,
            kv_cache_usage=0.0,
            prefix_cache_hit_rate=0.0,
        ),
        vllm_spec(
            14,
            "12-02 10:57:41",
            accepted_throughput=0.0,
            drafted_throughput=0.0,
            accepted_tokens=0,
            drafted_tokens=0,
            per_position_acceptance=[None] * 7,
        ),
    ],
    "summary": {
        "events": {"engine_stats": 3, "spec_decode": 3},
        # drafts: 357/7 = 51 and 1400/7 = 200 (the idle line drafted nothing)
        "acceptance_length": 1 + (172 + 900) / (51 + 200),
        "per_position_acceptance": [
            (r1 * 51 + r2 * 200) / 251
            for r1, r2 in zip(
                [0.863, 0.706, 0.588, 0.471, 0.314, 0.255, 0.176],
                [0.950, 0.850, 0.750, 0.650, 0.550, 0.450, 0.300],
                strict=True,
            )
        ],
        "mean_generation_throughput": (7.5 + 96.4 + 0.0) / 3,
        "accepted_tokens": 1072,
        "drafts": 251.0,
        "malformed": 1,
        "malformed_lines": [
            {
                "kind": "malformed",
                "line_no": 11,
                "reason": "unexpected part 'Avg generation thro'",
                "line": "(APIServer pid=4021) INFO 12-02 10:57:31 [metrics.py:120] Engine 000: "
                "Avg prompt throughput: 0.0 tokens/s, Avg generation thro",
            }
        ],
    },
}


def sg_decode(line_no: int, time: str, **fields: object) -> dict:
    return ev(
        "decode_batch", line_no, time=time, tp_rank=0, cuda_graph=True, graph_backend="cuda",
        queue_reqs=0, **fields,
    )  # fmt: skip


SGLANG_EXPECTED = {
    "engine": "sglang",
    "events": [
        ev(
            "prefill_batch",
            5,
            new_seq=1,
            new_tokens=158,
            cached_tokens=0,
            token_usage=0.08,
            running_reqs=31,
            queue_reqs=0,
            cuda_graph=True,
            graph_backend="cuda",
            input_throughput=559.53,
            time="2026-07-30 13:35:05",
            tp_rank=0,
        ),
        sg_decode(
            6,
            "2026-07-30 13:35:13",
            running_reqs=1,
            num_tokens=257,
            token_usage=0.0,
            mamba_num=3,
            mamba_usage=0.03,
            accept_length=2.83,
            accept_rate=0.61,
            gen_throughput=93.65,
        ),
        sg_decode(
            7,
            "2026-07-30 13:35:14",
            running_reqs=1,
            num_tokens=384,
            token_usage=0.01,
            mamba_num=3,
            mamba_usage=0.03,
            accept_length=3.17,
            accept_rate=0.72,
            gen_throughput=101.35,
        ),
        ev(
            "prefill_batch",
            10,
            new_seq=2,
            new_tokens=410,
            cached_tokens=128,
            token_usage=0.02,
            mamba_usage=0.06,
            running_reqs=1,
            queue_reqs=0,
            time="2026-07-30 13:35:17",
            tp_rank=0,
        ),
        sg_decode(
            11,
            "2026-07-30 13:35:18",
            running_reqs=3,
            num_tokens=812,
            token_usage=0.03,
            mamba_num=9,
            mamba_usage=0.09,
            accept_length=2.95,
            accept_rate=0.65,
            gen_throughput=88.12,
        ),
    ],
    "summary": {
        "events": {"decode_batch": 3, "prefill_batch": 2},
        "acceptance_length": (2.83 + 3.17 + 2.95) / 3,
        "per_position_acceptance": None,
        "mean_generation_throughput": (93.65 + 101.35 + 88.12) / 3,
        "accepted_tokens": None,
        "drafts": None,
        "malformed": 1,
        "malformed_lines": [
            {
                "kind": "malformed",
                "line_no": 8,
                "reason": "missing 'gen throughput (token/s)'",
                "line": "[2026-07-30 13:35:15 TP0] Decode batch, #running-req: 1, #full token: 301, "
                "full token usage: 0.00, mamba num: 3, mamba usage: 0.03, accept len: 3.",
            }
        ],
    },
}


@pytest.mark.parametrize(
    ("log", "args", "expected"),
    [
        ("vllm_dflash.log", [], VLLM_EXPECTED),
        ("vllm_dflash.log", ["--engine", "vllm"], VLLM_EXPECTED),
        ("sglang_mtp.log", [], SGLANG_EXPECTED),
        ("sglang_mtp.log", ["--engine", "sglang"], SGLANG_EXPECTED),
    ],
)
def test_json_output_is_exact(log: str, args: list[str], expected: dict) -> None:
    result = runner.invoke(app, ["parse", str(LOGS / log), "--json", *args])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expected
    assert list(json.loads(result.stdout)) == ["engine", "events", "summary"]


@pytest.mark.parametrize(
    ("log", "engine", "message", "hint"),
    [
        (
            "sglang_mtp.log",
            "vllm",
            "no vllm metrics line in this log, but the sglang parser finds 5 event(s) "
            "(decode_batch 3, prefill_batch 2): it looks like a sglang log",
            "use --engine sglang, or --engine auto to detect the engine",
        ),
        (
            "vllm_dflash.log",
            "sglang",
            "no sglang metrics line in this log, but the vllm parser finds 6 event(s) "
            "(engine_stats 3, spec_decode 3): it looks like a vllm log",
            "use --engine vllm, or --engine auto to detect the engine",
        ),
    ],
)
@pytest.mark.parametrize("as_json", [["--json"], []])
def test_forcing_the_other_engine_is_an_error_not_zero_events(
    log: str, engine: str, message: str, hint: str, as_json: list[str]
) -> None:
    result = runner.invoke(app, ["parse", str(LOGS / log), "--engine", engine, *as_json])
    assert result.exit_code != 0
    assert isinstance(result.exception, OrchError)
    assert result.exception.message == f"{LOGS / log}: {message}"
    assert result.exception.hint == hint
    assert result.stdout == ""  # no misleading "0 events" output before the error


def test_forced_engine_on_a_log_without_metrics_still_gives_zero_events(tmp_path: Path) -> None:
    """No other parser finds anything either (an idle or just-started server): 0 events, exit 0."""
    log = tmp_path / "startup.log"
    log.write_text(
        "(APIServer pid=4021) INFO 12-02 10:57:01 [api_server.py:1811] "
        "Starting vLLM server on http://127.0.0.1:8000\n"
    )
    for engine, kinds in (
        ("vllm", {"engine_stats": 0, "spec_decode": 0}),
        ("sglang", {"decode_batch": 0, "prefill_batch": 0}),
    ):
        result = runner.invoke(app, ["parse", str(log), "--engine", engine, "--json"])
        assert result.exit_code == 0, result.output
        got = json.loads(result.stdout)
        assert (got["engine"], got["events"], got["summary"]["events"]) == (engine, [], kinds)


def test_module_entry_point_names_the_right_engine_without_a_traceback() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.logs",
            "parse",
            str(LOGS / "sglang_mtp.log"),
            "--engine",
            "vllm",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    said = " ".join(proc.stderr.split())  # rich wraps long lines
    assert "no vllm metrics line in this log, but the sglang parser finds 5 event(s)" in said
    assert "hint: use --engine sglang, or --engine auto to detect the engine" in said
    assert "Traceback" not in proc.stderr


def test_table_shows_the_last_events_and_the_summary() -> None:
    result = runner.invoke(
        app, ["parse", str(LOGS / "vllm_dflash.log"), "--limit", "2"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "vllm log: last 2 of 6 events" in result.stdout
    assert "gen 0.0 tok/s" in result.stdout  # line 13, shown
    assert "gen 96.4 tok/s" not in result.stdout  # line 9, cut by --limit
    assert "acceptance length: 5.271" in result.stdout
    assert (
        "per-position acceptance: 0.932, 0.821, 0.717, 0.614, 0.502, 0.410, 0.275" in result.stdout
    )
    assert "line 11: unexpected part 'Avg generation thro'" in result.stdout


def test_missing_file_is_an_orch_error_with_a_hint(tmp_path: Path) -> None:
    result = runner.invoke(app, ["parse", str(tmp_path / "nope.log")])
    assert result.exit_code != 0
    assert isinstance(result.exception, OrchError)
    assert result.exception.message == f"{tmp_path / 'nope.log'}: no such file"
    assert result.exception.hint


def test_undetectable_engine_is_an_orch_error_with_a_hint(tmp_path: Path) -> None:
    log = tmp_path / "other.log"
    log.write_text("hello\nworld\n")
    result = runner.invoke(app, ["parse", str(log), "--json"])
    assert result.exit_code != 0
    assert isinstance(result.exception, OrchError)
    assert result.exception.message.startswith(f"{log}: could not tell which engine wrote this log")
    assert result.exception.hint == "pass --engine vllm or --engine sglang"


def test_bad_engine_choice_is_a_usage_error() -> None:
    result = runner.invoke(app, ["parse", str(LOGS / "vllm_dflash.log"), "--engine", "trtllm"])
    assert result.exit_code == 2


def test_module_entry_point_prints_the_error_without_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.logs", "parse", str(tmp_path / "nope.log")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "no such file" in proc.stderr
    assert "hint:" in proc.stderr
    assert "Traceback" not in proc.stderr
