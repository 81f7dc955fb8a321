"""Collapse detection, cause ranking and SGLang's silent setting changes, with exact values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import RunSpec
from orchestrator.doctor import (
    Finding,
    HostProbe,
    ModelConfig,
    RequestedSettings,
    acceptance_floor,
    causes_for_run,
    check_run,
    detect_collapse,
    engine_silent_changes,
    model_from_agent,
    planned_port,
    problems,
    rank_causes,
)
from orchestrator.engines import get_engine
from orchestrator.remote.wire import GpuInfo, ModelFiles

# Real per-position rates: the healthy one is docs/ENGINES.md's vLLM example line.
HEALTHY = [0.863, 0.706, 0.588, 0.471, 0.314, 0.255, 0.176]
DEAD = [0.012, 0.001, 0.0, 0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("method", "tokens", "floor"),
    [
        ("dflash", 15, 1.5),
        ("DFLASH", 3, 1.5),
        ("eagle3", None, 1.5),
        ("mtp", 1, 1.15),
        ("NEXTN", 2, 1.3),
        ("ngram", 3, None),
        ("suffix", 8, None),
    ],
)
def test_acceptance_floor(method: str, tokens: int | None, floor: float | None) -> None:
    assert acceptance_floor(method, tokens) == floor


@pytest.mark.parametrize(
    ("method", "tokens", "length", "positions", "reasons"),
    [
        ("dflash", 15, 1.04, DEAD, 2),
        ("dflash", 15, 4.37, HEALTHY, 0),
        ("dflash", 15, 1.6, [0.04, 0.3], 1),  # dead first position despite the mean
        ("mtp", 1, 1.12, None, 1),
        ("mtp", 1, 1.8, [0.8], 0),
        ("mtp", 3, 2.9, None, 0),
        ("eagle3", 3, None, [0.0, 0.0, 0.0], 1),
        ("ngram", 3, 1.01, [0.0, 0.0, 0.0], 0),
        ("dflash", 15, None, None, 0),
    ],
)
def test_detect_collapse(
    method: str, tokens: int, length: float | None, positions: list[float] | None, reasons: int
) -> None:
    collapse = detect_collapse(
        method=method, num_draft_tokens=tokens, acceptance_length=length, per_position=positions
    )
    assert (len(collapse.reasons) if collapse else 0) == reasons


def test_collapse_record() -> None:
    collapse = detect_collapse(
        method="dflash", num_draft_tokens=15, acceptance_length=1.04, per_position=DEAD
    )
    assert collapse is not None
    assert collapse.to_json() == {
        "method": "dflash",
        "num_draft_tokens": 15,
        "acceptance_length": 1.04,
        "floor": 1.5,
        "per_position": DEAD,
        "reasons": [
            "mean acceptance length 1.04 is below 1.50, the floor for dflash with 15 draft tokens",
            "per-position acceptance is near zero from the first position (0.012 <= 0.05)",
        ],
        "message": collapse.message,
        "likely_causes": [],  # ranked by rank_causes once the doctor's findings are known
    }
    assert collapse.message.startswith("speculation collapsed: mean acceptance length 1.04")


CLASSIC = [
    Finding("target_layer_ids", "error", "ids wrong"),
    Finding("num_target_layers", "ok", "fine"),
    Finding("mask_token_id", "error", "mask wrong"),
    Finding("thinking", "ok", "not checked"),
]
MIXED_DRAFTER = ModelConfig.from_json(
    {
        "architectures": ["DFlashDraftModel"],
        "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
    }
)


def _ranked(causes: list[Any]) -> list[tuple[int, str, str]]:
    return [(c.rank, c.cause, c.source) for c in causes]


def test_rank_causes_errors_first_then_configuration() -> None:
    causes = rank_causes(
        CLASSIC,
        engine="vllm",
        attention_backend=None,
        env={},
        extra_args=[],
        chat_template_kwargs=None,
        kv_cache_dtype="fp8",
        method="dflash",
        drafter=MIXED_DRAFTER,
    )
    assert _ranked(causes) == [
        (1, "mask_token", "finding"),
        (2, "layer_ids", "finding"),
        (3, "attention_backend", "configuration"),
        (4, "model_runner", "configuration"),
        (5, "thinking_mode", "configuration"),
        (6, "kv_cache_quantization", "configuration"),
    ]
    assert causes[0].evidence == ["mask wrong"]
    assert causes[0].fix == "set dflash_config.mask_token_id to the id the drafter was trained with"
    assert causes[2].evidence == [
        "vLLM's DFlash drafter is run with --attention-backend flash_attn; "
        "this run used the engine default"
    ]


def test_rank_causes_with_a_clean_configuration() -> None:
    causes = rank_causes(
        CLASSIC,
        engine="vllm",
        attention_backend=None,
        env={"VLLM_USE_V2_MODEL_RUNNER": "1"},
        extra_args=["--attention-backend=flash_attn", "--kv-cache-dtype", "auto"],
        chat_template_kwargs={"enable_thinking": False},
        kv_cache_dtype=None,
        method="dflash",
        drafter=MIXED_DRAFTER,
    )
    assert _ranked(causes) == [(1, "mask_token", "finding"), (2, "layer_ids", "finding")]


def test_rank_causes_merges_one_cause_and_prefers_findings() -> None:
    findings = [
        Finding("num_target_layers", "error", "36 != 64"),
        Finding("target_layer_ids", "error", "ids wrong"),
        Finding("thinking", "warning", "non-thinking drafter, thinking on"),
        Finding("attention_backend", "warning", "SGLang replaced fa3 with triton"),
    ]
    causes = rank_causes(
        findings,
        engine="sglang",
        attention_backend="fa3",
        env=None,
        extra_args=None,
        chat_template_kwargs=None,
        kv_cache_dtype=None,
    )
    assert _ranked(causes) == [
        (1, "layer_ids", "finding"),
        (2, "attention_backend", "finding"),
        (3, "thinking_mode", "finding"),
    ]
    assert causes[0].checks == ["target_layer_ids", "num_target_layers"]
    assert causes[0].evidence == ["ids wrong", "36 != 64"]
    assert causes[1].fix == (
        "request an attention backend SGLang keeps on this GPU and KV cache dtype (see its log)"
    )


def test_rank_causes_for_mtp_on_sglang_has_no_drafter_suspicions() -> None:
    causes = rank_causes(
        [Finding("mtp", "ok", "1 layer")],
        engine="sglang",
        attention_backend=None,
        env={},
        extra_args=[],
        chat_template_kwargs={},
        kv_cache_dtype=None,
        method="NEXTN",
    )
    assert causes == []


@pytest.mark.parametrize(
    ("argv", "flag", "value"),
    [
        (["--attention-backend", "flash_attn"], "--attention-backend", "flash_attn"),
        (["--attention-backend=triton_attn"], "--attention-backend", "triton_attn"),
        (["--attention-backend", "a", "--attention-backend=b"], "--attention-backend", "b"),
        (["--kv-cache-dtype"], "--kv-cache-dtype", None),
        ([], "--x", None),
        # as the engine's argparse reads them: abbreviations, vLLM's underscores, `=`
        (["--attention-b", "flash_attn"], "--attention-backend", "flash_attn"),
        (["--attention_backend", "flash_attn"], "--attention-backend", "flash_attn"),
        (["--kv-cache-d=fp8"], "--kv-cache-dtype", "fp8"),
        (
            ["--attention-b", "a", "--attention-backend", "b", "--attention-b=c"],
            "--attention-backend",
            "c",
        ),
        # ambiguous (--max-num-seqs, --max-num-batched-tokens ...): the engine reads no value
        (["--max-num", "4"], "--max-num-seqs", None),
        # a value that looks like the flag is a value, not a use
        (["--served-model-name", "x", "--attention-backend", "--x"], "--attention-backend", None),
    ],
)
def test_flag_value(argv: list[str], flag: str, value: str | None) -> None:
    """The doctor reads flags with the engine's reader (the one the launch uses)."""
    assert get_engine("vllm").flag_value(argv, flag) == value


