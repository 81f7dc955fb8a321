"""The doctor for one playbook run: RunSpec + model configs + host facts -> findings.

Duck-typed on the RunSpec (engine, speculative.method / draft_model / num_draft_tokens,
workload.chat_template_kwargs, tensor_parallel, port, gpu_memory_fraction, extra_args, env), so
this module works on any object or mapping with those fields. Only the engines' default ports
come from ``orchestrator.engines``, so the port checked is the one the server will really use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.doctor.checks import run_checks
from orchestrator.doctor.collapse import Cause, flag_value, rank_causes
from orchestrator.doctor.findings import Finding, error, warning
from orchestrator.doctor.host import HostProbe, run_host_checks
from orchestrator.doctor.launch import launch_checks
from orchestrator.doctor.modelconfig import ModelConfig
from orchestrator.engines import ENGINES


def check_run(
    run: Any,
    *,
    target: ModelConfig | None,
    drafter: ModelConfig | None,
    host: HostProbe | None = None,
    expected_gpu: str | None = None,
    port: int | None = None,
    env: Mapping[str, Any] | None = None,
) -> list[Finding]:
    """Model checks for the run's speculative settings, the launch settings that silently slow
    a drafter (vLLM DFlash), then host checks when facts are given.

    ``target``/``drafter`` None mean their files could not be read; the caller reports why
    (see ``model_from_agent``), so the model checks are skipped rather than guessed.
    ``port``: the port the server will listen on (``PlannedLaunch.port``); None -> the run's
    ``port``, else the engine's default, exactly as the engine adapter picks it.
    ``env``: the environment the engine will run with (``PlannedLaunch.env``: the host's env,
    then the run's); None -> the run's own ``env`` only.
    """
    engine = _text(_get(run, "engine")) or "vllm"
    spec = _get(run, "speculative")
    method = _text(_get(spec, "method"))
    num_draft_tokens = _get(spec, "num_draft_tokens")
    kwargs = _get(_get(run, "workload"), "chat_template_kwargs")
    findings: list[Finding] = []
    if method and target is not None:
        findings += run_checks(target=target, drafter=drafter, engine=engine, method=method,
                               num_draft_tokens=num_draft_tokens, chat_template_kwargs=kwargs)
    findings += launch_checks(engine=engine, method=method, drafter=drafter,
                              extra_args=_extra_args(run), env=_env(run) if env is None else _strings(env))
    if host is not None:
        chosen_port, is_default = planned_port(run, engine, port=port)
        findings += run_host_checks(
            host=host, engine=engine, method=method, tensor_parallel=_get(run, "tensor_parallel") or 1,
            port=chosen_port, default_port=is_default,
            target=target, drafter=drafter, memory_fraction=_get(run, "gpu_memory_fraction"),
            expected_gpu=expected_gpu,
        )
    return findings


def planned_port(run: Any, engine: str, *, port: int | None = None) -> tuple[int | None, bool]:
    """The port the run's server will listen on, and whether it is the engine's default.

    Same rule as ``EngineAdapter.port``: the run's ``port``, else the engine's default (vLLM
    8000, SGLang 30000). orch never picks a free port itself, so a port taken by something
    else at doctor time is a launch that will fail.
    """
    adapter = ENGINES.get(engine.strip().lower())
    default = adapter.default_port if adapter is not None else None
    explicit = _get(run, "port")
    chosen = port if port is not None else (explicit or default)
    if chosen is None:
        return None, False
    return int(chosen), not explicit and chosen == default


def causes_for_run(run: Any, findings: list[Finding], *, drafter: ModelConfig | None = None,
                   env: Mapping[str, Any] | None = None) -> list[Cause]:
    """``rank_causes`` with the engine, env, extra args and kwargs taken from the run.

    ``env``: the environment the engine ran with (host's, then run's), as for ``check_run``;
    None -> the run's own ``env``.
    """
    extra_args = _extra_args(run)
    env = _env(run) if env is None else _strings(env)
    return rank_causes(
        findings,
        engine=_text(_get(run, "engine")) or "vllm",
        attention_backend=flag_value(extra_args, "--attention-backend"),
        env=env,
        extra_args=extra_args,
        chat_template_kwargs=_get(_get(run, "workload"), "chat_template_kwargs"),
        kv_cache_dtype=flag_value(extra_args, "--kv-cache-dtype"),
        method=_text(_get(_get(run, "speculative"), "method")),
        drafter=drafter,
    )


def model_from_agent(models: Mapping[str, Any], model_id: str, *, role: str) -> tuple[ModelConfig | None, Finding | None]:
    """Turn one entry of ``read_model_configs``' result into a ModelConfig, or a finding that
    says why it could not be read (``role`` is "target" or "drafter")."""
    entry = models.get(model_id)
    if not isinstance(entry, Mapping) or not entry.get("found"):
        why = entry.get("error") if isinstance(entry, Mapping) else None
        return None, error("model_files", f"the {role} {model_id!r} was not found on the host"
                           f"{': ' + why if why else ''}. Fix: download it into the Hugging Face "
                           "cache there (huggingface-cli download) or give its local path.",
                           model=model_id, role=role)
    config = entry.get("config")
    if not isinstance(config, Mapping):
        return None, error("model_files", f"the {role} {model_id!r} at {entry.get('path')} has no "
                           f"readable config.json{': ' + entry['error'] if entry.get('error') else ''}.",
                           model=model_id, role=role, path=entry.get("path"))
    model = ModelConfig.from_json(config, entry.get("tokenizer_config"), name=model_id,
                                  chat_template=entry.get("chat_template"))
    note = None
    if role == "target" and entry.get("tokenizer_config") is None:
        note = warning("model_files", f"the target {model_id!r} has no readable tokenizer_config.json: "
                       "the mask-token and thinking checks fall back to published tokenizer facts.",
                       model=model_id, role=role, path=entry.get("path"))
    return model, note


def _extra_args(run: Any) -> list[str]:
    return [str(a) for a in _get(run, "extra_args") or []]


def _env(run: Any) -> dict[str, str]:
    return _strings(_get(run, "env") or {})


def _strings(env: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in env.items()}


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _text(value: Any) -> str | None:
    """Strings and str-valued enums alike."""
    if value is None:
        return None
    return str(getattr(value, "value", value))
