"""Everything decided before serving: models, speculative settings, GPUs and memory.

``plan_launch`` either returns a ``Plan`` or raises ``StartupFailure`` with the text the real
engine prints for that mistake (model not found, bad speculative config, not enough GPUs,
CUDA out of memory, KV cache too small, GPU memory held by another process). The GPUs are the
ones ``CUDA_VISIBLE_DEVICES`` shows (``gpus.visible_devices``), the first tp x pp x dp of them; the
engines' messages name them by their CUDA index within that set (``cuda:0`` is the first).
``claim_memory`` is the second look a real engine takes, when it allocates its KV cache.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.sim import failures
from orchestrator.sim.cli import LaunchConfig
from orchestrator.sim.failures import GIB, StartupFailure
from orchestrator.sim.fixed import FixedTiming, FixedTimingError, apply_fixed, read_fixed
from orchestrator.sim.gpus import GpuFacts, held_by_others, load_gpu_facts, visible_devices
from orchestrator.sim.models import (
    DraftModel,
    ModelNotFound,
    TargetModel,
    load_draft,
    load_target,
    resolve_model,
)
from orchestrator.sim.nights import Night, NightsError, NightSettings, night_key, play, read_env
from orchestrator.sim.profiles import DrafterFit, build_profile
from orchestrator.sim.timing import TimingProfile

VLLM_METHODS = (
    "ngram",
    "ngram_gpu",
    "suffix",
    "draft_model",
    "eagle",
    "eagle3",
    "mtp",
    "dflash",
    "dspark",
)
VLLM_MTP_ALIASES = (
    "qwen3_next_mtp",
    "qwen3_5_mtp",
    "deepseek_mtp",
    "ernie_mtp",
    "mimo_mtp",
    "glm4_moe_mtp",
)
ACTIVATION_GIB = 1.2  # activations, CUDA graphs, NCCL buffers: not available to weights or KV


@dataclass(frozen=True)
class SpecChoice:
    method: str  # vLLM's name
    draft_name: str | None
    num_draft_tokens: int
    topk: int = 1
    label: str = ""  # as the user wrote it: "NEXTN", "dflash"...


@dataclass(frozen=True)
class Plan:
    cfg: LaunchConfig
    target: TargetModel
    draft: DraftModel | None
    spec: SpecChoice | None
    profile: TimingProfile
    fit: DrafterFit | None
    gpu: GpuFacts
    devices: list[int]
    weights_gib: float  # per GPU
    memory_mib: int  # what the process holds per GPU once running
    kv_capacity_tokens: int
    max_model_len: int
    max_running: int
    warnings: list[str] = field(default_factory=list)
    night: Night | None = None  # the night played (nights.py); profile is already its profile


def _value_error(engine: str, message: str, where: str) -> StartupFailure:
    site = "/opt/venv/lib/python3.12/site-packages"
    lines = [
        "Traceback (most recent call last):",
        f'  File "{site}/{where}", line 1, in __post_init__',
        "    raise ValueError(",
        f"ValueError: {message}",
    ]
    return failures.config_error("\n".join(lines))


def _resolve(engine: str, name: str, environ: Mapping[str, str]) -> Path:
    try:
        return resolve_model(name, environ)
    except ModelNotFound:
        raise failures.model_not_found(engine, name) from None


def choose_vllm_spec(
    spec: dict, target: TargetModel, environ: Mapping[str, str]
) -> tuple[SpecChoice, DraftModel | None, list[str]]:
    warnings: list[str] = []
    method = spec.get("method")
    model = spec.get("model")
    if method in VLLM_MTP_ALIASES:
        warnings.append(f"method `{method}` is deprecated and replaced with mtp.")
        method = "mtp"
    if method is None:
        if model is None:
            raise _value_error(
                "vllm",
                "num_speculative_tokens was provided but without speculative model.",
                "vllm/config/speculative.py",
            )
        low = str(model).lower()
        method = (
            "eagle3"
            if "eagle3" in low
            else "eagle"
            if "eagle" in low
            else "dflash"
            if "dflash" in low
            else "draft_model"
        )
    if method not in VLLM_METHODS:
        allowed = ", ".join(f"'{m}'" for m in VLLM_METHODS)
        raise failures.config_error(
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
            f"method\n  Input should be {allowed} [type=literal_error, input_value='{method}', input_type=str]"
        )
    draft = None
    if method in ("draft_model", "eagle", "eagle3", "dflash", "dspark"):
        if not model:
            raise _value_error(
                "vllm",
                f"Speculative method '{method}' requires a draft model: set \"model\" in --speculative-config.",
                "vllm/config/speculative.py",
            )
        draft = load_draft(str(model), _resolve("vllm", str(model), environ))
    n = spec.get("num_speculative_tokens")
    if n is None:
        if method == "mtp" and target.mtp_layers:
            n = target.mtp_layers
        elif draft is not None and draft.block_size:
            n = draft.block_size - 1
        elif method in ("ngram", "ngram_gpu", "suffix"):
            n = 5
        else:
            raise _value_error(
                "vllm",
                "num_speculative_tokens must be provided with speculative model unless the draft model config contains an n_predict parameter.",
                "vllm/config/speculative.py",
            )
    if not isinstance(n, int) or n <= 0:
        raise _value_error(
            "vllm",
            f"Expected num_speculative_tokens to be greater than zero ({n}).",
            "vllm/config/speculative.py",
        )
    if method == "mtp" and not target.mtp_layers:
        raise _value_error(
            "vllm",
            f"Speculative method 'mtp' needs MTP layers in the target model, but {target.architecture} ({target.name}) has none.",
            "vllm/config/speculative.py",
        )
    if method == "dflash" and draft is not None:
        if draft.architecture != "DFlashDraftModel":
            raise _value_error(
                "vllm",
                f"DFlash speculative decoding expects a DFlashDraftModel checkpoint, got {draft.architecture}.",
                "vllm/config/speculative.py",
            )
        if draft.block_size and n > draft.block_size - 1:
            raise _value_error(
                "vllm",
                f"num_speculative_tokens ({n}) must be at most block_size - 1 ({draft.block_size - 1}) for the DFlash drafter {draft.name}.",
                "vllm/config/speculative.py",
            )
    return SpecChoice(method, str(model) if model else None, n, label=method), draft, warnings


def choose_sglang_spec(
    spec: dict, target: TargetModel, environ: Mapping[str, str]
) -> tuple[SpecChoice, DraftModel | None, list[str]]:
    warnings: list[str] = []
    algo = spec["algorithm"]
    path = spec.get("draft_model_path")
    steps, topk, ndt = spec.get("num_steps"), spec.get("eagle_topk"), spec.get("num_draft_tokens")
    draft = None
    if algo in ("EAGLE3", "STANDALONE", "DFLASH") and not path:
        raise _value_error(
            "sglang",
            f"--speculative-algorithm {algo} requires --speculative-draft-model-path.",
            "sglang/srt/server_args.py",
        )
    if path:
        draft = load_draft(path, _resolve("sglang", path, environ))
    if algo == "DFLASH":
        block = (draft.block_size if draft else None) or 16
        if ndt is None:
            ndt = block
        if ndt != block:
            raise _value_error(
                "sglang",
                f"DFLASH verifies whole blocks: --speculative-num-draft-tokens ({ndt}) must equal the drafter's block_size ({block}).",
                "sglang/srt/server_args.py",
            )
        return SpecChoice("dflash", path, block - 1, label=algo), draft, warnings
    if algo == "NGRAM":
        ndt = ndt or 8
        return SpecChoice("ngram", None, max(1, ndt - 1), label=algo), None, warnings
    steps = steps or 3
    topk = topk or 1
    if topk == 1 and ndt is not None and ndt != steps + 1:
        warnings.append(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
        )
    if algo in ("EAGLE", "NEXTN") and not path:
        if not target.mtp_layers:
            raise _value_error(
                "sglang",
                f"{algo} without --speculative-draft-model-path uses the model's built-in MTP layers, but {target.architecture} has none.",
                "sglang/srt/server_args.py",
            )
        return SpecChoice("mtp", None, steps, topk, label=algo), None, warnings
    method = {"EAGLE": "eagle", "NEXTN": "eagle", "EAGLE3": "eagle3", "STANDALONE": "draft_model"}[
        algo
    ]
    return SpecChoice(method, path, steps, topk, label=algo), draft, warnings


HOPPER = ("H100", "H200", "H800", "H20", "GH200")


def sglang_backend_changes(cfg: LaunchConfig, gpu_name: str) -> tuple[str, list[str]]:
    """SGLang's server_args rewrites of the attention backend / page size, and its log lines."""
    backend = cfg.attention_backend
    notes: list[str] = []
    if backend is None:
        return "flashinfer", [
            "Attention backend not explicitly specified. Use flashinfer backend by default."
        ]
    kv_dtype = str(cfg.args.get("kv_cache_dtype") or "auto")
    if backend == "fa3" and kv_dtype.startswith("fp8") and kv_dtype != "fp8_e4m3":
        notes.append(
            "FlashAttention3 only supports fp8_e4m3 if using FP8; Setting attention backend to triton."
        )
        backend = "triton"
    elif backend == "fa3" and not any(h in gpu_name for h in HOPPER):
        notes.append(
            f"FlashAttention3 needs SM90 or newer and {gpu_name} is SM86; Setting attention backend to triton."
        )
        backend = "triton"
    page = cfg.args.get("page_size")
    if backend == "trtllm_mha" and page not in (16, 32, 64):
        notes.append(
            f"TensorRT-LLM MHA only supports page_size of 16, 32 or 64, changing page_size from {page or 1} to 64."
        )
    return backend, notes


