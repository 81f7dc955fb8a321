"""Engine adapters: the exact argv for every method on every engine, the environment with secrets
masked, the refusals (exact messages), and dry-run planning over a real playbook and inventory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import HostConfig, RunSpec, SpeculativeSpec, load_inventory, load_playbook
from orchestrator.engines import ENGINES, engine_for
from orchestrator.engines.plan import plan_launches, to_json
from orchestrator.errors import ConfigError, SpecError

MODEL = "Qwen/Qwen3.6-27B"
DFLASH = "z-lab/Qwen3.6-27B-DFlash"
EAGLE3 = "RedHatAI/Qwen3-8B-speculator.eagle3"


def run(engine: str, speculative: dict[str, Any] | None = None, **fields: Any) -> RunSpec:
    data: dict[str, Any] = {"name": "r1", "engine": engine, "model": MODEL, "tensor_parallel": 2}
    if speculative is not None:
        data["speculative"] = speculative
    data.update(fields)
    return RunSpec.model_validate(data)


VLLM_BASE = [
    "vllm",
    "serve",
    MODEL,
    "--host",
    "127.0.0.1",
    "--port",
    "8000",
    "--tensor-parallel-size",
    "2",
    "--served-model-name",
    MODEL,
]
SGLANG_BASE = [
    "python",
    "-m",
    "sglang.launch_server",
    "--model-path",
    MODEL,
    "--host",
    "127.0.0.1",
    "--port",
    "30000",
    "--tp-size",
    "2",
    "--enable-metrics",
    "--decode-log-interval",
    "40",
    "--served-model-name",
    MODEL,
]

VLLM_CASES = [
    ("none", {"method": "none"}, []),
    (
        "dflash",
        {"method": "dflash", "draft_model": DFLASH, "num_draft_tokens": 15},
        [
            "--speculative-config",
            '{"method":"dflash","model":"z-lab/Qwen3.6-27B-DFlash","num_speculative_tokens":15}',
        ],
    ),
    (
        "mtp",
        {"method": "mtp", "num_draft_tokens": 3},
        ["--speculative-config", '{"method":"mtp","num_speculative_tokens":3}'],
    ),
    (
        "eagle",
        {"method": "eagle", "draft_model": "yuhuili/EAGLE-Qwen", "num_draft_tokens": 5},
        [
            "--speculative-config",
            '{"method":"eagle","model":"yuhuili/EAGLE-Qwen","num_speculative_tokens":5}',
        ],
    ),
    (
        "eagle3+draft_tp",
        {
            "method": "eagle3",
            "draft_model": EAGLE3,
            "num_draft_tokens": 3,
            "draft_tensor_parallel": 1,
        },
        [
            "--speculative-config",
            '{"method":"eagle3","model":"RedHatAI/Qwen3-8B-speculator.eagle3",'
            '"num_speculative_tokens":3,"draft_tensor_parallel_size":1}',
        ],
    ),
    (
        "ngram",
        {"method": "ngram", "num_draft_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5},
        [
            "--speculative-config",
            '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":2,"prompt_lookup_max":5}',
        ],
    ),
    (
        "dflash+options",
        {
            "method": "dflash",
            "draft_model": DFLASH,
            "num_draft_tokens": 15,
            "options": {"disable_padded_drafter_batch": True},
        },
        [
            "--speculative-config",
            '{"method":"dflash","model":"z-lab/Qwen3.6-27B-DFlash",'
            '"num_speculative_tokens":15,"disable_padded_drafter_batch":true}',
        ],
    ),
    (
        "draft_model",  # as the real vLLM 0.32 CPU build ran it (tests/real_engine/)
        {"method": "draft_model", "draft_model": "/srv/lab/tiny-draft", "num_draft_tokens": 3},
        [
            "--speculative-config",
            '{"method":"draft_model","model":"/srv/lab/tiny-draft","num_speculative_tokens":3}',
        ],
    ),
]

SGLANG_CASES = [
    ("none", {"method": "none"}, []),
    (
        "mtp",
        {"method": "mtp", "num_draft_tokens": 3},
        [
            "--speculative-algorithm",
            "NEXTN",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "4",
        ],
    ),
    (
        "eagle topk",
        {
            "method": "eagle",
            "draft_model": "lmsys/EAGLE-Qwen",
            "num_draft_tokens": 5,
            "eagle_topk": 4,
        },
        [
            "--speculative-algorithm",
            "EAGLE",
            "--speculative-draft-model-path",
            "lmsys/EAGLE-Qwen",
            "--speculative-num-steps",
            "5",
            "--speculative-eagle-topk",
            "4",
            "--speculative-num-draft-tokens",
            "6",
        ],
    ),
    (
        "eagle3",
        {"method": "eagle3", "draft_model": EAGLE3, "num_draft_tokens": 3},
        [
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            EAGLE3,
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "4",
        ],
    ),
    (
        "draft_model",  # SGLang's STANDALONE runs a small model on its EAGLE worker
        {"method": "draft_model", "draft_model": "Qwen/Qwen3-0.6B", "num_draft_tokens": 3},
        [
            "--speculative-algorithm",
            "STANDALONE",
            "--speculative-draft-model-path",
            "Qwen/Qwen3-0.6B",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "4",
        ],
    ),
    (
        "dflash",
        {"method": "dflash", "draft_model": DFLASH, "num_draft_tokens": 15},
        [
            "--speculative-algorithm",
            "DFLASH",
            "--speculative-draft-model-path",
            DFLASH,
            "--speculative-num-draft-tokens",
            "16",
        ],
    ),
    (
        "ngram",
        {
            "method": "ngram",
            "num_draft_tokens": 4,
            "prompt_lookup_min": 2,
            "prompt_lookup_max": 5,
            "options": {
                "ngram_capacity": 1000000,
                "speculative_ngram_match_type": "BFS",
                "flag_on": True,
                "flag_off": False,
            },
        },
        [
            "--speculative-algorithm",
            "NGRAM",
            "--speculative-num-draft-tokens",
            "5",
            "--speculative-ngram-min-match-window-size",
            "2",
            "--speculative-ngram-max-match-window-size",
            "5",
            "--speculative-ngram-capacity",
            "1000000",
            "--speculative-ngram-match-type",
            "BFS",
            "--speculative-flag-on",
        ],
    ),
]


@pytest.mark.parametrize(("label", "spec", "expected"), VLLM_CASES, ids=[c[0] for c in VLLM_CASES])
def test_vllm_argv(label: str, spec: dict[str, Any], expected: list[str]) -> None:
    assert ENGINES["vllm"].argv(run("vllm", spec)) == VLLM_BASE + expected


@pytest.mark.parametrize(
    ("label", "spec", "expected"), SGLANG_CASES, ids=[c[0] for c in SGLANG_CASES]
)
def test_sglang_argv(label: str, spec: dict[str, Any], expected: list[str]) -> None:
    assert ENGINES["sglang"].argv(run("sglang", spec)) == SGLANG_BASE + expected


def test_issue_examples_with_common_options_and_extra_args() -> None:
    vllm = run(
        "vllm",
        {"method": "dflash", "draft_model": DFLASH, "num_draft_tokens": 15},
        max_model_len=8192,
        gpu_memory_fraction=0.92,
        port=8100,
        served_name="qwen",
        extra_args=["--attention-backend", "flash_attn", "--max-num-seqs", 8],
    )
    assert ENGINES["vllm"].argv(vllm) == [
        "vllm",
        "serve",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        "8100",
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "8192",
        "--gpu-memory-utilization",
        "0.92",
        "--served-model-name",
        "qwen",
        "--speculative-config",
        '{"method":"dflash","model":"z-lab/Qwen3.6-27B-DFlash","num_speculative_tokens":15}',
        "--attention-backend",
        "flash_attn",
        "--max-num-seqs",
        "8",
    ]
    sglang = run(
        "sglang",
        {"method": "mtp", "num_draft_tokens": 3},
        max_model_len=8192,
        gpu_memory_fraction=0.88,
        extra_args=["--attention-backend", "triton"],
    )
    assert ENGINES["sglang"].argv(sglang) == [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--tp-size",
        "2",
        "--mem-fraction-static",
        "0.88",
        "--context-length",
        "8192",
        "--enable-metrics",
        "--decode-log-interval",
        "40",
        "--served-model-name",
        MODEL,
        "--speculative-algorithm",
        "NEXTN",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--attention-backend",
        "triton",
    ]
    assert ENGINES["vllm"].argv(vllm, port=9000)[5:7] == ["--port", "9000"]


def test_engine_facts() -> None:
    vllm, sglang = ENGINES["vllm"], ENGINES["sglang"]
    assert (
        vllm.default_port,
        vllm.health_path,
        vllm.models_path,
        vllm.metrics_path,
        vllm.server_info_path,
        vllm.log_parser.engine,
    ) == (8000, "/health", "/v1/models", "/metrics", None, "vllm")
    assert (sglang.default_port, sglang.server_info_path, sglang.log_parser.engine) == (
        30000,
        "/server_info",
        "sglang",
    )
    assert vllm.ready_lines == ("Application startup complete.",)
    assert sglang.ready_lines == ("The server is fired up and ready to roll!",)
    assert vllm.gpus_needed(run("vllm")) == 2


def bad(engine: str, speculative: Any = None, **fields: Any) -> str:
    spec = run(engine, speculative if isinstance(speculative, dict) else None, **fields)
    if isinstance(speculative, SpeculativeSpec):  # bypasses pydantic's own checks
        spec = spec.model_copy(update={"speculative": speculative})
    with pytest.raises(SpecError) as info:
        engine_for(spec).argv(spec)
    assert info.value.run == "r1"
    return str(info.value)


REFUSALS = [
    (
        "sglang",
        {"method": "dflash", "num_draft_tokens": 15},
        {},
        "run 'r1': DFLASH on SGLang needs a draft model path: set speculative.draft_model",
    ),
    (
        "vllm",
        {"method": "dflash", "num_draft_tokens": 15},
        {},
        "run 'r1': speculative method 'dflash' needs speculative.draft_model (the drafter's model id or path)",
    ),
    (
        "vllm",
        {"method": "eagle3", "num_draft_tokens": 3},
        {},
        "run 'r1': speculative method 'eagle3' needs speculative.draft_model (the drafter's model id or path)",
    ),
    (
        "vllm",
        {"method": "mtp"},
        {},
        "run 'r1': speculative.num_draft_tokens must be a positive integer for method 'mtp' on vllm, got None",
    ),
    (
        "vllm",
        SpeculativeSpec.model_construct(
            method="dflash", draft_model=DFLASH, num_draft_tokens=0, options={}
        ),
        {},
        "run 'r1': speculative.num_draft_tokens must be a positive integer for method 'dflash' on vllm, got 0",
    ),
    (
        "vllm",
        {"method": "mtp", "num_draft_tokens": 3, "draft_model": DFLASH},
        {},
        "run 'r1': speculative method 'mtp' on vllm uses the target model's own MTP head: remove "
        "speculative.draft_model",
    ),
    (
        "sglang",
        {"method": "ngram", "num_draft_tokens": 3, "draft_model": DFLASH},
        {},
        "run 'r1': speculative method 'ngram' drafts from the prompt: remove speculative.draft_model",
    ),
    (
        "vllm",
        {"method": "mtp", "num_draft_tokens": 3, "prompt_lookup_min": 2},
        {},
        "run 'r1': prompt_lookup_min/max apply to method 'ngram', not 'mtp'",
    ),
    (
        "vllm",
        {"method": "eagle", "draft_model": "e", "num_draft_tokens": 3, "eagle_topk": 2},
        {},
        "run 'r1': speculative.eagle_topk is an SGLang setting; vllm drafts one chain",
    ),
    (
        "sglang",
        {"method": "dflash", "draft_model": DFLASH, "num_draft_tokens": 15, "eagle_topk": 2},
        {},
        "run 'r1': speculative.eagle_topk (2) must be at least 1 and applies to methods mtp, eagle and eagle3 only",
    ),
    (
        "sglang",
        {
            "method": "eagle3",
            "draft_model": EAGLE3,
            "num_draft_tokens": 3,
            "draft_tensor_parallel": 1,
        },
        {},
        "run 'r1': speculative.draft_tensor_parallel is a vLLM setting; SGLang runs the drafter with the "
        "target's tp-size",
    ),
    (
        "vllm",
        {"method": "mtp", "num_draft_tokens": 3, "draft_tensor_parallel": 1},
        {},
        "run 'r1': speculative.draft_tensor_parallel (1) needs a positive value and a separate draft model "
        "(dflash, eagle, eagle3)",
    ),
    (
        "vllm",
        {"method": "none", "draft_model": DFLASH},
        {},
        "run 'r1': speculative.draft_model is set but speculative.method is 'none'",
    ),
    (
        "vllm",
        {"method": "mtp", "num_draft_tokens": 3, "options": {"num_speculative_tokens": 4}},
        {},
        "run 'r1': speculative.options.num_speculative_tokens is set by orch from speculative.num_draft_tokens",
    ),
    (
        "sglang",
        {"method": "mtp", "num_draft_tokens": 3, "options": {"num_steps": 2}},
        {},
        "run 'r1': speculative.options.num_steps is set by orch from speculative.num_draft_tokens",
    ),
    (
        "vllm",
        None,
        {"extra_args": ["--host", "0.0.0.0"]},
        "run 'r1': extra_args sets --host 0.0.0.0: engines always bind 127.0.0.1 (orch reaches them "
        "through the host's loopback)",
    ),
    (
        "sglang",
        None,
        {"extra_args": ["--host=::"]},
        "run 'r1': extra_args sets --host ::: engines always bind 127.0.0.1 (orch reaches them "
        "through the host's loopback)",
    ),
    (
        "vllm",
        None,
        {"extra_args": ["--port", "9000"]},
        "run 'r1': extra_args sets --port, which orch sets from `port`",
    ),
    (
        "vllm",
        None,
        {"extra_args": ["-tp", "4"]},
        "run 'r1': extra_args sets -tp, which orch sets from `tensor_parallel`",
    ),
    (
        "sglang",
        None,
        {"extra_args": ["--tp", "4"]},
        "run 'r1': extra_args sets --tp (read as --tp-size), which orch sets from `tensor_parallel`",
    ),
    (
        "sglang",
        None,
        {"extra_args": ["--tensor-parallel-size", "4"]},
        "run 'r1': extra_args sets --tensor-parallel-size, which orch sets from `tensor_parallel`",
    ),
    (
        "vllm",
        None,
        {"extra_args": ["--served_model_name", "x"]},
        "run 'r1': extra_args sets --served_model_name, which orch sets from `served_name`",
    ),
    (
        "vllm",
        {"method": "mtp", "num_draft_tokens": 3},
        {"extra_args": ["--speculative-config.method", "eagle"]},
        "run 'r1': extra_args sets --speculative-config.method, which orch sets from `speculative`",
    ),
    (
        "sglang",
        {"method": "mtp", "num_draft_tokens": 3},
        {"extra_args": ["--speculative-num-steps=5"]},
        "run 'r1': extra_args sets --speculative-num-steps, which orch sets from `speculative.num_draft_tokens`",
    ),
    (
        "vllm",
        None,
        {"extra_args": ["--disable-log-stats"]},
        "run 'r1': extra_args has --disable-log-stats: it turns off the stats lines orch measures "
        "speculative decoding from",
    ),
]


@pytest.mark.parametrize(("engine", "speculative", "fields", "message"), REFUSALS)
def test_refusals(engine: str, speculative: Any, fields: dict[str, Any], message: str) -> None:
    assert bad(engine, speculative, **fields) == message


LOOPBACK_ONLY = "engines always bind 127.0.0.1 (orch reaches them through the host's loopback)"
MTP_JSON = '{"method":"mtp","num_speculative_tokens":3}'

# argparse reads any unique prefix of a flag as that flag (both engines keep allow_abbrev), so
# every check applies to what the engine will read, not to how it was spelled
ABBREVIATED = [
    (
        "vllm",
        None,
        ["--hos", "0.0.0.0"],
        0,
        f"extra_args sets --hos (read as --host) 0.0.0.0: {LOOPBACK_ONLY}",
    ),
    (
        "vllm",
        None,
        ["--max-num-seqs", "4", "--hos=0.0.0.0"],
        2,
        f"extra_args sets --hos (read as --host) 0.0.0.0: {LOOPBACK_ONLY}",
    ),
    (
        "sglang",
        None,
        ["--ho", "::"],
        0,
        f"extra_args sets --ho (read as --host) ::: {LOOPBACK_ONLY}",
    ),
    (
        "vllm",
        None,
        ["--por", "9999"],
        0,
        "extra_args sets --por (read as --port), which orch sets from `port`",
    ),
    (
        "sglang",
        None,
        ["--po", "9999"],
        0,
        "extra_args sets --po (read as --port), which orch sets from `port`",
    ),
    (
        "vllm",
        None,
        ["-t", "4"],
        0,
        "extra_args sets -t (read as --tensor-parallel-size), which orch sets from `tensor_parallel`",
    ),
    (
        "vllm",
        None,
        ["--tensor_parallel", "4"],
        0,
        "extra_args sets --tensor_parallel (read as --tensor-parallel-size), which orch sets from `tensor_parallel`",
    ),
    ("sglang", None, ["--mem", "0.5"], 0, None),  # not emitted without gpu_memory_fraction: allowed
    (
        "sglang",
        None,
        ["--served", "x"],
        0,
        "extra_args sets --served (read as --served-model-name), which orch sets from `served_name`",
    ),
    (
        "vllm",
        None,
        ["--disable-log-s"],
        0,
        "extra_args has --disable-log-s (read as --disable-log-stats): it turns off the stats lines orch "
        "measures speculative decoding from",
    ),
    # ambiguous, and one of the flags it may stand for is orch's: refused, whatever argparse makes of it
    (
        "vllm",
        None,
        ["--po", "9999"],
        0,
        "extra_args has --po, an abbreviation of --port, --pooler-config: orch cannot tell which one vllm will read",
    ),
    (
        "vllm",
        None,
        ["--hf", "hf_abc"],
        0,
        "extra_args has --hf, an abbreviation of --hf-token, --hf-config-path, --hf-overrides: orch cannot tell "
        "which one vllm will read",
    ),
    (
        "sglang",
        None,
        ["--en"],
        0,
        "extra_args has --en, an abbreviation of --enable-metrics, 25 other flags: orch cannot tell which one "
        "sglang will read",
    ),
    (
        "vllm",
        None,
        ["--mode", "x"],
        0,
        "extra_args has --mode, an abbreviation of --model, --model-impl, --model-loader-extra-config: orch "
        "cannot tell which one vllm will read",
    ),
    # ambiguous among flags orch neither sets nor checks, or unknown: the engine's own business
    ("vllm", None, ["--en"], 0, None),
    ("vllm", None, ["--tp", "2"], 0, None),  # not a vLLM flag: vLLM exits 2, orch reports the death
    ("vllm", None, ["--hos", "127.0.0.1"], 0, None),
]


@pytest.mark.parametrize(("engine", "speculative", "extra_args", "at", "message"), ABBREVIATED)
def test_abbreviations_are_read_as_the_engine_reads_them(
    engine: str, speculative: Any, extra_args: list[str], at: int, message: str | None
) -> None:
    spec = run(engine, speculative, extra_args=extra_args)
    if message is None:
        assert engine_for(spec).argv(spec)[-len(extra_args) :] == extra_args
        return
    with pytest.raises(SpecError) as info:
        engine_for(spec).argv(spec)
    assert info.value.message == message
    assert info.value.field == ("extra_args", at)  # the playbook line of the offending item


# flags orch owns even in a run that does not emit them
OWNED = [
    (
        "vllm",
        None,
        ["--model", "other/model"],
        "extra_args sets --model, which orch sets from `model`",
    ),
    (
        "vllm",
        None,
        ["--model=other/model"],
        "extra_args sets --model, which orch sets from `model`",
    ),
    (
        "vllm",
        None,
        ["--speculative-config", MTP_JSON],
        "extra_args sets --speculative-config, which orch sets from `speculative`",
    ),
    (
        "vllm",
        {"method": "none"},
        ["-sc", MTP_JSON],
        "extra_args sets -sc, which orch sets from `speculative`",
    ),
    (
        "vllm",
        None,
        ["--speculative_config.method=mtp"],
        "extra_args sets --speculative_config.method, which orch sets from `speculative`",
    ),
    (
        "vllm",
        None,
        ["--speculative-c", MTP_JSON],
        "extra_args sets --speculative-c (read as --speculative-config), which orch sets from `speculative`",
    ),
    (
        "sglang",
        None,
        ["--speculative-algorithm", "EAGLE"],
        "extra_args sets --speculative-algorithm, which orch sets from `speculative.method`",
    ),
    (
        "sglang",
        {"method": "none"},
        ["--speculative-algo", "NEXTN"],
        "extra_args sets --speculative-algo (read as --speculative-algorithm), which orch sets from "
        "`speculative.method`",
    ),
]


@pytest.mark.parametrize(("engine", "speculative", "extra_args", "message"), OWNED)
def test_flags_orch_always_owns(
    engine: str, speculative: Any, extra_args: list[str], message: str
) -> None:
    spec = run(engine, speculative, extra_args=extra_args)
    with pytest.raises(SpecError) as info:
        engine_for(spec).argv(spec)
    assert info.value.message == message
    assert "instead of passing" in (info.value.hint or "")


def test_ambiguous_abbreviation_hint() -> None:
    spec = run("vllm", extra_args=["--po", "9999"])
    with pytest.raises(SpecError) as info:
        engine_for(spec).argv(spec)
    assert info.value.hint == "write the flag in full (--port cannot be abbreviated)"


def test_allowed_repeats() -> None:
    """--host 127.0.0.1 is harmless; a flag orch does not emit for this run is the user's to set."""
    ok = run("vllm", extra_args=["--host", "127.0.0.1", "--max-model-len", "4096"])
    assert ENGINES["vllm"].argv(ok)[-4:] == ["--host", "127.0.0.1", "--max-model-len", "4096"]


