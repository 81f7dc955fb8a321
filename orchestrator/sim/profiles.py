"""Speed and acceptance profiles, calibrated on `2 x RTX A6000, Qwen3.6-27B`.

A plain decode step is memory-bound: reading the weights held by one GPU at the GPU's bandwidth,
plus a fixed overhead. For Qwen3.6-27B on two A6000s that is ~40 ms, i.e. ~25 tok/s per stream.
Speculative methods multiply the step cost (drafting, verifying K+1 tokens) and yield on average
``1 + sum(position rates)`` tokens per step:

    SGLang MTP (NEXTN, 3 drafts)   acceptance length ~2.9   ~73 tok/s
    vLLM MTP (3 drafts)            ~2.85                    ~68 tok/s
    vLLM EAGLE-3 (3 drafts)        ~2.6                     ~61 tok/s
    DFlash (15 drafts, block 16)   ~5.5                     ~97 tok/s
    DFlash, drafter that does not fit its target  ~1.05     ~18 tok/s (silent collapse)

Other GPUs and models scale through bandwidth and weight size.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.sim.models import DraftModel, TargetModel
from orchestrator.sim.timing import SpecProfile, TimingProfile

GPU_BANDWIDTH = {  # bytes/s, matched by substring of the GPU name
    "A6000": 768e9,
    "A100": 1935e9,
    "H100": 3350e9,
    "H200": 4800e9,
    "L40S": 864e9,
    "4090": 1008e9,
    "3090": 936e9,
}
GPU_TFLOPS = {"A6000": 155e12, "A100": 312e12, "H100": 990e12, "H200": 990e12, "L40S": 362e12}
STEP_OVERHEAD_S = 0.0044  # kernel launches, sampling, all-reduce at batch 1
BYTES_PER_PARAM = 2  # bf16

# Unconditional per-position acceptance rates of healthy drafters on chat/math/code prompts.
RATES: dict[str, tuple[float, ...]] = {
    "mtp": (0.82, 0.61, 0.42, 0.28, 0.18, 0.11, 0.07),
    "sglang-mtp": (0.84, 0.63, 0.43, 0.29, 0.19, 0.12, 0.07),
    "eagle3": (0.76, 0.52, 0.34, 0.21, 0.13, 0.08),
    "eagle": (0.70, 0.45, 0.28, 0.17, 0.10),
    "draft_model": (0.72, 0.50, 0.33, 0.21, 0.13, 0.08),
    "ngram": (0.42, 0.24, 0.14, 0.08, 0.05),
    "suffix": (0.45, 0.27, 0.16, 0.09, 0.05),
    "dflash": (
        0.87,
        0.75,
        0.64,
        0.54,
        0.45,
        0.36,
        0.28,
        0.21,
        0.15,
        0.10,
        0.07,
        0.04,
        0.02,
        0.01,
        0.005,
    ),
    # A drafter whose mask token or layer ids do not match the target: a few percent, then ~0.
    "dflash-broken": (0.035, 0.008, 0.002, 0.0005),
    # A hybrid sliding/full-attention DFlash drafter run by vLLM's V1 model runner.
    "dflash-v1-runner": (0.32, 0.13, 0.05, 0.02, 0.01),
}
# Step cost relative to a plain decode step (drafting + verifying K + 1 tokens).
STEP_FACTOR = {
    "mtp": 1.04,
    "sglang-mtp": 0.98,  # overlap scheduler and CUDA graphs for the draft loop
    "eagle3": 1.06,
    "eagle": 1.05,
    "draft_model": 1.25,
    "ngram": 1.01,
    "suffix": 1.01,
    "dflash": 1.40,
}


@dataclass(frozen=True)
class DrafterFit:
    ok: bool
    problems: tuple[str, ...]


def reference_layer_ids(num_layers: int, captures: int) -> list[int]:
    """DFlash's own choice of target layers to read (engines.md)."""
    if captures == 1:
        return [num_layers // 2]
    start, end = 1, num_layers - 3
    return [round(start + i * (end - start) / (captures - 1)) for i in range(captures)]


def trained_mask_ids(target: TargetModel) -> set[int]:
    """Mask ids DFlash drafters are trained with for this target's tokenizer family."""
    if target.vocab_size == 151936:  # Qwen3
        return {151669}
    if target.vocab_size == 248320:  # Qwen3.5 / Qwen3.6
        return {248070, 248077}
    # Unknown family: an added special token, or an unused id past the tokenizer's last token.
    special = set(target.added_tokens)
    return special | set(range(target.tokenizer_len, target.vocab_size))


def drafter_fit(engine: str, target: TargetModel, draft: DraftModel) -> DrafterFit:
    """Does a DFlash drafter fit its target? Nothing in a real engine checks: it just collapses."""
    problems: list[str] = []
    mask = draft.mask_token_id
    if mask is None or mask not in trained_mask_ids(target):
        problems.append(f"mask_token_id {mask} is not a mask id for this target's tokenizer")
    ids = list(draft.target_layer_ids or [])
    if not ids or ids != reference_layer_ids(target.num_layers, len(ids)):
        problems.append(
            f"target_layer_ids {ids} != {reference_layer_ids(target.num_layers, max(1, len(ids)))}"
        )
    shift = 1 if engine == "vllm" else 0
    if ids and max(ids) + shift >= target.num_layers:
        problems.append(f"target layer {max(ids)} overflows {target.num_layers} layers")
    if draft.num_target_layers not in (None, target.num_layers):
        problems.append(f"num_target_layers {draft.num_target_layers} != {target.num_layers}")
    return DrafterFit(ok=not problems, problems=tuple(problems))


def _match(table: dict[str, float], gpu_name: str, default: float) -> float:
    for key, value in table.items():
        if key.lower() in gpu_name.lower():
            return value
    return default


def plain_step_s(target: TargetModel, draft: DraftModel | None, tp: int, gpu_name: str) -> float:
    weights = (target.params() + (draft.params if draft else 0)) * BYTES_PER_PARAM / max(1, tp)
    return weights / _match(GPU_BANDWIDTH, gpu_name, 768e9) + STEP_OVERHEAD_S


def build_profile(
    *,
    engine: str,
    target: TargetModel,
    method: str | None,
    num_draft_tokens: int,
    draft: DraftModel | None,
    tp: int,
    gpu_name: str,
    v2_model_runner: bool = False,
) -> tuple[TimingProfile, DrafterFit | None]:
    """The profile a launch runs on, and (for DFlash) whether its drafter fits the target."""
    base = plain_step_s(target, None, tp, gpu_name)
    per_token = 2 * target.params() / (max(1, tp) * 0.5 * _match(GPU_TFLOPS, gpu_name, 155e12))
    name = f"{tp} x {gpu_name.removeprefix('NVIDIA ')}, {target.name.split('/')[-1]}"
    if method is None:
        return TimingProfile(name, base, 0.02, base, per_token), None
    fit = None
    key = method
    if method == "mtp" and engine == "sglang":
        key = "sglang-mtp"
    if method == "dflash" and draft is not None:
        fit = drafter_fit(engine, target, draft)
        if not fit.ok:
            key = "dflash-broken"
        elif engine == "vllm" and draft.mixes_sliding_and_full and not v2_model_runner:
            key = "dflash-v1-runner"
    rates = RATES.get(key, RATES["draft_model"])
    rates = tuple(rates[:num_draft_tokens]) + (0.0,) * max(0, num_draft_tokens - len(rates))
    factor = STEP_FACTOR.get(key, STEP_FACTOR.get(method, STEP_FACTOR["draft_model"]))
    spec = SpecProfile(method=method, num_draft_tokens=num_draft_tokens, position_rates=rates)
    slope = 0.02 + 0.01 * num_draft_tokens
    profile = TimingProfile(f"{name}, {key}", base * factor, slope, base, per_token, spec)
    return profile, fit