def plan_launch(cfg: LaunchConfig, environ: Mapping[str, str], state: Path) -> Plan:
    engine = cfg.engine
    settings = _night_settings(environ)  # a bad knob fails first, as a bad flag would
    fixed = _fixed_timing(environ)
    target = load_target(cfg.model, _resolve(engine, cfg.model, environ))
    spec: SpecChoice | None = None
    draft: DraftModel | None = None
    warnings: list[str] = []
    if cfg.speculative:
        choose = choose_vllm_spec if engine == "vllm" else choose_sglang_spec
        spec, draft, warnings = choose(cfg.speculative, target, environ)
    gpu = load_gpu_facts(state, environ)
    devices = visible_devices(environ.get("CUDA_VISIBLE_DEVICES"), gpu)
    if cfg.gpus > len(devices):  # tp x pp x dp: every replica and stage needs GPUs of its own
        if engine == "vllm" and cfg.dp == 1:
            raise failures.config_error(
                f"AssertionError: please set tensor_parallel_size ({cfg.tp}) to less than max local gpu count ({len(devices)})"
                if cfg.pp == 1
                else f"ValueError: World size ({cfg.shards}) is larger than the number of available GPUs ({len(devices)}) in this node."
            )
        if engine == "vllm":
            raise failures.config_error(
                f"ValueError: Data parallel size ({cfg.dp}) x world size ({cfg.shards}) needs {cfg.gpus} GPUs, {len(devices)} visible."
            )
        raise failures.config_error(
            f"RuntimeError: CUDA error: invalid device ordinal (tp_size={cfg.tp}, pp_size={cfg.pp}, dp_size={cfg.dp}: {cfg.gpus} GPUs, {len(devices)} visible)"
        )
    devices = devices[: cfg.gpus]
    if environ.get("ORCH_SIM_FAIL") == "nccl":
        raise failures.nccl_error(engine)
    if environ.get("ORCH_SIM_FAIL") == "memory":
        raise failures.not_enough_memory(engine)
    plan = _memory_plan(cfg, environ, state, target, draft, spec, gpu, devices, warnings)
    if engine == "sglang":
        backend, notes = sglang_backend_changes(cfg, gpu.name)
        plan.warnings[:0] = notes
        if (
            backend == "triton" and cfg.attention_backend != "triton"
        ):  # a slower kernel than asked for
            plan = replace(plan, profile=replace(plan.profile, step_s=plan.profile.step_s * 1.06))
    key = night_key(engine, cfg.model, plan.spec.method if plan.spec else None)
    profile, night = play(settings, plan.profile, key)
    if fixed.active:  # a client benchmark's known step and tokens per chunk (fixed.py)
        speed = max(1e-6, float(environ.get("ORCH_SIM_SPEED") or 1.0))
        try:
            profile = apply_fixed(profile, fixed, speed)
        except FixedTimingError as exc:
            raise failures.config_error(f"ValueError: {exc}") from None
    return replace(plan, profile=profile, night=night)


