"""The fixed timing model (``ORCH_SIM_STEP_MS``, ``ORCH_SIM_CHUNK_TOKENS``): a known step and a
known number of tokens per chunk, for measuring clients against the ground truth."""

from __future__ import annotations

import pytest
from sim_helpers import call, free_port

from orchestrator.sim.cli import parse_vllm
from orchestrator.sim.failures import StartupFailure
from orchestrator.sim.fixed import FixedTiming, FixedTimingError, apply_fixed, read_fixed
from orchestrator.sim.sandbox import Sandbox
from orchestrator.sim.startup import plan_launch
from orchestrator.sim.timing import SpecProfile, TimingProfile, decode_step_s, prefill_s

PLAIN = TimingProfile(
    "p", step_s=0.04, batch_slope=0.05, prefill_base_s=0.03, prefill_per_token_s=1e-4
)
NGRAM3 = SpecProfile("ngram", 3, (0.42, 0.24, 0.14))  # fmt: skip


@pytest.mark.parametrize(
    ("env", "fixed"),
    [
        ({}, FixedTiming()),
        ({"ORCH_SIM_STEP_MS": "12.5"}, FixedTiming(12.5, None)),
        ({"ORCH_SIM_CHUNK_TOKENS": "4", "ORCH_SIM_STEP_MS": " "}, FixedTiming(None, 4)),
    ],
)
def test_read_fixed(env: dict[str, str], fixed: FixedTiming) -> None:
    assert read_fixed(env) == fixed
    assert fixed.active == bool(fixed.step_ms or fixed.chunk_tokens)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ORCH_SIM_STEP_MS": "0"}, "ORCH_SIM_STEP_MS='0': expected milliseconds > 0"),
        ({"ORCH_SIM_STEP_MS": "fast"}, "ORCH_SIM_STEP_MS='fast': expected milliseconds > 0"),
        ({"ORCH_SIM_STEP_MS": "inf"}, "ORCH_SIM_STEP_MS='inf': expected milliseconds > 0"),
        ({"ORCH_SIM_CHUNK_TOKENS": "0"}, "ORCH_SIM_CHUNK_TOKENS='0': expected a whole number >= 1"),
        ({"ORCH_SIM_CHUNK_TOKENS": "2.5"}, "ORCH_SIM_CHUNK_TOKENS='2.5': expected a whole number"),
    ],
)
def test_bad_knobs_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(FixedTimingError, match=message.replace("(", r"\(").replace(".", r"\.")):
        read_fixed(env)


def test_a_fixed_step_is_wall_time_whatever_the_batch_and_prefill_costs_none() -> None:
    fixed = apply_fixed(PLAIN, FixedTiming(step_ms=10.0), speed=20.0)
    # the engine sleeps cost / speed: 0.2 model seconds at speed 20 is 10 wall ms
    assert [decode_step_s(fixed, b) / 20.0 for b in (1, 64, 1024)] == pytest.approx([0.01] * 3)
    assert [prefill_s(fixed, n) for n in (1, 4000)] == [0.0, 0.0]
    assert fixed.spec is None and fixed.name == "p, fixed step 10 ms"


def test_fixed_tokens_per_chunk_accepts_exactly_n_minus_one_drafts() -> None:
    spec_profile = TimingProfile("s", 0.04, 0.05, 0.03, 1e-4, spec=NGRAM3)
    fixed = apply_fixed(spec_profile, FixedTiming(chunk_tokens=3), speed=1.0)
    assert fixed.spec == SpecProfile("ngram", 3, (1.0, 1.0, 0.0))
    assert fixed.spec.conditional() == (1.0, 1.0, 0.0)
    assert fixed.spec.expected_acceptance_length() == 3.0
    assert fixed.step_s == 0.04 and fixed.name == "s, 3 tokens per chunk"
    assert apply_fixed(PLAIN, FixedTiming(chunk_tokens=1), 1.0).spec is None
    with pytest.raises(FixedTimingError, match="drafts 3 \\(num_speculative_tokens\\)"):
        apply_fixed(spec_profile, FixedTiming(chunk_tokens=5), 1.0)
    with pytest.raises(FixedTimingError, match="needs a speculative launch"):
        apply_fixed(PLAIN, FixedTiming(chunk_tokens=2), 1.0)


def test_plan_launch_applies_it_and_refuses_what_it_cannot(sim_box: Sandbox) -> None:
    cfg = parse_vllm(["serve", "Qwen/Qwen3-8B", "-sc", '{"method": "ngram", "num_speculative_tokens": 3}'])  # fmt: skip
    env = {**sim_box.env(), "ORCH_SIM_SPEED": "4", "ORCH_SIM_STEP_MS": "5", "ORCH_SIM_CHUNK_TOKENS": "4"}  # fmt: skip
    plan = plan_launch(cfg, env, sim_box.state_dir)
    assert plan.profile.step_s == pytest.approx(0.02) and plan.profile.batch_slope == 0.0
    assert plan.profile.spec is not None
    assert plan.profile.spec.position_rates == (1.0, 1.0, 1.0)
    plain = parse_vllm(["serve", "Qwen/Qwen3-8B"])
    with pytest.raises(StartupFailure) as failed:
        plan_launch(plain, {**sim_box.env(), "ORCH_SIM_CHUNK_TOKENS": "2"}, sim_box.state_dir)
    assert "ORCH_SIM_CHUNK_TOKENS=2 needs a speculative launch" in "\n".join(failed.value.traceback)


def test_the_server_streams_exactly_n_tokens_per_chunk(start_sim) -> None:
    port = free_port()
    spec = '{"method": "ngram", "num_speculative_tokens": 3}'
    sim = start_sim(
        ["vllm", "serve", "Qwen/Qwen3-8B", "--port", str(port), "-sc", spec],
        {"ORCH_SIM_STEP_MS": "2", "ORCH_SIM_CHUNK_TOKENS": "3"},
    )
    sim.wait_ready()
    body = {"model": "Qwen/Qwen3-8B", "prompt": "one two three", "max_tokens": 11, "ignore_eos": True}  # fmt: skip
    assert call("POST", sim.url + "/v1/completions", body)[0] == 200
    truth = sim.json("/sim/ground_truth")
    (request,) = truth["requests"]
    # the prefill's token, then 3 per step, the last step cut short by max_tokens
    assert request["chunk_tokens"] == [1, 3, 3, 3, 1]
    assert request["decode_steps"] == 4 and request["num_accepted_tokens"] == 6
    assert truth["profile"]["step_wall_s"] == pytest.approx(0.002)
    assert truth["profile"]["expected_acceptance_length"] == 3.0
    assert truth["totals"]["acceptance_length"] == pytest.approx(1 + 6 / 4)
    sim.stop()
