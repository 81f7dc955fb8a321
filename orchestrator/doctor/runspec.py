"""The doctor for one playbook run: RunSpec + model configs + host facts -> findings.

The run's engine object (``orchestrator.engines``) supplies what differs by engine: the port
its server will really use, and the flag reader ``extra_args`` are read with, the same one the
launch uses, so ``--attention-b flash_attn`` counts as the attention backend here as there.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.config.playbook import RunSpec
from orchestrator.doctor.checks import run_checks
from orchestrator.doctor.collapse import Cause, rank_causes
from orchestrator.doctor.findings import Finding, error, warning
from orchestrator.doctor.host import HostProbe, run_host_checks
from orchestrator.doctor.launch import launch_checks
from orchestrator.doctor.modelconfig import ModelConfig
from orchestrator.engines import engine_for
from orchestrator.remote.wire import ModelFiles


def check_run(
    run: RunSpec,
    *,
    target: ModelConfig | None,
    drafter: ModelConfig | None,
    host: HostProbe | None = None,
    expected_gpu: str | None = None,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Model checks for the run's speculative settings, the launch settings that silently slow
    a drafter (vLLM DFlash), then host checks when facts are given.

    ``target``/``drafter`` None mean their files could not be read; the caller reports why
    (see ``model_from_agent``), so the model checks are skipped rather than guessed.
    ``port``: the port the server will listen on (``PlannedLaunch.port``); None -> the run's
    ``port``, else the engine's default, exactly as the engine object picks it.
    ``env``: the environment the engine will run with (``PlannedLaunch.env``: the host's env,
    then the run's); None -> the run's own ``env`` only.
    """
    engine = engine_for(run).name
    spec = run.speculative
    findings: list[Finding] = []
    if target is not None:
        findings += run_checks(
            target=target,
            drafter=drafter,
            engine=engine,
            method=spec.method,
            num_draft_tokens=spec.num_draft_tokens,
            chat_template_kwargs=run.workload.chat_template_kwargs,
        )
    findings += launch_checks(
        engine=engine,
        method=spec.method,
        drafter=drafter,
        extra_args=_extra_args(run),
        env=_env(run, env),
    )
    if host is not None:
        chosen_port, is_default = planned_port(run, port=port)
        findings += run_host_checks(
            host=host,
            engine=engine,
            method=spec.method,
            tensor_parallel=run.tensor_parallel,
            parallelism=engine_for(run).parallelism(run),
            port=chosen_port,
            default_port=is_default,
            target=target,
            drafter=drafter,
            memory_fraction=run.gpu_memory_fraction,
            expected_gpu=expected_gpu,
        )
    return findings


def planned_port(run: RunSpec, *, port: int | None = None) -> tuple[int, bool]:
    """The port the run's server will listen on, and whether it is the engine's default.

    Same rule as ``Engine.port``: the run's ``port``, else the engine's default (vLLM 8000,
    SGLang 30000), unless the plan gives ``port``. orch never picks a free port itself, so a
    port taken by something else at doctor time is a launch that will fail.
    """
    engine = engine_for(run)
    chosen = port if port is not None else engine.port(run)
    return chosen, run.port is None and chosen == engine.default_port


def causes_for_run(
    run: RunSpec,
    findings: list[Finding],
    *,
    drafter: ModelConfig | None = None,
    env: Mapping[str, str] | None = None,
) -> list[Cause]:
    """``rank_causes`` with the engine, env, extra args and kwargs taken from the run.

    ``env``: the environment the engine ran with (host's, then run's), as for ``check_run``;
    None -> the run's own ``env``.
    """
    engine = engine_for(run)
    return rank_causes(
        findings,
        engine=engine.name,
        attention_backend=engine.run_flag(run, "--attention-backend"),
        env=_env(run, env),
        extra_args=_extra_args(run),
        chat_template_kwargs=run.workload.chat_template_kwargs,
        kv_cache_dtype=engine.run_flag(run, "--kv-cache-dtype"),
        method=run.speculative.method,
        drafter=drafter,
        chat=run.workload.api == "chat",
    )


def model_from_agent(
    models: Mapping[str, ModelFiles], model_id: str, *, role: str
) -> tuple[ModelConfig | None, Finding | None]:
    """Turn one entry of ``read_model_configs``' result into a ModelConfig, or a finding that
    says why it could not be read (``role`` is "target" or "drafter")."""
    entry = models.get(model_id)
    if entry is None or not entry.found:
        why = entry.error if entry is not None else None
        return None, error(
            "model_files",
            f"the {role} {model_id!r} was not found on the host"
            f"{': ' + why if why else ''}. Fix: download it into the Hugging Face "
            "cache there (huggingface-cli download) or give its local path.",
            model=model_id,
            role=role,
        )
    if entry.config is None:
        return None, error(
            "model_files",
            f"the {role} {model_id!r} at {entry.path} has no "
            f"readable config.json{': ' + entry.error if entry.error else ''}.",
            model=model_id,
            role=role,
            path=entry.path,
        )
    model = ModelConfig.from_json(
        entry.config, entry.tokenizer_config, name=model_id, chat_template=entry.chat_template
    )
    note = None
    if role == "target" and entry.tokenizer_config is None:
        note = warning(
            "model_files",
            f"the target {model_id!r} has no readable tokenizer_config.json: "
            "the mask-token and thinking checks fall back to published tokenizer facts.",
            model=model_id,
            role=role,
            path=entry.path,
        )
    return model, note


def _extra_args(run: RunSpec) -> list[str]:
    return [str(a) for a in run.extra_args]


def _env(run: RunSpec, env: Mapping[str, str] | None) -> dict[str, str]:
    """The env the engine runs with when the caller knows it, else the run's own."""
    return {str(k): str(v) for k, v in (run.env if env is None else env).items()}
