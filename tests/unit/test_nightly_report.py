"""nightly.md and nightly.json of a night with one of each verdict, exactly."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from orchestrator.config.nightly_terms import Direction, Verdict
from orchestrator.nightly.cases import Change, NightAttributes
from orchestrator.nightly.report import NightlyVerdict, render_markdown
from orchestrator.nightly.verdict import CaseVerdict, MetricVerdict
from tests.fixtures.nightly_histories import CASE

SPEC = CASE
PLAIN = replace(CASE, method="none", draft_model=None, num_draft_tokens=None)
ATTRS = NightAttributes(engine_version="0.9.1", hosts=("gpu-1",))


def figure(metric: str, verdict: Verdict, *, reason: str = "", **kw: Any) -> MetricVerdict:
    unit = {"output_tok_s": "tok/s", "ttft_ms_p99": "ms", "acceptance_length": "tokens"}
    direction: Direction = "lower" if metric.startswith("ttft") else "higher"
    return MetricVerdict(metric, direction, unit.get(metric, ""), verdict, reason, **kw)


REGRESSION = figure(
    "output_tok_s",
    "regression",
    value=900.0,
    n=3,
    baseline=1000.0,
    change=-0.1,
    threshold=0.05,
    p_value=0.00031,
    since="N20",
    violating_nights=("N20", "N21"),
    last_good="N19",
    changes=(Change("engine_version", "0.9.0", "0.9.1"),),
    change_point="N20",
    change_point_note="Apache Otava, over the last 22 nights",
)
IMPROVED = figure(
    "ttft_ms_p99",
    "improvement",
    value=700.0,
    n=3,
    baseline=800.0,
    change=-0.125,
    threshold=0.1,
    p_value=0.002,
)
COLLAPSE = figure(
    "acceptance_length", "failure", value=1.1, n=3, reason="acceptance collapse: drafts rejected"
)
DOWN = figure("output_tok_s", "could_not_measure", reason="every measurement failed: host down")
NIGHT = NightlyVerdict(
    playbook="nightly",
    night="N21",
    night_time=datetime(2026, 11, 22, 3, 0, tzinfo=timezone.utc),
    cases=(
        CaseVerdict(
            SPEC, "measured", True, "drafts rejected", ATTRS, (REGRESSION, IMPROVED, COLLAPSE)
        ),
        CaseVerdict(PLAIN, "failed", False, "host down", ATTRS, (DOWN,)),
    ),
)
SPEC_LABEL = (
    "vllm dflash (z-lab/Qwen3-8B-DFlash, k=15) · Qwen/Qwen3-8B · TP1 · 1 × NVIDIA RTX A6000 · "
    "builtin:mixed out=256 ignore_eos · c=8"
)
PLAIN_LABEL = (
    "vllm · Qwen/Qwen3-8B · TP1 · 1 × NVIDIA RTX A6000 · builtin:mixed out=256 ignore_eos · c=8"
)


def test_nightly_md_puts_the_verdict_first_and_each_finding_with_its_figures() -> None:
    s, p = SPEC.id, PLAIN.id
    assert render_markdown(NIGHT) == "\n".join(
        [
            "# Nightly: FAILURE (exit 1)",
            "",
            "Playbook **nightly**, night `N21` (2026-11-22 03:00 UTC): 1 failure, 1 regression, "
            "1 could not measure, 1 improvement (2 cases).",
            "",
            "## Failures (acceptance collapse)",
            "",
            f"- case `{s}` {SPEC_LABEL}: acceptance collapse: drafts rejected (acceptance_length)",
            "",
            "## Regressions",
            "",
            "- **output_tok_s** 1000 tok/s → 900.0 tok/s (-10.0%; threshold 5%; p=0.00031; 3 repeats)",
            f"  - case `{s}` {SPEC_LABEL}",
            "  - since `N20` (2 nights), last good `N19`",
            "  - changed: engine_version 0.9.0 → 0.9.1",
            "  - change point: `N20` (Apache Otava, over the last 22 nights)",
            "",
            "## Could not measure",
            "",
            f"- case `{p}` {PLAIN_LABEL}: every measurement failed: host down (output_tok_s)",
            "",
            "## Improvements",
            "",
            "- **ttft_ms_p99** 800.0 ms → 700.0 ms (-12.5%; threshold 10%; p=0.002; 3 repeats)",
            f"  - case `{s}` {SPEC_LABEL}",
            "",
            "## Cases",
            "",
            f"- `{s}` {SPEC_LABEL}: **failure**",
            f"- `{p}` {PLAIN_LABEL}: **could_not_measure**",
            "",
            "<details><summary>Every figure</summary>",
            "",
            "| case | metric | verdict | value | baseline | change | threshold | p | n |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|",
            f"| `{s}` | output_tok_s | regression | 900.0 tok/s | 1000 tok/s | -10.0% | 5% | 0.00031 | 3 |",
            f"| `{s}` | ttft_ms_p99 | improvement | 700.0 ms | 800.0 ms | -12.5% | 10% | 0.002 | 3 |",
            f"| `{s}` | acceptance_length | failure | 1.1 tokens | - | - | - | - | 3 |",
            f"| `{p}` | output_tok_s | could_not_measure | - | - | - | - | - | 0 |",
            "",
            "</details>",
            "",
        ]
    )


def test_nightly_json_is_strict_json_with_the_verdict_and_every_case() -> None:
    text = json.dumps(NIGHT.to_json(), allow_nan=False)
    obj = json.loads(text)
    assert (obj["schema_version"], obj["verdict"], obj["exit_code"]) == (1, "failure", 1)
    assert obj["counts"] == {
        "failure": 1,
        "regression": 1,
        "could_not_measure": 1,
        "improvement": 1,
    }
    assert [c["verdict"] for c in obj["cases"]] == ["failure", "could_not_measure"]
    first = obj["cases"][0]
    assert (first["case_id"], first["label"], first["case"]["engine"]) == (
        SPEC.id,
        SPEC_LABEL,
        "vllm",
    )
    assert first["metrics"][0]["changes"] == [
        {"name": "engine_version", "before": "0.9.0", "after": "0.9.1"}
    ]
    assert first["attributes"]["hosts"] == ["gpu-1"]


def test_a_throttled_nights_case_says_so_in_both_files() -> None:
    hot = replace(ATTRS, sm_clock_mhz=1410.0, throttled_pct=31.0, throttle_reasons="hw_thermal")
    night = replace(NIGHT, cases=(replace(NIGHT.cases[0], attributes=hot), NIGHT.cases[1]))
    mode = "GPUs throttled 31% of the window (hw_thermal), SM clock 1410 MHz"
    assert f"c=8: **failure**; {mode}\n" in render_markdown(night)
    assert [c["gpu_mode"] for c in night.to_json()["cases"]] == [mode, None]  # type: ignore[index]
    assert "GPUs throttled" not in render_markdown(NIGHT)