def test_unknown_engine() -> None:
    spec = RunSpec.model_construct(name="r9", engine="trtllm", model=MODEL)
    with pytest.raises(
        SpecError, match=r"engine 'trtllm' is not supported \(known: sglang, vllm\)"
    ):
        engine_for(spec)


def test_env_merges_host_then_run_and_masks_secrets() -> None:
    host = HostConfig(
        name="h1", env={"HF_TOKEN": "${MY_HF}", "HF_HOME": "/data/hf", "SHARED": "host"}
    )
    spec = run(
        "vllm",
        env={"SHARED": "run", "VLLM_LOG_STATS_INTERVAL": "2", "X": "url?k=${MY_KEY}"},
        extra_args=["--api-key", "sk-123"],
    )
    environ = {"MY_HF": "hf_abc", "MY_KEY": "zz9"}
    adapter = ENGINES["vllm"]
    env = adapter.env(spec, host, environ=environ)
    assert env == {
        "HF_TOKEN": "hf_abc",
        "HF_HOME": "/data/hf",
        "SHARED": "run",
        "VLLM_LOG_STATS_INTERVAL": "2",
        "X": "url?k=zz9",
        "VLLM_API_KEY": "sk-123",  # vLLM's --api-key goes in its environment, not in argv
    }
    secrets = adapter.secrets(spec, host, environ=environ)
    assert secrets == {"hf_abc", "zz9", "sk-123"}
    # a value holding a ${VAR} is masked whole: "zz9" is too short to be found in text by itself
    assert adapter.masked_env(env, secrets) == {
        "HF_TOKEN": "***",
        "HF_HOME": "/data/hf",
        "SHARED": "run",
        "VLLM_LOG_STATS_INTERVAL": "2",
        "X": "***",
        "VLLM_API_KEY": "***",
    }
    argv = adapter.argv(spec)
    assert "--api-key" not in argv and "sk-123" not in argv  # `ps` shows argv to every user


