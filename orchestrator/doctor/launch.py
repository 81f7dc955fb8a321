"""Launch settings that silently slow a healthy drafter: vLLM DFlash's attention backend and
model runner -> findings.

A right drafter served with the wrong settings does not collapse, it degrades: acceptance
about 1.5 and 27 tok/s instead of about 100 on a 27B target, and no engine says why. The
reference page (shared/reference/engines.md) words the two settings differently, and the
severities follow its words:

- DFlash runs "usually with ``--attention-backend flash_attn``": a recommendation, so another
  backend is a ``warning`` (it may be a deliberate comparison).
- "drafters mixing sliding-window and full attention layers *need*
  ``VLLM_USE_V2_MODEL_RUNNER=1``": a requirement. Without it the V1 runner runs every draft
  layer with full attention, so the drafter computes something it was not trained for; that
  is the same silent misconfiguration as a wrong mask id, so it is an ``error`` (refused
  before launch unless ``--force`` or ``doctor: warn``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.doctor.findings import Finding, error, ok, warning
from orchestrator.doctor.modelconfig import ModelConfig
from orchestrator.doctor.reference import canonical_method
from orchestrator.engines import Engine, get_engine

ATTENTION_FLAG = "--attention-backend"
ATTENTION_ENV = "VLLM_ATTENTION_BACKEND"  # older releases' spelling of the same choice
DFLASH_BACKEND = "flash_attn"
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


def launch_checks(
    *,
    engine: str,
    method: str | None,
    drafter: ModelConfig | None,
    extra_args: Sequence[str],
    env: Mapping[str, str],
) -> list[Finding]:
    """``attention_backend`` and ``model_runner`` for vLLM DFlash runs; nothing otherwise.

    ``env`` is the environment the engine will run with (the host's, then the run's). The
    model runner needs the drafter's layer types: with no drafter config it is not judged
    (the missing config is reported by its own finding).
    """
    found = get_engine(engine)
    if found.name != "vllm" or canonical_method(method) != "dflash":
        return []
    findings = [check_attention_backend(extra_args, env, engine=found)]
    if drafter is not None:
        findings.append(check_model_runner(drafter, env))
    return findings


def check_attention_backend(
    extra_args: Sequence[str], env: Mapping[str, str], *, engine: Engine
) -> Finding:
    """``extra_args`` are read by ``engine``'s flag reader: ``--attention-b flash_attn`` is the
    backend the engine will use, so it is what the doctor judges."""
    name = "attention_backend"
    flag = engine.flag_value(extra_args, ATTENTION_FLAG)
    chosen, source = (
        (flag, f"extra_args {ATTENTION_FLAG}")
        if flag
        else (env.get(ATTENTION_ENV), f"env {ATTENTION_ENV}")
    )
    details = {"found": chosen, "source": source if chosen else None, "expected": DFLASH_BACKEND}
    fix = (
        f"Fix: set the run's `extra_args: [{ATTENTION_FLAG}, {DFLASH_BACKEND}]` (or `doctor: warn` "
        "on the run if another backend is what you mean to measure)."
    )
    if not chosen:
        return warning(
            name,
            f"vLLM DFlash runs with {ATTENTION_FLAG} {DFLASH_BACKEND}, but this run "
            "leaves the attention backend to the engine's default: a healthy drafter "
            "then accepts far fewer drafts and nothing else reports it. Expected "
            f"{DFLASH_BACKEND}. " + fix,
            **details,
        )
    if chosen.strip().lower() != DFLASH_BACKEND:
        return warning(
            name,
            f"this run asks for attention backend {chosen!r} ({source}), but vLLM "
            f"DFlash runs with {DFLASH_BACKEND}: a healthy drafter then accepts far "
            f"fewer drafts. Expected {DFLASH_BACKEND}. " + fix,
            **details,
        )
    return ok(name, f"attention backend {chosen} ({source}).", **details)


def check_model_runner(drafter: ModelConfig, env: Mapping[str, str]) -> Finding:
    name = "model_runner"
    value = env.get(RUNNER_ENV)
    details = {
        "mixes_sliding_and_full": drafter.mixes_sliding_and_full,
        "layer_types": list(drafter.layer_types),
        "found": value,
        "expected": "1",
    }
    if not drafter.mixes_sliding_and_full:
        return ok(
            name,
            "the drafter does not mix sliding-window and full attention layers: "
            "the default model runner serves it.",
            **details,
        )
    label = f"the drafter {drafter.name}" if drafter.name else "the drafter"
    if value is not None and value.strip() == "1":
        return ok(
            name,
            f"{label} mixes sliding-window and full attention layers and {RUNNER_ENV}=1 is set.",
            **details,
        )
    found = "is not set" if value is None else f"is {value!r}"
    return error(
        name,
        f"{label} mixes sliding-window and full attention layers "
        f"({_layer_mix(drafter)}); vLLM serves such drafters correctly only with "
        f"{RUNNER_ENV}=1 (the V1 model runner runs every draft layer with full "
        f"attention), and here {RUNNER_ENV} {found}: acceptance drops to about 1.5 and "
        f"the run is several times slower, with no error. Expected {RUNNER_ENV}=1. Fix: "
        f"add `{RUNNER_ENV}: \"1\"` to the run's env (or the host's env in hosts.yaml).",
        **details,
    )


def _layer_mix(drafter: ModelConfig) -> str:
    types = drafter.layer_types
    if types:
        sliding = sum(t == "sliding_attention" for t in types)
        full = sum(t == "full_attention" for t in types)
        return f"layer_types: {sliding} sliding_attention, {full} full_attention"
    return (
        f"use_sliding_window with max_window_layers {drafter.text.get('max_window_layers')} "
        f"of {drafter.num_layers} layers"
    )
