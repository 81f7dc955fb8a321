"""The timing and acceptance model: exact values for fixed inputs, convergence to the profiles."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from orchestrator.sim.models import load_draft, load_target
from orchestrator.sim.profiles import build_profile, drafter_fit, reference_layer_ids
from orchestrator.sim.sandbox import MODELS_DIR
from orchestrator.sim.timing import (
    SpecProfile,
    TimingProfile,
    decode_step_s,
    natural_length,
    prefill_s,
    request_rng,
    sample_accepted,
)

MTP3 = SpecProfile("mtp", 3, (0.84, 0.63, 0.43))


def test_conditional_probabilities_and_expected_length() -> None:
    assert MTP3.conditional() == pytest.approx((0.84, 0.75, 0.43 / 0.63))
    assert MTP3.expected_acceptance_length() == pytest.approx(2.9)
    flat = SpecProfile("dflash", 4, (0.5, 0.0, 0.0, 0.0))
    assert flat.conditional() == (0.5, 0.0, 0.0, 0.0)
    assert flat.expected_acceptance_length() == 1.5


def test_step_latency_grows_with_the_batch_and_prefill_with_the_prompt() -> None:
    profile = TimingProfile(
        "t", step_s=0.04, batch_slope=0.05, prefill_base_s=0.04, prefill_per_token_s=0.001
    )
    assert [decode_step_s(profile, b) for b in (0, 1, 2, 9)] == pytest.approx(
        [0.04, 0.04, 0.042, 0.056]
    )
    assert [prefill_s(profile, n) for n in (0, 100, 1000)] == pytest.approx([0.04, 0.14, 1.04])
    assert profile.expected_tokens_per_s() == pytest.approx(25.0)
    spec = TimingProfile("s", 0.04, 0.05, 0.04, 0.001, MTP3)
    assert spec.expected_tokens_per_s() == pytest.approx(72.5)


class _Draws(random.Random):
    """A 'random' source that replays given numbers, to pin the sampler's rule exactly."""

    def __init__(self, values: list[float]) -> None:
        super().__init__(0)
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


@pytest.mark.parametrize(
    ("draws", "limit", "accepted", "left"),
    [
        ([0.10, 0.70, 0.60], 3, 3, 0),  # each draw under its conditional probability
        (
            [0.10, 0.80, 0.00],
            3,
            1,
            1,
        ),  # position 1 rejected (0.80 >= 0.75): stop, later draw unused
        ([0.90, 0.00, 0.00], 3, 0, 2),  # first position rejected
        ([0.10, 0.10, 0.10], 2, 2, 1),  # the request needs only 2 more drafts
        ([0.10], 0, 0, 1),  # nothing to draft for
    ],
)
def test_sampler_accepts_a_prefix_of_positions(
    draws: list[float], limit: int, accepted: int, left: int
) -> None:
    rng = _Draws(draws)
    assert sample_accepted(rng, MTP3.conditional(), limit) == accepted
    assert len(rng.values) == left


def test_sampler_is_deterministic_for_a_seed_and_converges_to_the_profile() -> None:
    first = [sample_accepted(request_rng(0, "k"), MTP3.conditional(), 3) for _ in range(3)]
    assert first == [sample_accepted(request_rng(0, "k"), MTP3.conditional(), 3)] * 3
    rng = request_rng(42, "many")
    n = 40_000
    per_pos = [0, 0, 0]
    for _ in range(n):
        for i in range(sample_accepted(rng, MTP3.conditional(), 3)):
            per_pos[i] += 1
    assert 1 + sum(per_pos) / n == pytest.approx(2.9, abs=0.02)
    assert [p / n for p in per_pos] == pytest.approx([0.84, 0.63, 0.43], abs=0.01)
    # one chunk per step carries 1 + accepted tokens: its mean is the acceptance length
    rng = request_rng(7, "chunks")
    chunks = [1 + sample_accepted(rng, MTP3.conditional(), 3) for _ in range(n)]
    assert set(chunks) == {1, 2, 3, 4}
    assert sum(chunks) / n == pytest.approx(2.9, abs=0.02)


def test_natural_length_is_seeded_and_bounded() -> None:
    values = [natural_length(request_rng(1, f"p{i}")) for i in range(500)]
    assert values == [natural_length(request_rng(1, f"p{i}")) for i in range(500)]
    assert min(values) >= 8 and max(values) <= 4096
    assert 250 < sorted(values)[250] < 450  # median near 350