INVENTORY = """\
hosts:
  gpu-a: {address: 10.0.0.1, tags: [a6000], env: {HF_TOKEN: "${TEST_TOKEN}"}}
  gpu-b: {address: 10.0.0.2, tags: [a6000]}
  gpu-c: {address: 10.0.0.3, tags: [h100]}
"""

PLAYBOOK = """\
name: plan-test
hosts: [a6000]
runs:
  - name: sglang-mtp
    engine: sglang
    model: Qwen/Qwen3.6-27B
    tensor_parallel: 2
    speculative: {method: mtp, num_draft_tokens: 3}
  - name: vllm-dflash
    engine: vllm
    model: Qwen/Qwen3.6-27B
    hosts: [gpu-c]
    speculative: {method: dflash, draft_model: z-lab/Qwen3.6-27B-DFlash, num_draft_tokens: 15}
    env: {VLLM_USE_V2_MODEL_RUNNER: "1"}
"""


def write(tmp_path: Path, inventory: str, playbook: str) -> tuple[Path, Path]:
    (tmp_path / "hosts.yaml").write_text(inventory)
    (tmp_path / "play.yaml").write_text(playbook)
    return tmp_path / "hosts.yaml", tmp_path / "play.yaml"


def test_plan_places_runs_and_masks_secrets(tmp_path: Path) -> None:
    hosts, play = write(tmp_path, INVENTORY, PLAYBOOK)
    plans = plan_launches(
        load_playbook(play), load_inventory(hosts), environ={"TEST_TOKEN": "tok-42"}
    )
    assert [(p.run_name, p.host.name, p.port) for p in plans] == [
        ("sglang-mtp", "gpu-a", 30000),
        ("sglang-mtp", "gpu-b", 30000),
        ("vllm-dflash", "gpu-c", 8000),
    ]
    assert plans[0].env == {"HF_TOKEN": "tok-42"}  # the real value, for the launch
    out = to_json(plans)
    assert json.dumps(out).count("tok-42") == 0
    assert out["runs"][0] == {
        "run": "sglang-mtp",
        "host": "gpu-a",
        "env": {"HF_TOKEN": "***"},
        "argv": SGLANG_BASE
        + [
            "--speculative-algorithm",
            "NEXTN",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "4",
        ],
    }
    assert out["runs"][2]["env"] == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    assert out["runs"][2]["argv"][-1] == (
        '{"method":"dflash","model":"z-lab/Qwen3.6-27B-DFlash","num_speculative_tokens":15}'
    )
    only_b = plan_launches(
        load_playbook(play),
        load_inventory(hosts),
        host_filter=["gpu-b"],
        environ={"TEST_TOKEN": "x"},
    )
    assert [(p.run_name, p.host.name) for p in only_b] == [("sglang-mtp", "gpu-b")]