def _fixed_timing(environ: Mapping[str, str]) -> FixedTiming:
    """``ORCH_SIM_STEP_MS`` / ``ORCH_SIM_CHUNK_TOKENS`` (fixed.py); malformed: a start-up error."""
    try:
        return read_fixed(environ)
    except FixedTimingError as exc:
        raise failures.config_error(f"ValueError: {exc}") from None


def _night_settings(environ: Mapping[str, str]) -> NightSettings:
    """The night knobs (nights.py); a malformed one is a start-up error with one clear line."""
    try:
        return read_env(environ)
    except NightsError as exc:
        raise failures.config_error(f"ValueError: {exc}") from None


def _memory_plan(
    cfg: LaunchConfig,
    environ: Mapping[str, str],
    state: Path,
    target: TargetModel,
    draft: DraftModel | None,
    spec: SpecChoice | None,
    gpu: GpuFacts,
    devices: list[int],
    warnings: list[str],
) -> Plan:
    engine = cfg.engine
    total_gib = gpu.memory_mib / 1024
    fraction = (
        cfg.mem_fraction if cfg.mem_fraction is not None else (0.9 if engine == "vllm" else 0.85)
    )
    budget = fraction * total_gib
    weights = (target.params() + (draft.params if draft else 0)) * 2 / cfg.shards / GIB
    taken = held_by_others(state, devices, os.getpid())
    for device, physical in enumerate(devices):
        used = taken[physical] / 1024
        if used and total_gib - used < budget:
            if engine == "vllm":
                raise _value_error(
                    "vllm",
                    f"Free memory on device cuda:{device} ({total_gib - used:.2f}/{total_gib:.2f} GiB) on startup is less than desired GPU memory utilization ({fraction}, {budget:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
                    "vllm/v1/worker/gpu_worker.py",
                )
            raise failures.config_error(
                f"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. (GPU {device}: {total_gib - used:.2f} GiB free, {budget:.2f} GiB requested)"
            )
    if environ.get("ORCH_SIM_FAIL") == "oom" or weights > budget - ACTIVATION_GIB:
        tried = min(2.0, target.vocab_size * target.hidden_size * 2 / cfg.shards / GIB)
        raise failures.cuda_oom(
            engine, tried_gib=tried, total_gib=total_gib * 0.965, in_use_gib=total_gib * 0.95
        )
    kv_gib = budget - weights - ACTIVATION_GIB
    # a replica's KV cache: each of its GPUs holds its heads (tp) of its layers (pp)
    kv_tokens = int(kv_gib * GIB * cfg.shards / max(1, target.kv_bytes_per_token()))
    max_len = cfg.max_model_len or target.max_position_embeddings
    if max_len > target.max_position_embeddings and engine == "vllm":
        raise _value_error(
            "vllm",
            f"User-specified max_model_len ({max_len}) is greater than the derived max_model_len (max_position_embeddings={target.max_position_embeddings} or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
            "vllm/config/model.py",
        )
    if kv_tokens <= 0:
        raise _value_error(
            "vllm",
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
            "vllm/v1/core/kv_cache_utils.py",
        )
    if engine == "vllm" and kv_tokens < max_len:
        need = max_len * target.kv_bytes_per_token() / cfg.shards / GIB
        raise _value_error(
            "vllm",
            f"To serve at least one request with the models's max seq len ({max_len}), ({need:.2f} GiB KV cache is needed, which is larger than the available KV cache memory ({kv_gib:.2f} GiB). Based on the available memory, the estimated maximum model length is {kv_tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
            "vllm/v1/core/kv_cache_utils.py",
        )
    max_len = min(max_len, kv_tokens) if engine == "sglang" else max_len
    held = budget if engine == "vllm" else min(total_gib - 0.3, budget + 1.1)
    profile, fit = build_profile(
        engine=engine,
        target=target,
        method=spec.method if spec else None,
        num_draft_tokens=spec.num_draft_tokens if spec else 0,
        draft=draft,
        tp=cfg.tp,
        gpu_name=gpu.name,
        v2_model_runner=environ.get("VLLM_USE_V2_MODEL_RUNNER") == "1",
    )
    return Plan(
        cfg=cfg,
        target=target,
        draft=draft,
        spec=spec,
        profile=profile,
        fit=fit,
        gpu=gpu,
        devices=devices,
        weights_gib=weights,
        memory_mib=int(held * 1024),
        kv_capacity_tokens=kv_tokens,
        max_model_len=max_len,
        max_running=cfg.max_num_seqs or (256 if engine == "vllm" else 128),
        warnings=warnings,
    )


def claim_memory(plan: Plan, state: Path, pid: int) -> None:
    """The engine allocating its KV cache: its whole share must still be free on each of its GPUs,
    else CUDA out of memory (another engine may have taken it since the start-up check). Call
    it under ``gpus.memory_lock`` and register the claim before the lock is released."""
    total_gib = plan.gpu.memory_mib / 1024
    share_gib = plan.memory_mib / 1024
    for used_mib in held_by_others(state, plan.devices, pid).values():
        used_gib = used_mib / 1024
        if used_mib and total_gib - used_gib < share_gib:
            raise failures.cuda_oom(
                plan.cfg.engine,
                tried_gib=max(0.01, share_gib - plan.weights_gib),
                total_gib=total_gib,
                in_use_gib=min(total_gib, used_gib + plan.weights_gib),
            )