# --- SGLang's silent changes: real server_args.py log lines -------------------------------------

FA3_FP8 = (
    "[2026-07-30 13:35:13] FlashAttention3 only supports fp8_e4m3 if using FP8; "
    "Setting attention backend to triton."
)
DEFAULT = (
    "[2025-11-11 20:29:05] WARNING server_args.py:1183: Attention backend not explicitly "
    "specified. Use flashinfer backend by default."
)
TRTLLM_PAGE = (
    "[2026-07-30 13:35:13] TensorRT-LLM MHA only supports page_size of 16, 32 or 64, "
    "changing page_size from 1 to 64."
)
FLASHMLA_PAGE = "FlashMLA only supports a page_size of 64, change page_size to 64."
DRAFTS = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
    "speculative_eagle_topk == 1"
)


@pytest.mark.parametrize(
    ("lines", "requested", "expected"),
    [
        ([FA3_FP8], {"attention_backend": "fa3"}, [("attention_backend", "fa3", "triton")]),
        ([DEFAULT], {"attention_backend": None}, []),
        ([DEFAULT], {}, []),
        ([FA3_FP8], {"attention_backend": "triton"}, []),
        ([TRTLLM_PAGE], {"page_size": 1}, [("page_size", 1, 64)]),
        ([FLASHMLA_PAGE], {"page_size": 64}, []),
        ([TRTLLM_PAGE], {"page_size": None}, []),
        (
            ["", FA3_FP8, TRTLLM_PAGE],
            {"attention_backend": "FA3", "page_size": 16},
            [("attention_backend", "FA3", "triton"), ("page_size", 16, 64)],
        ),
        (
            [DRAFTS],
            {"speculative_num_draft_tokens": 8},
            [("num_draft_tokens", 8, "speculative_num_steps + 1")],
        ),
    ],
)
def test_engine_silent_changes(
    lines: list[Any], requested: dict[str, Any], expected: list[tuple[str, Any, Any]]
) -> None:
    findings = engine_silent_changes(lines, RequestedSettings(**requested))
    assert [(f.check, f.details["requested"], f.details["chosen"]) for f in findings] == expected
    assert all(f.severity == "warning" for f in findings)


