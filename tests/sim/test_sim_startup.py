"""Start-up decisions: speculative settings as each engine reads them, memory, backend rewrites."""

from __future__ import annotations

import pytest

from orchestrator.sim.cli import parse_sglang, parse_vllm
from orchestrator.sim.failures import StartupFailure
from orchestrator.sim.sandbox import Sandbox
from orchestrator.sim.startup import SpecChoice, plan_launch, sglang_backend_changes

Q36 = "Qwen/Qwen3.6-27B"


def _vllm(box: Sandbox, *args: str, env: dict | None = None):
    return plan_launch(
        parse_vllm(["serve", Q36, "-tp", "2", *args]), {**box.env(), **(env or {})}, box.state_dir
    )


def _sglang(box: Sandbox, *args: str):
    return plan_launch(
        parse_sglang(["--model-path", Q36, "--tp-size", "2", *args]), box.env(), box.state_dir
    )


def test_vllm_dflash_plan(sim_box: Sandbox) -> None:
    plan = _vllm(sim_box, "--max-model-len", "8192", "--gpu-memory-utilization", "0.92", "-sc",
                 '{"method": "dflash", "model": "z-lab/Qwen3.6-27B-DFlash", "num_speculative_tokens": 15}')  # fmt: skip
    assert plan.spec == SpecChoice("dflash", "z-lab/Qwen3.6-27B-DFlash", 15, label="dflash")
    assert plan.devices == [0, 1] and plan.max_model_len == 8192
    assert plan.memory_mib == int(0.92 * 49140)
    assert plan.weights_gib == pytest.approx((27.714 + 1.992) * 1e9 * 2 / 2 / 1024**3, rel=1e-3)
    assert plan.kv_capacity_tokens == int(
        (0.92 * 49140 / 1024 - plan.weights_gib - 1.2) * 1024**3 * 2 / 65536
    )
    assert plan.fit is not None and plan.fit.ok


@pytest.mark.parametrize(
    ("spec", "choice", "warnings"),
    [
        ('{"method": "mtp", "num_speculative_tokens": 3}', SpecChoice("mtp", None, 3, label="mtp"), []),
        ('{"method": "qwen3_5_mtp", "num_speculative_tokens": 2}', SpecChoice("mtp", None, 2, label="mtp"),
         ["method `qwen3_5_mtp` is deprecated and replaced with mtp."]),
        ('{"method": "mtp"}', SpecChoice("mtp", None, 1, label="mtp"), []),  # the model's MTP layer count
        ('{"method": "dflash", "model": "z-lab/Qwen3.6-27B-DFlash"}',
         SpecChoice("dflash", "z-lab/Qwen3.6-27B-DFlash", 15, label="dflash"), []),  # block_size - 1
        ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}',
         SpecChoice("ngram", None, 4, label="ngram"), []),
    ],
)  # fmt: skip
def test_vllm_speculative_config(
    sim_box: Sandbox, spec: str, choice: SpecChoice, warnings: list[str]
) -> None:
    plan = _vllm(sim_box, "-sc", spec)
    assert (plan.spec, plan.warnings) == (choice, warnings)


@pytest.mark.parametrize(
    ("args", "choice", "warnings"),
    [
        (["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "4"], SpecChoice("mtp", None, 3, 1, "NEXTN"), []),
        (["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2", "--speculative-num-draft-tokens", "5"],
         SpecChoice("mtp", None, 2, 1, "EAGLE"),
         ["speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"]),
        (["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "z-lab/Qwen3.6-27B-DFlash"],
         SpecChoice("dflash", "z-lab/Qwen3.6-27B-DFlash", 15, label="DFLASH"), []),
        (["--speculative-algorithm", "NGRAM"], SpecChoice("ngram", None, 7, label="NGRAM"), []),
    ],
)  # fmt: skip
def test_sglang_speculative_flags(
    sim_box: Sandbox, args: list[str], choice: SpecChoice, warnings: list[str]
) -> None:
    plan = _sglang(sim_box, "--attention-backend", "flashinfer", *args)
    assert (plan.spec, plan.warnings) == (choice, warnings)


def test_sglang_dflash_verifies_whole_blocks(sim_box: Sandbox) -> None:
    with pytest.raises(StartupFailure) as failure:
        _sglang(sim_box, "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                "z-lab/Qwen3.6-27B-DFlash", "--speculative-num-draft-tokens", "8")  # fmt: skip
    assert failure.value.traceback[-1] == (
        "ValueError: DFLASH verifies whole blocks: --speculative-num-draft-tokens (8) must equal the "
        "drafter's block_size (16)."
    )


def test_kv_cache_too_small_for_the_model_length(sim_box: Sandbox) -> None:
    with pytest.raises(StartupFailure) as failure:
        _vllm(sim_box, "--gpu-memory-utilization", "0.7")  # default max_model_len: 262144
    last = failure.value.traceback[-1]
    assert last.startswith(
        "ValueError: To serve at least one request with the models's max seq len (262144)"
    )
    assert "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`" in last
    assert _sglang(sim_box, "--mem-fraction-static", "0.7").max_model_len < 262144  # SGLang caps it


@pytest.mark.parametrize(
    ("args", "gpu", "backend", "notes"),
    [
        ([], "NVIDIA RTX A6000", "flashinfer",
         ["Attention backend not explicitly specified. Use flashinfer backend by default."]),
        (["--attention-backend", "flashinfer"], "NVIDIA RTX A6000", "flashinfer", []),
        (["--attention-backend", "fa3"], "NVIDIA RTX A6000", "triton",
         ["FlashAttention3 needs SM90 or newer and NVIDIA RTX A6000 is SM86; Setting attention backend to triton."]),
        (["--attention-backend", "fa3"], "NVIDIA H100 80GB HBM3", "fa3", []),
        (["--attention-backend", "fa3", "--kv-cache-dtype", "fp8_e5m2"], "NVIDIA H100 80GB HBM3", "triton",
         ["FlashAttention3 only supports fp8_e4m3 if using FP8; Setting attention backend to triton."]),
        (["--attention-backend", "trtllm_mha"], "NVIDIA H100 80GB HBM3", "trtllm_mha",
         ["TensorRT-LLM MHA only supports page_size of 16, 32 or 64, changing page_size from 1 to 64."]),
    ],
)  # fmt: skip
def test_sglang_backend_rewrites(args: list[str], gpu: str, backend: str, notes: list[str]) -> None:
    assert sglang_backend_changes(parse_sglang(["--model-path", "m", *args]), gpu) == (
        backend,
        notes,
    )
