"""Prometheus deltas from hand-written exposition texts in the engines' real metric names."""

from __future__ import annotations

import pytest

from orchestrator.engines import get_engine
from orchestrator.errors import OrchError
from orchestrator.metrics.prom import (
    Scrape,
    SpecDelta,
    counter_delta,
    delta,
    sglang_spec_delta,
    vllm_spec_delta,
)

# Two data-parallel engines, K = 3. Label order differs between the scrapes on purpose.
VLLM_BEFORE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="qwen3-8b"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="qwen3-8b"} 40.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="qwen3-8b"} 1.7645e+09
vllm:spec_decode_num_drafts_created{engine="1",model_name="qwen3-8b"} 1.7645e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="qwen3-8b"} 300.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="qwen3-8b"} 120.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="qwen3-8b"} 210.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="qwen3-8b"} 60.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen3-8b",position="0"} 90.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen3-8b",position="1"} 70.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen3-8b",position="2"} 50.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="qwen3-8b",position="0"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="qwen3-8b",position="1"} 20.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="qwen3-8b",position="2"} 10.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen3-8b"} 5000.0
vllm:generation_tokens_total{engine="1",model_name="qwen3-8b"} 2000.0
vllm:generation_tokens_created{engine="0",model_name="qwen3-8b"} 1.7645e+09
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen3-8b"} 0.5
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="qwen3-8b"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen3-8b"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen3-8b"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen3-8b"} 0.5
vllm:time_to_first_token_seconds_created{engine="0",model_name="qwen3-8b"} 1.7645e+09
"""

VLLM_AFTER = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{model_name="qwen3-8b",engine="0"} 300.0
vllm:spec_decode_num_drafts_total{model_name="qwen3-8b",engine="1"} 90.0
vllm:spec_decode_num_drafts_created{model_name="qwen3-8b",engine="0"} 1.7645e+09
vllm:spec_decode_num_drafts_created{model_name="qwen3-8b",engine="1"} 1.7645e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{model_name="qwen3-8b",engine="0"} 900.0
vllm:spec_decode_num_draft_tokens_total{model_name="qwen3-8b",engine="1"} 270.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{model_name="qwen3-8b",engine="0"} 710.0
vllm:spec_decode_num_accepted_tokens_total{model_name="qwen3-8b",engine="1"} 160.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="2",model_name="qwen3-8b",engine="0"} 200.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0",model_name="qwen3-8b",engine="0"} 270.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1",model_name="qwen3-8b",engine="0"} 240.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0",model_name="qwen3-8b",engine="1"} 75.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1",model_name="qwen3-8b",engine="1"} 55.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="2",model_name="qwen3-8b",engine="1"} 30.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="qwen3-8b",engine="0"} 6800.0
vllm:generation_tokens_total{model_name="qwen3-8b",engine="1"} 2600.0
vllm:generation_tokens_created{model_name="qwen3-8b",engine="0"} 1.7645e+09
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="qwen3-8b",engine="0"} 0.25
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="qwen3-8b"} 5.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen3-8b"} 7.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen3-8b"} 7.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen3-8b"} 0.875
vllm:time_to_first_token_seconds_created{engine="0",model_name="qwen3-8b"} 1.7645e+09
"""

VLLM_NO_SPEC = """\
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen3-8b"} 1234.0
"""


def key(name: str, **labels: str) -> tuple[str, frozenset]:
    return (name, frozenset(labels.items()))


def test_scrape_drops_created_series_and_ignores_label_order() -> None:
    before, after = Scrape.parse(VLLM_BEFORE), Scrape.parse(VLLM_AFTER)
    assert not any(name.endswith("_created") for name, _ in after.samples)
    assert len(after.samples) == 19  # 12 spec + 2 generation + 1 gauge + 4 histogram
    drafts = key("vllm:spec_decode_num_drafts_total", engine="0", model_name="qwen3-8b")
    assert before.samples[drafts] == 100.0
    assert after.samples[drafts] == 300.0
    assert after.value("vllm:spec_decode_num_drafts_total") == 390.0
    assert after.value("vllm:spec_decode_num_drafts_total", engine="1") == 90.0
    assert after.value("vllm:spec_decode_num_drafts_total", engine="7") is None
    assert "vllm:generation_tokens_total" in after
    assert "vllm:generation_tokens_created" not in after