def test_silent_change_message() -> None:
    (finding,) = engine_silent_changes([FA3_FP8], RequestedSettings(attention_backend="fa3"))
    assert finding.message.startswith(
        "SGLang replaced the requested attention backend 'fa3' with 'triton' (log: "
    )


# --- a playbook run: RunSpec-like object in, findings and causes out -----------------------------

TARGET = {
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 36,
    "vocab_size": 151936,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
}
DRAFTER = {
    "architectures": ["DFlashDraftModel"],
    "block_size": 16,
    "hidden_size": 4096,
    "vocab_size": 151936,
    "num_hidden_layers": 5,
    "num_target_layers": 36,
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
}


def _run(**overrides: Any) -> RunSpec:
    data: dict[str, Any] = {
        "name": "qwen3-dflash",
        "engine": "vllm",
        "model": "Qwen/Qwen3-8B",
        "tensor_parallel": 1,
        "port": 8000,
        "gpu_memory_fraction": 0.9,
        "extra_args": ["--attention-backend", "flash_attn"],
        "env": {},
        "speculative": {
            "method": "dflash",
            "draft_model": "z-lab/Qwen3-8B-DFlash-b16",
            "num_draft_tokens": 15,
        },
        "workload": {"chat_template_kwargs": {"enable_thinking": False}},
    }
    return RunSpec.model_validate({**data, **overrides})


def model_files(
    model_id: str,
    *,
    found: bool = True,
    path: str | None = None,
    config: dict[str, Any] | None = None,
    tokenizer_config: dict[str, Any] | None = None,
    error: str | None = None,
) -> ModelFiles:
    return ModelFiles(
        id=model_id,
        path=path,
        found=found,
        config=config,
        tokenizer_config=tokenizer_config,
        generation_config=None,
        chat_template=None,
        error=error,
    )


