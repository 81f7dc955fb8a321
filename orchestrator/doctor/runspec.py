"""The doctor for one playbook run: RunSpec + model configs + host facts -> findings.

Duck-typed on the RunSpec (engine, speculative.method / draft_model / num_draft_tokens,
workload.chat_template_kwargs, tensor_parallel, port, gpu_memory_fraction, extra_args, env), so
this module needs nothing from the config package and works on any object with those fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.doctor.checks import run_checks
from orchestrator.doctor.collapse import Cause, flag_value, rank_causes
from orchestrator.doctor.findings import Finding, error, warning
from orchestrator.doctor.host import HostProbe, run_host_checks
from orchestrator.doctor.modelconfig import ModelConfig


def check_run(
    run: Any,
    *,
    target: ModelConfig | None,
    drafter: ModelConfig | None,
    host: HostProbe | None = None,
    expected_gpu: str | None = None,
) -> list[Finding]:
    """Model checks for the run's speculative settings, then host checks when facts are given.

    ``target``/``drafter`` None mean their files could not be read; the caller reports why
    (see ``model_from_agent``), so the model checks are skipped rather than guessed.
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
    if host is not None:
        findings += run_host_checks(
            host=host, engine=engine, method=method,
            tensor_parallel=_get(run, "tensor_parallel") or 1, port=_get(run, "port"),
            target=target, drafter=drafter, memory_fraction=_get(run, "gpu_memory_fraction"),
            expected_gpu=expected_gpu,
        )
    return findings


def causes_for_run(run: Any, findings: list[Finding], *, drafter: ModelConfig | None = None) -> list[Cause]:
    """``rank_causes`` with the engine, env, extra args and kwargs taken from the run."""
    extra_args = [str(a) for a in _get(run, "extra_args") or []]
    env = {str(k): str(v) for k, v in (_get(run, "env") or {}).items()}
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