def test_vllm_spec_delta_sums_engines_per_position() -> None:
    got = vllm_spec_delta(Scrape.parse(VLLM_BEFORE), Scrape.parse(VLLM_AFTER))
    assert got == SpecDelta(
        acceptance_length=1 + 600 / 250,
        per_position=[225 / 250, 205 / 250, 170 / 250],
        drafts=250.0,
        draft_tokens=750.0,
        accepted=600.0,
        generation_tokens=2400.0,
        source="counter",
        note=None,
    )
    assert got.acceptance_length == pytest.approx(3.4, abs=1e-12)
    assert got.per_position == pytest.approx([0.9, 0.82, 0.68], abs=1e-12)


def test_vllm_positions_sort_numerically() -> None:
    def text(values: dict[str, float], drafts: float) -> str:
        lines = [f'vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts}']
        lines.append(
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {sum(values.values())}'
        )
        for pos, v in values.items():
            lines.append(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{pos}"}} {v}'
            )
        return "\n".join(lines) + "\n"

    before = Scrape.parse(text({"10": 0.0, "2": 0.0, "0": 0.0, "1": 0.0}, 0.0))
    after = Scrape.parse(text({"10": 1.0, "2": 3.0, "0": 10.0, "1": 6.0}, 10.0))
    got = vllm_spec_delta(before, after)
    assert got.per_position == [1.0, 0.6, 0.3, 0.1]  # positions 0, 1, 2, 10
    assert got.acceptance_length == 1 + 20 / 10


def test_vllm_without_speculation_says_so() -> None:
    got = vllm_spec_delta(
        Scrape.parse(VLLM_NO_SPEC), Scrape.parse(VLLM_NO_SPEC.replace("1234.0", "1300.0"))
    )
    assert got == SpecDelta(
        None,
        [],
        None,
        None,
        None,
        66.0,
        "none",
        "no vllm:spec_decode_* counters: speculative decoding is off",
    )


def test_vllm_without_drafts_in_the_window_says_so() -> None:
    scrape = Scrape.parse(VLLM_AFTER)
    got = vllm_spec_delta(scrape, scrape)
    assert got.acceptance_length is None
    assert got.source == "none"
    assert got.drafts == 0.0
    assert got.note == "vllm:spec_decode_num_drafts_total did not move: nothing was drafted"


def test_counter_reset_counts_from_zero_and_new_series_from_zero() -> None:
    before = Scrape.parse(VLLM_BEFORE)
    restarted = Scrape.parse(
        VLLM_AFTER.replace(
            'vllm:generation_tokens_total{model_name="qwen3-8b",engine="1"} 2600.0',
            'vllm:generation_tokens_total{model_name="qwen3-8b",engine="1"} 150.0\n'
            'vllm:generation_tokens_total{model_name="qwen3-8b",engine="2"} 70.0',
        )
    )
    # engine 0: 6800 - 5000; engine 1 restarted: 150; engine 2 is new: 70
    assert (
        get_engine("vllm").spec_delta(before, restarted).generation_tokens == 1800.0 + 150.0 + 70.0
    )
    assert counter_delta(before, restarted, "vllm:generation_tokens_total", engine="1") == 150.0
    assert counter_delta(before, restarted, "vllm:nonexistent_total") is None


def test_generic_delta_keeps_gauge_decreases() -> None:
    got = delta(Scrape.parse(VLLM_BEFORE), Scrape.parse(VLLM_AFTER))
    assert got[key("vllm:kv_cache_usage_perc", engine="0", model_name="qwen3-8b")] == -0.25
    assert (
        got[key("vllm:time_to_first_token_seconds_count", engine="0", model_name="qwen3-8b")] == 3.0
    )
    assert (
        got[key("vllm:time_to_first_token_seconds_sum", engine="0", model_name="qwen3-8b")] == 0.375
    )
    assert got[key("vllm:generation_tokens_total", engine="1", model_name="qwen3-8b")] == 600.0
    assert len(got) == 19


SGLANG_BEFORE = """\
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="qwen3.6-27b"} 1000.0
sglang:generation_tokens_created{model_name="qwen3.6-27b"} 1.7854e+09
# HELP sglang:spec_verify_calls_total The number of verification forward passes.
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{engine_type="unified",model_name="qwen3.6-27b",pp_rank="0",tp_rank="0"} 400.0
sglang:spec_verify_calls_total{engine_type="unified",model_name="qwen3.6-27b",pp_rank="0",tp_rank="1"} 400.0
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="qwen3.6-27b",pp_rank="0",tp_rank="0"} 2.5
sglang:spec_accept_length{engine_type="unified",model_name="qwen3.6-27b",pp_rank="0",tp_rank="1"} 9.0
"""