def test_check_run_from_agent_results() -> None:
    models = {
        "Qwen/Qwen3-8B": model_files("Qwen/Qwen3-8B", path="/m/qwen3", config=TARGET),
        "z-lab/Qwen3-8B-DFlash-b16": model_files(
            "z-lab/Qwen3-8B-DFlash-b16", path="/m/d", config=DRAFTER
        ),
    }
    target, note = model_from_agent(models, "Qwen/Qwen3-8B", role="target")
    drafter, none = model_from_agent(models, "z-lab/Qwen3-8B-DFlash-b16", role="drafter")
    assert (note.check, note.severity) == ("model_files", "warning") and none is None
    host = HostProbe(
        gpus=[GpuInfo(0, "NVIDIA H100 80GB HBM3", 81559, 1, None)],
        driver_version="570.124.06",
        engines={"vllm": "0.33.0"},
        checked_ports={8000},
        free_ports={8000},
    )
    findings = check_run(_run(), target=target, drafter=drafter, host=host)
    assert problems(findings) == []
    assert [f.check for f in findings] == [  # 8 model, 2 launch-setting and 6 host checks
        "target_layer_ids",
        "num_target_layers",
        "mask_token_id",
        "vocab_size",
        "hidden_size",
        "block_size",
        "architecture",
        "thinking",
        "attention_backend",
        "model_runner",
        "driver",
        "gpu_count",
        "gpu_model",
        "gpu_memory",
        "engine_version",
        "port",
    ]
    broken = dict(
        DRAFTER, dflash_config={"mask_token_id": 100, "target_layer_ids": [1, 9, 17, 25, 35]}
    )
    bad = check_run(_run(), target=target, drafter=ModelConfig.from_json(broken), host=None)
    assert [(f.check, f.severity) for f in problems(bad)] == [
        ("target_layer_ids", "error"),
        ("mask_token_id", "error"),
    ]
    causes = causes_for_run(_run(env={"VLLM_USE_V2_MODEL_RUNNER": "1"}), bad)
    assert [c.cause for c in causes] == ["mask_token", "layer_ids"]


def test_thinking_is_suspected_only_where_a_chat_template_was_applied() -> None:
    """Plain completions apply no chat template, so thinking mode cannot have slowed the
    drafter (the real vLLM's random EAGLE-3 head collapsing under `make demo-real`)."""
    eagle3 = {"method": "eagle3", "draft_model": "/m/tiny-eagle3", "num_draft_tokens": 3}
    chat = _run(speculative=eagle3, workload={"api": "chat"})
    completions = _run(speculative=eagle3, workload={"api": "completions"})
    assert [c.cause for c in causes_for_run(chat, [])] == ["thinking_mode"]
    assert causes_for_run(completions, []) == []


def test_model_from_agent_missing_model() -> None:
    models = {
        "Qwen/Qwen3-8B": model_files(
            "Qwen/Qwen3-8B", found=False, error="not found (looked in cache /x)"
        )
    }
    model, finding = model_from_agent(models, "Qwen/Qwen3-8B", role="target")
    assert model is None
    assert (finding.check, finding.severity) == ("model_files", "error")
    assert finding.message.startswith(
        "the target 'Qwen/Qwen3-8B' was not found on the host: not found (looked in cache /x)."
    )
    model, finding = model_from_agent(models, "z-lab/other", role="drafter")
    assert model is None and finding.message.startswith(
        "the drafter 'z-lab/other' was not found on the host. Fix: download it"
    )


def test_model_from_agent_found_without_a_config() -> None:
    models = {"m": model_files("m", path="/m/x", error="config.json: not valid JSON")}
    model, finding = model_from_agent(models, "m", role="drafter")
    assert model is None
    assert (finding.check, finding.severity, finding.message) == (
        "model_files",
        "error",
        "the drafter 'm' at /m/x has no readable config.json: config.json: not valid JSON.",
    )


# --- launch settings that degrade a healthy vLLM DFlash drafter ----------------------------------

MIXING = dict(DRAFTER, layer_types=["sliding_attention"] * 4 + ["full_attention"])
FLASH = ["--attention-backend", "flash_attn"]
V2 = {"VLLM_USE_V2_MODEL_RUNNER": "1"}


