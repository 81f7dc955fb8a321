"""The engine objects: each one's facts (flags, endpoints, package, methods, parser, deltas,
classifier, stats interval, doctor facts), the registry, the spec errors' fields as data, and
the one flag reader shared by the launch, the doctor and the collapse causes."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from orchestrator.agent.client import probe_packages
from orchestrator.config import RunSpec, SpeculativeSpec
from orchestrator.config.methods import ENGINE_NAMES, SPECULATIVE_METHODS
from orchestrator.doctor import ModelConfig, causes_for_run, check_run
from orchestrator.engines import ENGINES, engine_for, engine_packages, get_engine
from orchestrator.engines.failures import NCCL_ERROR, OOM, PORT_IN_USE
from orchestrator.engines.sglang import SglangEngine
from orchestrator.engines.vllm import VllmEngine
from orchestrator.errors import SpecError
from orchestrator.metrics.prom import Scrape
from orchestrator.remote.wire import DEFAULT_PACKAGES

# name, class, display name, package, (port, health, models, metrics, server_info), ready line
FACTS = [
    (
        "vllm",
        VllmEngine,
        "vLLM",
        "vllm",
        (8000, "/health", "/v1/models", "/metrics", None),
        "Application startup complete.",
    ),
    (
        "sglang",
        SglangEngine,
        "SGLang",
        "sglang",
        (30000, "/health", "/v1/models", "/metrics", "/server_info"),
        "The server is fired up and ready to roll!",
    ),
]


@pytest.mark.parametrize(("name", "cls", "shown", "package", "endpoints", "ready"), FACTS)
def test_engine_facts(
    name: str, cls: type, shown: str, package: str, endpoints: tuple[Any, ...], ready: str
) -> None:
    engine = get_engine(name)
    assert type(engine) is cls and engine is ENGINES[name] and engine.name == name
    assert (engine.display_name, engine.package) == (shown, package)
    assert (
        engine.default_port,
        engine.health_path,
        engine.models_path,
        engine.metrics_path,
        engine.server_info_path,
    ) == endpoints
    assert engine.ready_lines == (ready,)
    assert engine.log_parser.engine == name
    assert engine.flags.engine == name
    assert engine.speculative_methods == SPECULATIVE_METHODS


def test_registry_is_keyed_by_the_names_the_playbook_accepts() -> None:
    assert tuple(ENGINES) == ENGINE_NAMES == get_args(RunSpec.model_fields["engine"].annotation)
    assert get_args(SpeculativeSpec.model_fields["method"].annotation) == SPECULATIVE_METHODS
    assert engine_packages() == {"vllm": "vllm", "sglang": "sglang"}
    assert get_engine(" VLLM") is ENGINES["vllm"]


def test_a_probe_asks_each_engines_package_and_the_agents_default_is_the_same() -> None:
    """The agent cannot import the registry (standard library only), so its default is a copy."""
    assert (
        probe_packages()
        == ("vllm", "sglang", "torch", "transformers", "aiohttp")
        == DEFAULT_PACKAGES
    )


def test_unknown_engine_is_a_spec_error_on_the_engine_field() -> None:
    with pytest.raises(SpecError) as info:
        get_engine("trtllm", run="r")
    assert (str(info.value), info.value.field) == (
        "run 'r': engine 'trtllm' is not supported (known: sglang, vllm)",
        ("engine",),
    )


# name, flags only this engine has, flags it lacks
FLAGS = [
    (
        "vllm",
        ["--speculative-config", "--gpu-memory-utilization", "--max-num-seqs"],
        ["--decode-log-interval", "--page-size"],
    ),
    (
        "sglang",
        ["--decode-log-interval", "--page-size", "--speculative-algorithm"],
        ["--speculative-config", "--gpu-memory-utilization"],
    ),
]


@pytest.mark.parametrize(("name", "has", "lacks"), FLAGS)
def test_flag_tables(name: str, has: list[str], lacks: list[str]) -> None:
    engine = get_engine(name)
    assert all(engine.flags.get(f) is not None for f in [*has, "--attention-backend", "--host"])
    assert [f for f in lacks if engine.flags.get(f) is not None] == []
    assert [engine.flag_value([f, "v"], f) for f in lacks] == [None] * len(lacks)


@pytest.mark.parametrize(
    ("name", "args", "option", "value"),
    [
        ("vllm", ["--attention-b", "flash_attn"], "--attention-backend", "flash_attn"),
        ("vllm", ["--attention_backend=flash_attn"], "--attention-backend", "flash_attn"),
        ("sglang", ["--attention-b", "triton"], "--attention-backend", "triton"),
        (
            "sglang",
            ["--attention_backend", "triton"],
            "--attention-backend",
            None,
        ),  # no flexible spelling
        ("sglang", ["--page", "64"], "--page-size", "64"),
        ("vllm", ["-tp", "2", "--tensor-parallel-size", "4"], "--tensor-parallel-size", "4"),
    ],
)
def test_the_flag_reader(name: str, args: list[str], option: str, value: str | None) -> None:
    assert get_engine(name).flag_value(args, option) == value


# name, env, extra argv, interval in effect
INTERVALS = [
    ("vllm", {}, [], "10"),
    ("vllm", {"VLLM_LOG_STATS_INTERVAL": "2"}, [], "2"),
    ("sglang", {}, [], "40"),
    ("sglang", {"VLLM_LOG_STATS_INTERVAL": "2"}, ["--decode-log-int", "7"], "7"),
]


@pytest.mark.parametrize(("name", "env", "argv", "interval"), INTERVALS)
def test_stats_interval(name: str, env: dict[str, str], argv: list[str], interval: str) -> None:
    engine = get_engine(name)
    full = engine.argv(RunSpec(name="r", engine=name, model="m")) + argv  # type: ignore[arg-type]
    assert engine.stats_interval_in_effect(env=env, argv=full) == interval


@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_failure_classifier(name: str) -> None:
    engine = get_engine(name)
    cases = [
        (["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"], OOM),
        (["OSError: [Errno 98] Address already in use"], PORT_IN_USE),
        (["NCCL error in: ...", "CUDA out of memory"], OOM),  # the most specific first
        (["RuntimeError: NCCL error: unhandled system error"], NCCL_ERROR),
        (["all fine"], None),
    ]
    assert [engine.classify_failure(lines) for lines, _ in cases] == [c for _, c in cases]
    assert engine.describe_failure(OOM)[0] == "CUDA out of memory"


VLLM_SCRAPES = (
    "vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_accepted_tokens_total 20\n",
    "vllm:spec_decode_num_drafts_total 110\nvllm:spec_decode_num_accepted_tokens_total 320\n",
)
SGLANG_SCRAPES = (
    "sglang:spec_verify_calls_total 10\nsglang:generation_tokens_total 30\n",
    "sglang:spec_verify_calls_total 110\nsglang:generation_tokens_total 380\n",
)


@pytest.mark.parametrize(
    ("name", "scrapes", "length"), [("vllm", VLLM_SCRAPES, 4.0), ("sglang", SGLANG_SCRAPES, 3.5)]
)
def test_spec_delta(name: str, scrapes: tuple[str, str], length: float) -> None:
    before, after = (Scrape.parse(text) for text in scrapes)
    delta = get_engine(name).spec_delta(before, after)
    assert (delta.acceptance_length, delta.drafts, delta.source) == (length, 100.0, "counter")
    other = "sglang" if name == "vllm" else "vllm"
    assert get_engine(other).spec_delta(before, after).source == "none"


def test_doctor_facts() -> None:
    vllm, sglang = get_engine("vllm").doctor, get_engine("sglang").doctor
    assert (vllm.layer_shift, sglang.layer_shift) == (1, 0)
    assert (vllm.default_memory_fraction, sglang.default_memory_fraction) == (0.9, 0.88)
    assert vllm.method_support["dflash"].min_version == "0.20.0"
    assert sglang.method_support["mtp"].confirmed_version == "0.5.23"
    # the real vLLM 0.32.0 CPU build served these (tests/real_engine/); the rest are listed
    confirmed = {m: s.confirmed_version for m, s in vllm.method_support.items()}
    assert {m for m, v in confirmed.items() if v == "0.32.0"} == {"ngram", "draft_model", "eagle3"}
    assert confirmed["eagle"] == confirmed["mtp"] == "0.33.0"
    assert "suffix" in vllm.method_support and "suffix" not in sglang.method_support
    assert vllm.drafter_architectures["dflash"] == {"DFlashDraftModel", "DFlash2DraftModel"}
    assert sglang.drafter_architectures["dflash"] == {"DFlashDraftModel"}


# --- spec errors carry their field as data -------------------------------------------------------

FIELDS = [
    (
        "vllm",
        {"speculative": {"method": "mtp", "num_draft_tokens": 2, "draft_model": "d"}},
        ("speculative", "draft_model"),
    ),
    (
        "vllm",
        {"speculative": {"method": "eagle", "num_draft_tokens": 3}},
        ("speculative", "method"),
    ),
    (
        "vllm",
        {
            "speculative": {
                "method": "eagle",
                "draft_model": "d",
                "num_draft_tokens": 3,
                "prompt_lookup_max": 4,
            }
        },
        ("speculative", "prompt_lookup_max"),
    ),
    (
        "vllm",
        {
            "speculative": {
                "method": "ngram",
                "num_draft_tokens": 3,
                "options": {"num_speculative_tokens": 4},
            }
        },
        ("speculative", "options", "num_speculative_tokens"),
    ),
    ("vllm", {"speculative": {"method": "mtp"}}, ("speculative", "num_draft_tokens")),
    (
        "sglang",
        {"speculative": {"method": "dflash", "num_draft_tokens": 4}},
        ("speculative", "draft_model"),
    ),
    (
        "sglang",
        {"speculative": {"method": "ngram", "num_draft_tokens": 4, "eagle_topk": 2}},
        ("speculative", "eagle_topk"),
    ),
    ("sglang", {"extra_args": ["--page-size", "16", "--host", "0.0.0.0"]}, ("extra_args", 2)),
    ("vllm", {"extra_args": ["--max-num-seqs", "4", "--por", "1"]}, ("extra_args", 2)),
]


@pytest.mark.parametrize(("name", "fields", "field"), FIELDS)
def test_spec_errors_name_their_field(
    name: str, fields: dict[str, Any], field: tuple[str | int, ...]
) -> None:
    run = RunSpec.model_validate({"name": "r", "engine": name, "model": "m", **fields})
    with pytest.raises(SpecError) as info:
        engine_for(run).validate(run)
    assert info.value.field == field
    assert info.value.dotted_field == ".".join(map(str, field))


# --- one flag reader: the launch, the doctor and the collapse causes agree -----------------------

MIXING = {
    "architectures": ["DFlashDraftModel"],
    "block_size": 16,
    "hidden_size": 4096,
    "vocab_size": 151936,
    "num_hidden_layers": 5,
    "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
}


def _dflash(extra_args: list[str]) -> RunSpec:
    return RunSpec.model_validate(
        {
            "name": "d",
            "engine": "vllm",
            "model": "Qwen/Qwen3-8B",
            "extra_args": extra_args,
            "env": {"VLLM_USE_V2_MODEL_RUNNER": "1"},
            "speculative": {"method": "dflash", "draft_model": "z/d", "num_draft_tokens": 15},
            "workload": {"chat_template_kwargs": {"enable_thinking": False}},
        }
    )


@pytest.mark.parametrize(
    ("extra_args", "backend", "severity", "suspected"),
    [
        (["--attention-b", "flash_attn"], "flash_attn", "ok", False),
        (["--attention_backend=flash_attn"], "flash_attn", "ok", False),
        (["--attention-backend", "flash_attn"], "flash_attn", "ok", False),
        (["--attention-b", "triton_attn"], "triton_attn", "warning", True),
        ([], None, "warning", True),
    ],
)
def test_an_abbreviated_flag_means_the_same_everywhere(
    extra_args: list[str], backend: str | None, severity: str, suspected: bool
) -> None:
    run = _dflash(extra_args)
    engine = engine_for(run)
    argv = engine.argv(run)  # the launch: accepted, passed as written, read as the full flag
    assert argv[len(argv) - len(extra_args) :] == extra_args
    assert engine.flag_value(argv, "--attention-backend") == backend
    drafter = ModelConfig.from_json(MIXING, name="d")
    (finding,) = [
        f for f in check_run(run, target=None, drafter=drafter) if f.check == "attention_backend"
    ]  # the doctor
    assert (finding.severity, finding.details["found"]) == (severity, backend)
    causes = [c.cause for c in causes_for_run(run, [], drafter=drafter)]  # after a collapse
    assert ("attention_backend" in causes) is suspected