SGLANG_AFTER = """\
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="qwen3.6-27b"} 3900.0
sglang:generation_tokens_created{model_name="qwen3.6-27b"} 1.7854e+09
# HELP sglang:spec_verify_calls_total The number of verification forward passes.
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{tp_rank="0",pp_rank="0",model_name="qwen3.6-27b",engine_type="unified"} 1400.0
sglang:spec_verify_calls_total{tp_rank="1",pp_rank="0",model_name="qwen3.6-27b",engine_type="unified"} 1400.0
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{tp_rank="0",pp_rank="0",model_name="qwen3.6-27b",engine_type="unified"} 2.83
sglang:spec_accept_length{tp_rank="1",pp_rank="0",model_name="qwen3.6-27b",engine_type="unified"} 9.0
"""


def _without_verify(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "spec_verify_calls" not in line) + "\n"


def test_sglang_counter_delta_on_rank_zero() -> None:
    got = sglang_spec_delta(Scrape.parse(SGLANG_BEFORE), Scrape.parse(SGLANG_AFTER))
    assert got == SpecDelta(
        acceptance_length=2900 / 1000,
        per_position=[],
        drafts=1000.0,
        draft_tokens=None,
        accepted=1900.0,
        generation_tokens=2900.0,
        source="counter",
        note=None,
    )


def test_sglang_falls_back_to_the_gauge_when_the_counter_is_absent() -> None:
    got = sglang_spec_delta(
        Scrape.parse(_without_verify(SGLANG_BEFORE)), Scrape.parse(_without_verify(SGLANG_AFTER))
    )
    assert got == SpecDelta(
        acceptance_length=2.83,
        per_position=[],
        drafts=None,
        draft_tokens=None,
        accepted=None,
        generation_tokens=2900.0,
        source="gauge",
        note="sglang:spec_verify_calls_total is absent; using the sglang:spec_accept_length gauge "
        "(last decode-log interval only, not the whole window)",
    )


def test_sglang_falls_back_to_the_gauge_when_the_counter_did_not_move() -> None:
    after = Scrape.parse(SGLANG_AFTER.replace("1400.0", "400.0"))
    got = sglang_spec_delta(Scrape.parse(SGLANG_BEFORE), after)
    assert (got.acceptance_length, got.source, got.drafts) == (2.83, "gauge", 0.0)
    assert got.note.startswith("sglang:spec_verify_calls_total did not move during the window;")


def test_sglang_gauge_is_averaged_over_rank_zero_label_sets() -> None:
    text = (
        'sglang:spec_accept_length{dp_rank="0",tp_rank="0"} 2.5\n'
        'sglang:spec_accept_length{dp_rank="1",tp_rank="0"} 3.0\n'
        'sglang:spec_accept_length{dp_rank="1",tp_rank="1"} 7.0\n'
    )
    got = sglang_spec_delta(Scrape.parse(""), Scrape.parse(text))
    assert (got.acceptance_length, got.source, got.generation_tokens) == (2.75, "gauge", None)


def test_sglang_without_speculation_says_so() -> None:
    text = 'sglang:generation_tokens_total{model_name="m"} 10.0\nsglang:spec_accept_length{tp_rank="0"} 0.0\n'
    got = sglang_spec_delta(Scrape.parse(""), Scrape.parse(text))
    assert got == SpecDelta(
        None,
        [],
        None,
        None,
        None,
        10.0,
        "none",
        "sglang:spec_verify_calls_total is absent and no sglang:spec_accept_length gauge: no speculation seen",
    )


def test_registry_and_generation_tokens_for_both_engines() -> None:
    vllm = (Scrape.parse(VLLM_BEFORE), Scrape.parse(VLLM_AFTER))
    sglang = (Scrape.parse(SGLANG_BEFORE), Scrape.parse(SGLANG_AFTER))
    assert get_engine("vllm").spec_delta(*vllm) == vllm_spec_delta(*vllm)
    assert get_engine("sglang").spec_delta(*sglang) == sglang_spec_delta(*sglang)
    assert get_engine("vllm").spec_delta(*vllm) != sglang_spec_delta(*vllm)
    assert (
        get_engine("sglang")
        .spec_delta(Scrape.parse(SGLANG_BEFORE), Scrape.parse(SGLANG_AFTER))
        .generation_tokens
        == 2900.0
    )
    assert (
        get_engine("vllm")
        .spec_delta(Scrape.parse(VLLM_BEFORE), Scrape.parse(VLLM_AFTER))
        .generation_tokens
        == 2400.0
    )


def test_unparseable_text_is_a_clear_error() -> None:
    with pytest.raises(OrchError) as info:
        Scrape.parse("<html>404 Not Found</html>\n", source="http://127.0.0.1:30000/metrics")
    assert info.value.message.startswith(
        "http://127.0.0.1:30000/metrics: not Prometheus text exposition"
    )
    assert "--enable-metrics" in info.value.hint
