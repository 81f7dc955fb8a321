"""Launch settings that silently slow a healthy drafter: vLLM DFlash's attention backend and
model runner -> findings.

A right drafter served with the wrong settings does not collapse, it degrades: acceptance
about 1.5 and 27 tok/s instead of about 100 on a 27B target, and no engine says why. The
reference page (docs/ENGINES.md) words the two settings differently, and the
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
from orchestrator.engines import get_engine
from orchestrator.engines.base import Engine
from orchestrator.engines.reference import DflashLaunch


def launch_checks(
    *,
    engine: str,
    method: str | None,
    drafter: ModelConfig | None,
    extra_args: Sequence[str],
    env: Mapping[str, str],
) -> list[Finding]:
    """``attention_backend`` and ``model_runner`` for DFlash runs on an engine that names such
    settings (``Engine.doctor.dflash_launch``: vLLM); nothing otherwise.

    ``env`` is the environment the engine will run with (the host's, then the run's). The
    model runner needs the drafter's layer types: with no drafter config it is not judged
    (the missing config is reported by its own finding).
    """
    found = get_engine(engine)
    launch = found.doctor.dflash_launch
    if launch is None or canonical_method(method) != "dflash":
        return []
    findings = [check_attention_backend(extra_args, env, engine=found)]
    if drafter is not None and launch.runner_env:
        findings.append(check_model_runner(drafter, env, engine=found))
    return findings


def check_attention_backend(
    extra_args: Sequence[str], env: Mapping[str, str], *, engine: Engine
) -> Finding:
    """``extra_args`` are read by ``engine``'s flag reader: ``--attention-b flash_attn`` is the
    backend the engine will use, so it is what the doctor judges."""
    name = "attention_backend"
    launch = _launch(engine)
    flag_name, env_name, backend = launch.attention_flag, launch.attention_env, launch.backend
    flag = engine.flag_value(extra_args, flag_name)
    chosen, source = (
        (flag, f"extra_args {flag_name}")
        if flag or env_name is None
        else (env.get(env_name), f"env {env_name}")
    )
    details = {"found": chosen, "source": source if chosen else None, "expected": backend}
    fix = (
        f"Fix: set the run's `extra_args: [{flag_name}, {backend}]` (or `doctor: warn` "
        "on the run if another backend is what you mean to measure)."
    )
    shown = engine.display_name
    if not chosen:
        return warning(
            name,
            f"{shown} DFlash runs with {flag_name} {backend}, but this run "
            "leaves the attention backend to the engine's default: a healthy drafter "
            "then accepts far fewer drafts and nothing else reports it. Expected "
            f"{backend}. " + fix,
            **details,
        )
    if chosen.strip().lower() != backend:
        return warning(
            name,
            f"this run asks for attention backend {chosen!r} ({source}), but {shown} "
            f"DFlash runs with {backend}: a healthy drafter then accepts far "
            f"fewer drafts. Expected {backend}. " + fix,
            **details,
        )
    return ok(name, f"attention backend {chosen} ({source}).", **details)


def check_model_runner(drafter: ModelConfig, env: Mapping[str, str], *, engine: Engine) -> Finding:
    name = "model_runner"
    runner_env = _launch(engine).runner_env
    if runner_env is None:
        raise ValueError(f"{engine.name} names no model runner setting for DFlash drafters")
    value = env.get(runner_env)
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
            f"{label} mixes sliding-window and full attention layers and {runner_env}=1 is set.",
            **details,
        )
    found = "is not set" if value is None else f"is {value!r}"
    return error(
        name,
        f"{label} mixes sliding-window and full attention layers "
        f"({_layer_mix(drafter)}); {engine.display_name} serves such drafters correctly only "
        f"with {runner_env}=1 (the V1 model runner runs every draft layer with full "
        f"attention), and here {runner_env} {found}: acceptance drops to about 1.5 and "
        f"the run is several times slower, with no error. Expected {runner_env}=1. Fix: "
        f"add `{runner_env}: \"1\"` to the run's env (or the host's env in hosts.yaml).",
        **details,
    )


def _launch(engine: Engine) -> DflashLaunch:
    launch = engine.doctor.dflash_launch
    if launch is None:
        raise ValueError(f"{engine.name} names no DFlash launch settings")
    return launch


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