def test_plan_validates_every_run_before_anything(tmp_path: Path) -> None:
    broken = PLAYBOOK.replace("draft_model: z-lab/Qwen3.6-27B-DFlash, ", "").replace(
        "engine: vllm", "engine: sglang"
    )
    hosts, play = write(tmp_path, INVENTORY, broken)
    with pytest.raises(ConfigError) as info:  # at the playbook line of the run's speculative
        plan_launches(load_playbook(play), load_inventory(hosts), environ={"TEST_TOKEN": "x"})
    assert str(info.value).endswith(
        "play.yaml:13:18: runs[1].speculative: DFLASH on SGLang needs "
        "a draft model path: set speculative.draft_model"
    )


@pytest.mark.parametrize(
    ("engine", "extra_args", "key"),
    [
        ("vllm", ["--api-key", "sk-1"], "sk-1"),
        ("sglang", ["--api-key=sk-2"], "sk-2"),
        ("vllm", ["--attention-backend", "flash_attn"], None),
        # read as the engine reads them: abbreviated, underscored, several, repeated
        ("vllm", ["--api-k", "sk-3"], "sk-3"),
        ("sglang", ["--api", "sk-4"], "sk-4"),
        ("vllm", ["--api_key=sk-5"], "sk-5"),
        ("vllm", ["--api-key", "k1", "k2", "--seed", "1"], "k1"),
        ("vllm", ["--api-key", "k1", "--api-key", "k2"], "k2"),
    ],
)
def test_api_key_is_read_from_extra_args(
    engine: str, extra_args: list[str], key: str | None
) -> None:
    spec = run(engine, extra_args=extra_args)
    assert engine_for(spec).api_key(spec) == key