@pytest.mark.parametrize(
    ("layers", "captures", "ids"),
    [(36, 5, [1, 9, 17, 25, 33]), (48, 5, [1, 12, 23, 34, 45]), (64, 5, [1, 16, 31, 46, 61]),
     (48, 8, [1, 7, 14, 20, 26, 32, 39, 45]), (64, 1, [32])],
)  # fmt: skip
def test_reference_layer_ids(layers: int, captures: int, ids: list[int]) -> None:
    assert reference_layer_ids(layers, captures) == ids


def _model(repo: str) -> Path:
    return MODELS_DIR / repo


Q36, Q8 = "Qwen/Qwen3.6-27B", "Qwen/Qwen3-8B"


def _profile(
    engine: str,
    method: str | None,
    k: int,
    drafter: str | None,
    *,
    target: str = Q36,
    v2: bool = True,
):
    t = load_target(target, _model(target))
    d = load_draft(drafter, _model(drafter)) if drafter else None
    return build_profile(engine=engine, target=t, method=method, num_draft_tokens=k, draft=d, tp=2,
                         gpu_name="NVIDIA RTX A6000", v2_model_runner=v2)  # fmt: skip


@pytest.mark.parametrize(
    ("engine", "method", "k", "drafter", "tok_s", "length"),
    [
        ("vllm", None, 0, None, (24, 26), 1.0),
        ("sglang", None, 0, None, (24, 26), 1.0),
        ("sglang", "mtp", 3, None, (72, 74), 2.9),
        ("vllm", "mtp", 3, None, (64, 72), 2.85),
        ("vllm", "eagle3", 3, "z-lab/Qwen3.6-27B-DFlash", (55, 66), 2.62),
        ("vllm", "dflash", 15, "z-lab/Qwen3.6-27B-DFlash", (90, 120), 5.495),
        ("sglang", "dflash", 15, "z-lab/Qwen3.6-27B-DFlash", (90, 120), 5.495),
        ("vllm", "dflash", 15, "orch-demo/Qwen3.6-27B-DFlash-broken", (17, 20), 1.0455),
        ("sglang", "dflash", 15, "orch-demo/Qwen3.6-27B-DFlash-broken", (17, 20), 1.0455),
    ],
)  # fmt: skip
def test_profiles_for_two_a6000_and_qwen36_27b(engine, method, k, drafter, tok_s, length) -> None:
    profile, _ = _profile(engine, method, k, drafter)
    assert profile.name.startswith("2 x RTX A6000, Qwen3.6-27B")
    assert tok_s[0] <= profile.expected_tokens_per_s() <= tok_s[1]
    expected = profile.spec.expected_acceptance_length() if profile.spec else 1.0
    assert expected == pytest.approx(length)
    assert profile.prefill_per_token_s == pytest.approx(1 / 2796.4, rel=1e-3)  # ~2800 prompt tok/s


def test_hybrid_drafter_without_v2_runner_accepts_less_on_vllm_only() -> None:
    v1, _ = _profile("vllm", "dflash", 15, "z-lab/Qwen3.6-27B-DFlash", v2=False)
    assert v1.spec is not None and v1.spec.expected_acceptance_length() == pytest.approx(1.53)
    sglang, _ = _profile("sglang", "dflash", 15, "z-lab/Qwen3.6-27B-DFlash", v2=False)
    assert sglang.spec is not None and sglang.spec.expected_acceptance_length() == pytest.approx(
        5.495
    )


@pytest.mark.parametrize(
    ("engine", "target", "drafter", "problems"),
    [
        ("vllm", Q36, "z-lab/Qwen3.6-27B-DFlash", []),
        ("vllm", Q8, "z-lab/Qwen3-8B-DFlash", []),
        ("vllm", Q36, "orch-demo/Qwen3.6-27B-DFlash-broken",
         ["mask_token_id 151669 is not a mask id for this target's tokenizer",
          "target_layer_ids [1, 16, 32, 48, 63] != [1, 16, 31, 46, 61]",
          "target layer 63 overflows 64 layers"]),
        ("sglang", Q36, "orch-demo/Qwen3.6-27B-DFlash-broken",
         ["mask_token_id 151669 is not a mask id for this target's tokenizer",
          "target_layer_ids [1, 16, 32, 48, 63] != [1, 16, 31, 46, 61]"]),
        ("vllm", Q36, "z-lab/Qwen3-8B-DFlash",
         ["mask_token_id 151669 is not a mask id for this target's tokenizer",
          "target_layer_ids [1, 9, 17, 25, 33] != [1, 16, 31, 46, 61]",
          "num_target_layers 36 != 64"]),
    ],
)  # fmt: skip
def test_drafter_fit(engine: str, target: str, drafter: str, problems: list[str]) -> None:
    fit = drafter_fit(
        engine, load_target(target, _model(target)), load_draft(drafter, _model(drafter))
    )
    assert list(fit.problems) == problems
    assert fit.ok is (not problems)