@pytest.mark.parametrize(
    ("engine", "method", "drafter", "extra_args", "run_env", "env", "expected"),
    [
        # the demo's settings: both present
        (
            "vllm",
            "dflash",
            MIXING,
            FLASH,
            V2,
            None,
            [("attention_backend", "ok"), ("model_runner", "ok")],
        ),
        (
            "vllm",
            "dflash",
            MIXING,
            ["--attention-backend=FLASH_ATTN"],
            V2,
            None,
            [("attention_backend", "ok"), ("model_runner", "ok")],
        ),
        # the degraded run: neither set
        (
            "vllm",
            "dflash",
            MIXING,
            [],
            {},
            None,
            [("attention_backend", "warning"), ("model_runner", "error")],
        ),
        (
            "vllm",
            "dflash",
            MIXING,
            ["--attention-backend", "triton_attn"],
            {"VLLM_USE_V2_MODEL_RUNNER": "0"},
            None,
            [("attention_backend", "warning"), ("model_runner", "error")],
        ),
        # the host's env sets the runner (the env the engine will see is passed in)
        (
            "vllm",
            "dflash",
            MIXING,
            FLASH,
            {},
            V2,
            [("attention_backend", "ok"), ("model_runner", "ok")],
        ),
        (
            "vllm",
            "dflash",
            MIXING,
            [],
            {},
            {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN", **V2},
            [("attention_backend", "ok"), ("model_runner", "ok")],
        ),
        # a drafter with one kind of attention needs no V2 runner
        (
            "vllm",
            "dflash",
            DRAFTER,
            FLASH,
            {},
            None,
            [("attention_backend", "ok"), ("model_runner", "ok")],
        ),
        # not vLLM DFlash: neither check applies
        ("sglang", "dflash", MIXING, [], {}, None, []),
        ("vllm", "eagle3", MIXING, [], {}, None, []),
        ("vllm", "mtp", None, [], {}, None, []),
        ("vllm", "none", None, [], {}, None, []),
        # no drafter config read: the backend is still judged, the runner is not
        ("vllm", "dflash", None, [], {}, None, [("attention_backend", "warning")]),
    ],
)
def test_launch_settings(
    engine: str,
    method: str,
    drafter: dict[str, Any] | None,
    extra_args: list[str],
    run_env: dict[str, str],
    env: dict[str, str] | None,
    expected: list[tuple[str, str]],
) -> None:
    run = _run(
        engine=engine,
        extra_args=extra_args,
        env=run_env,
        speculative={"method": method, "draft_model": "d", "num_draft_tokens": 15},
    )
    findings = check_run(
        run, target=None, drafter=ModelConfig.from_json(drafter) if drafter else None, env=env
    )
    assert [(f.check, f.severity) for f in findings] == expected


def test_launch_setting_messages() -> None:
    run = _run(extra_args=[], env={})
    backend, runner = check_run(run, target=None, drafter=ModelConfig.from_json(MIXING, name="d"))
    assert backend.message.startswith(
        "vLLM DFlash runs with --attention-backend flash_attn, but this "
        "run leaves the attention backend to the engine's default"
    )
    assert backend.message.endswith(
        "Fix: set the run's `extra_args: [--attention-backend, "
        "flash_attn]` (or `doctor: warn` on the run if another "
        "backend is what you mean to measure)."
    )
    assert runner.message.startswith(
        "the drafter d mixes sliding-window and full attention layers (layer_types: 4 "
        "sliding_attention, 1 full_attention); vLLM serves such drafters correctly only with "
        "VLLM_USE_V2_MODEL_RUNNER=1 (the V1 model runner runs every draft layer with full "
        "attention), and here VLLM_USE_V2_MODEL_RUNNER is not set"
    )
    assert runner.message.endswith(
        'Fix: add `VLLM_USE_V2_MODEL_RUNNER: "1"` to the run\'s env (or '
        "the host's env in hosts.yaml)."
    )
    assert runner.details == {
        "mixes_sliding_and_full": True,
        "layer_types": MIXING["layer_types"],
        "found": None,
        "expected": "1",
    }
    causes = causes_for_run(run, [backend, runner], drafter=ModelConfig.from_json(MIXING))
    assert [(c.cause, c.source) for c in causes][:2] == [
        ("model_runner", "finding"),
        ("attention_backend", "finding"),
    ]
    # the host's env set the runner: no model_runner suspicion after the run either
    host_env = causes_for_run(run, [], drafter=ModelConfig.from_json(MIXING), env=V2)
    assert [c.cause for c in host_env] == ["attention_backend"]
    run_env_only = causes_for_run(run, [], drafter=ModelConfig.from_json(MIXING))
    assert [c.cause for c in run_env_only] == ["attention_backend", "model_runner"]


# --- the port the server will really use ----------------------------------------------------------


def _host(free: list[int], checked: list[int]) -> HostProbe:
    return HostProbe(
        gpus=[],
        driver_version="570.124.06",
        engines={"vllm": "0.33.0", "sglang": "0.5.23"},
        checked_ports=set(checked),
        free_ports=set(free),
    )


@pytest.mark.parametrize(
    ("engine", "run_port", "plan_port", "free", "checked", "severity", "port", "default"),
    [
        ("vllm", None, None, [8000], [8000], "ok", 8000, True),  # vLLM's default, free
        ("vllm", None, None, [], [8000], "error", 8000, True),  # taken by something else
        ("sglang", None, None, [], [30000], "error", 30000, True),  # SGLang's default, taken
        ("sglang", 38231, None, [38231], [38231], "ok", 38231, False),
        ("vllm", 38232, None, [], [38232], "error", 38232, False),
        ("vllm", None, 38232, [38232], [38232], "ok", 38232, False),  # the plan's port wins
        ("vllm", None, None, [8000], [30000], "warning", 8000, True),  # not the probed port
    ],
)
def test_port_checked_is_the_one_the_server_uses(
    engine: str,
    run_port: int | None,
    plan_port: int | None,
    free: list[int],
    checked: list[int],
    severity: str,
    port: int,
    default: bool,
) -> None:
    run = _run(engine=engine, port=run_port, speculative={"method": "none"})
    findings = check_run(run, target=None, drafter=None, host=_host(free, checked), port=plan_port)
    (finding,) = [f for f in findings if f.check == "port"]
    # a taken port's refusal names its holders: this host's probe saw none (the user cannot see
    # them); an unrefused port has no holders to name
    holders: dict[str, list[dict[str, object]]] = {"holders": []} if severity == "error" else {}
    assert (finding.severity, finding.details) == (
        severity,
        {"port": port, "default": default, **holders},
    )
    assert "orch picks" not in finding.message


def test_planned_port_matches_the_engine_adapter() -> None:
    """The doctor's port and the launch's port come from the same rule (a real playbook)."""
    from orchestrator.config import load_playbook
    from orchestrator.engines import engine_for

    book = load_playbook(Path(__file__).parents[2] / "playbooks" / "qwen36-27b-spec.yaml")
    got = [(run.engine, planned_port(run)) for run in book.runs]
    assert got == [("sglang", (30000, True)), ("vllm", (8000, True))]
    assert [engine_for(run).port(run) for run in book.runs] == [30000, 8000]


# --- a plain run and the demo playbook ------------------------------------------------------------


def test_a_plain_run_gets_an_ok_method_finding() -> None:
    run = _run(speculative={"method": "none"})
    findings = check_run(run, target=ModelConfig.from_json(TARGET), drafter=None)
    assert [(f.check, f.severity) for f in findings] == [("method", "ok")]


SIM_MODELS = Path(__file__).parents[2] / "orchestrator" / "sim" / "models"


def test_demo_playbook_gets_no_new_error() -> None:
    """playbooks/demo.yaml with the simulator's model directories: only the deliberately broken
    run has errors (mask id, layer ids); both vLLM DFlash runs set the launch settings."""
    from orchestrator.commands.doctor import load_local_model
    from orchestrator.config import load_playbook

    book = load_playbook(Path(__file__).parents[2] / "playbooks" / "demo.yaml")
    got = {}
    for run in book.runs:
        target = load_local_model(SIM_MODELS / run.model, option="model")
        draft = run.speculative.draft_model
        drafter = load_local_model(SIM_MODELS / draft, option="draft_model") if draft else None
        findings = check_run(run, target=target, drafter=drafter)
        got[run.name] = (
            {(f.check, f.severity) for f in problems(findings)},
            [
                (f.check, f.severity)
                for f in findings
                if f.check in ("attention_backend", "model_runner")
            ],
        )
    assert got == {
        "sglang-mtp": (set(), []),
        "vllm-dflash": (set(), [("attention_backend", "ok"), ("model_runner", "ok")]),
        "vllm-dflash-broken": (
            {("mask_token_id", "error"), ("target_layer_ids", "error")},
            [("attention_backend", "ok"), ("model_runner", "ok")],
        ),
    }
    demo_drafter = load_local_model(SIM_MODELS / "z-lab/Qwen3.6-27B-DFlash", option="draft_model")
    assert demo_drafter.mixes_sliding_and_full  # so the runner check really was exercised
