"""The doctor's model checks: published pairs pass, every single fault is named exactly."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.cli.main import run as run_cli
from orchestrator.commands.doctor import doctor_local
from orchestrator.doctor import ModelConfig, problems, reference_layer_ids, run_checks
from orchestrator.doctor.checks import check_mask_token_id
from orchestrator.doctor.reference import version_tuple
from orchestrator.doctor.tokenizers import template_thinking, thinking_requested

DATA = Path(__file__).parent / "data" / "doctor"
Mutate = Callable[[dict[str, Any]], None]


def load(name: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    directory = DATA / name
    tokenizer = directory / "tokenizer_config.json"
    return (
        json.loads((directory / "config.json").read_text()),
        json.loads(tokenizer.read_text()) if tokenizer.exists() else None,
    )


def model(name: str, mutate: Mutate | None = None, *, tokenizer: bool = True) -> ModelConfig:
    config, tokenizer_config = load(name)
    config = copy.deepcopy(config)
    if mutate:
        mutate(config)
    return ModelConfig.from_json(config, tokenizer_config if tokenizer else None, name=name)


def setter(*path: str, value: Any) -> Mutate:
    def mutate(config: dict[str, Any]) -> None:
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


def deleter(*path: str) -> Mutate:
    def mutate(config: dict[str, Any]) -> None:
        node = config
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return mutate


# The classic field mistake: a drafter config written by hand for a 64-layer Qwen3.6 target,
# reusing Qwen3's mask id and evenly "guessed" layer ids.
HAND_WRITTEN_QWEN36_DRAFTER = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "block_size": 16,
    "hidden_size": 5120,
    "num_hidden_layers": 5,
    "num_target_layers": 64,
    "vocab_size": 248320,
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [0, 16, 32, 48, 63]},
}
OFF = {"enable_thinking": False}
Q3, Q3D = "qwen3-8b", "Qwen3-8B-DFlash-b16"
Q36, Q36D = "qwen3.6-27b", "qwen3.6-27b-dflash"
Q35, Q35D = "qwen3.5-122b-a10b", "qwen3.5-122b-a10b-dflash"
EIGHT_64 = [1, 10, 18, 27, 35, 44, 52, 61]

# (id, target, drafter, drafter mutation, engine, method, num_draft_tokens, kwargs, expected)
CASES: list[tuple[Any, ...]] = [
    # published-style healthy pairs
    ("qwen3-vllm", Q3, Q3D, None, "vllm", "dflash", 15, OFF, []),
    ("qwen3-sglang", Q3, Q3D, None, "sglang", "dflash", 15, OFF, []),
    ("qwen3-fewer-tokens", Q3, Q3D, None, "vllm", "dflash", 7, OFF, []),
    ("qwen36-5-captures-vllm", Q36, Q36D, None, "vllm", "dflash", 15, None, []),
    ("qwen36-5-captures-sglang", Q36, Q36D, None, "sglang", "dflash", 15, None, []),
    (
        "qwen36-8-captures",
        Q36,
        Q36D,
        setter("dflash_config", "target_layer_ids", value=EIGHT_64),
        "vllm",
        "dflash",
        15,
        None,
        [],
    ),
    ("qwen35-122b-8-captures", Q35, Q35D, None, "vllm", "dflash", 15, None, []),
    ("qwen36-no-tokens-set", Q36, Q36D, None, "vllm", "dflash", None, None, []),
    # mask_token_id
    (
        "mask-missing",
        Q36,
        Q36D,
        deleter("dflash_config", "mask_token_id"),
        "vllm",
        "dflash",
        15,
        None,
        [("mask_token_id", "error")],
    ),
    (
        "mask-not-int",
        Q36,
        Q36D,
        setter("dflash_config", "mask_token_id", value="248070"),
        "vllm",
        "dflash",
        15,
        None,
        [("mask_token_id", "error")],
    ),
    (
        "mask-past-vocab",
        Q36,
        Q36D,
        setter("dflash_config", "mask_token_id", value=248320),
        "vllm",
        "dflash",
        15,
        None,
        [("mask_token_id", "error")],
    ),
    (
        "mask-text-token",
        Q36,
        Q36D,
        setter("dflash_config", "mask_token_id", value=1000),
        "vllm",
        "dflash",
        15,
        None,
        [("mask_token_id", "error")],
    ),
    (
        "mask-think-token",
        Q36,
        Q36D,
        setter("dflash_config", "mask_token_id", value=248068),
        "vllm",
        "dflash",
        15,
        None,
        [("mask_token_id", "error")],
    ),
    (
        "mask-other-published-revision",
        Q36,
        Q36D,
        setter("dflash_config", "mask_token_id", value=248077),
        "vllm",
        "dflash",
        15,
        None,
        [],
    ),
    (
        "mask-qwen36-id-on-qwen3",
        Q3,
        Q3D,
        setter("dflash_config", "mask_token_id", value=248070),
        "vllm",
        "dflash",
        15,
        OFF,
        [("mask_token_id", "error")],
    ),
    # target_layer_ids / num_target_layers
    (
        "layers-missing",
        Q36,
        Q36D,
        deleter("dflash_config", "target_layer_ids"),
        "vllm",
        "dflash",
        15,
        None,
        [("target_layer_ids", "error")],
    ),
    (
        "layers-not-increasing",
        Q36,
        Q36D,
        setter("dflash_config", "target_layer_ids", value=[1, 31, 16, 46, 61]),
        "vllm",
        "dflash",
        15,
        None,
        [("target_layer_ids", "error")],
    ),
    (
        "layers-past-last",
        Q36,
        Q36D,
        setter("dflash_config", "target_layer_ids", value=[1, 16, 31, 46, 64]),
        "vllm",
        "dflash",
        15,
        None,
        [("target_layer_ids", "error")],
    ),
    (
        "layers-vllm-overflow",
        Q36,
        Q36D,
        setter("dflash_config", "target_layer_ids", value=[1, 16, 31, 46, 63]),
        "vllm",
        "dflash",
        15,
        None,
        [("target_layer_ids", "error")],
    ),
    (
        "layers-qwen3-ids-on-qwen36",
        Q36,
        Q36D,
        setter("dflash_config", "target_layer_ids", value=[1, 9, 17, 25, 33]),
        "vllm",
        "dflash",
        15,
        None,
        [("target_layer_ids", "error")],
    ),
    (
        "layers-not-ints",
        Q36,
        Q36D,
        setter("dflash_config", "target_layer_ids", value=[1, "16", 31, 46, 61]),
        "vllm",
        "dflash",
        15,
        None,
        [("target_layer_ids", "error")],
    ),
    (
        "num-target-layers",
        Q36,
        Q36D,
        setter("num_target_layers", value=36),
        "vllm",
        "dflash",
        15,
        None,
        [("num_target_layers", "error")],
    ),
    # sizes, block, architecture, thinking
    (
        "vocab",
        Q36,
        Q36D,
        setter("vocab_size", value=151936),
        "vllm",
        "dflash",
        15,
        None,
        [("vocab_size", "error")],
    ),
    (
        "hidden",
        Q36,
        Q36D,
        setter("hidden_size", value=4096),
        "vllm",
        "dflash",
        15,
        None,
        [("hidden_size", "error")],
    ),
    ("block-vllm-too-many", Q36, Q36D, None, "vllm", "dflash", 16, None, [("block_size", "error")]),
    (
        "block-sglang-not-block",
        Q36,
        Q36D,
        None,
        "sglang",
        "dflash",
        7,
        None,
        [("block_size", "error")],
    ),
    (
        "block-missing",
        Q36,
        Q36D,
        deleter("dflash_config", "block_size"),
        "vllm",
        "dflash",
        15,
        None,
        [("block_size", "warning")],
    ),
    (
        "arch-eagle3-as-dflash",
        Q36,
        Q36D,
        setter("architectures", value=["LlamaForCausalLMEagle3"]),
        "vllm",
        "dflash",
        15,
        None,
        [("architecture", "error")],
    ),
    (
        "thinking-on-non-thinking-drafter",
        Q3,
        Q3D,
        None,
        "vllm",
        "dflash",
        15,
        None,
        [("thinking", "warning")],
    ),
    (
        "thinking-field-false",
        Q36,
        Q36D,
        setter("dflash_config", "trained_with_thinking", value=False),
        "vllm",
        "dflash",
        15,
        None,
        [("thinking", "warning")],
    ),
    (
        "thinking-field-false-kwargs-off",
        Q36,
        Q36D,
        setter("dflash_config", "trained_with_thinking", value=False),
        "vllm",
        "dflash",
        15,
        OFF,
        [],
    ),
    # the classic field mistake
    (
        "classic-hand-written",
        Q36,
        HAND_WRITTEN_QWEN36_DRAFTER,
        None,
        "vllm",
        "dflash",
        15,
        None,
        [("target_layer_ids", "error"), ("mask_token_id", "error")],
    ),
    (
        "classic-hand-written-sglang",
        Q36,
        HAND_WRITTEN_QWEN36_DRAFTER,
        None,
        "sglang",
        "dflash",
        15,
        None,
        [("target_layer_ids", "error"), ("mask_token_id", "error")],
    ),
]


def _drafter(source: Any, mutate: Mutate | None) -> ModelConfig:
    if isinstance(source, dict):
        config = copy.deepcopy(source)
        if mutate:
            mutate(config)
        return ModelConfig.from_json(config, None, name="hand-written")
    return model(source, mutate)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_pairs_give_exactly_the_expected_findings(case: tuple[Any, ...]) -> None:
    _, target, drafter, mutate, engine, method, tokens, kwargs, expected = case
    findings = run_checks(
        target=model(target),
        drafter=_drafter(drafter, mutate),
        engine=engine,
        method=method,
        num_draft_tokens=tokens,
        chat_template_kwargs=kwargs,
    )
    assert [(f.check, f.severity) for f in problems(findings)] == expected
    assert [f.check for f in findings] == [
        "target_layer_ids",
        "num_target_layers",
        "mask_token_id",
        "vocab_size",
        "hidden_size",
        "block_size",
        "architecture",
        "thinking",
    ]


def test_the_classic_mistake_says_what_to_write() -> None:
    findings = run_checks(
        target=model(Q36),
        drafter=_drafter(HAND_WRITTEN_QWEN36_DRAFTER, None),
        engine="vllm",
        method="dflash",
        num_draft_tokens=15,
    )
    layers, mask = problems(findings)
    assert layers.details["expected"] == [1, 16, 31, 46, 61]
    assert layers.details["problems"] == [
        "63 overflows on vLLM (it reads layer id + 1, past the last layer 63)",
        "not the reference choice for 64 layers and 5 captures",
    ]
    assert "Expected [1, 16, 31, 46, 61]" in layers.message
    assert mask.details["status"] == "text"
    assert mask.details["known_id_of"] == ["Qwen3"]
    assert mask.details["target_family"] == "Qwen3.5/3.6"
    assert mask.message.startswith(
        "mask_token_id 151669 is the DFlash mask id of Qwen3 (vocab 151936) tokenizers, but the "
        "target's tokenizer is Qwen3.5/3.6 (vocab 248320). mask_token_id 151669 is an ordinary "
        "text token of the target's tokenizer"
    )
    assert (
        "an unused id in 248077..248319; published Qwen3.5/3.6 drafters use 248070, 248077"
        in mask.message
    )


def test_mask_check_names_the_token_it_found() -> None:
    findings = run_checks(
        target=model(Q36), drafter=model(Q36D), engine="vllm", method="dflash", num_draft_tokens=15
    )
    mask = next(f for f in findings if f.check == "mask_token_id")
    assert mask.severity == "ok"
    assert mask.message == (
        "mask_token_id 248070 is an added special token of the target's "
        "tokenizer '<|audio_start|>'."
    )
    think = run_checks(
        target=model(Q36),
        drafter=model(Q36D, setter("dflash_config", "mask_token_id", value=248068)),
        engine="vllm",
        method="dflash",
        num_draft_tokens=15,
    )
    assert next(f for f in think if f.check == "mask_token_id").details["token"] == "<think>"


GAPPED_TARGET = ModelConfig.from_json(
    {"vocab_size": 200},
    {
        "added_tokens_decoder": {
            "100": {"content": "<a>", "special": True},
            "102": {"content": "<b>", "special": True},
        }
    },
)
QWEN36_EXPECTED = (
    "Expected an added special token, or an unused id in 248077..248319; published "
    "Qwen3.5/3.6 drafters use 248070, 248077. Fix:"
)


@pytest.mark.parametrize(
    ("target", "mask", "expected"),
    [
        (
            lambda: model(Q36),
            151669,
            "mask_token_id 151669 is the DFlash mask id of Qwen3 (vocab 151936) tokenizers, but the "
            "target's tokenizer is Qwen3.5/3.6 (vocab 248320). mask_token_id 151669 is an ordinary "
            "text token of the target's tokenizer: it is below the first added token id 248044 in "
            "tokenizer_config.json. " + QWEN36_EXPECTED,
        ),
        (
            lambda: model(Q36, tokenizer=False),
            1000,
            "mask_token_id 1000 is an ordinary text token of the target's tokenizer: it is below the "
            "first added token id 248044 in the published Qwen3.5/3.6 tokenizer layout. "
            + QWEN36_EXPECTED,
        ),
        (
            lambda: model(Q36),
            248068,
            "mask_token_id 248068 is an added token that is not special (it appears in ordinary "
            "text): '<think>' is marked \"special\": false in tokenizer_config.json. "
            + QWEN36_EXPECTED,
        ),
        (
            lambda: GAPPED_TARGET,
            101,
            "mask_token_id 101 is an ordinary text token of the target's tokenizer: it is inside the "
            "added-token range (100..102) in tokenizer_config.json but is not one of the added "
            "tokens. Expected an added special token, or an unused id in 103..199. Fix:",
        ),
    ],
    ids=["qwen3-id-on-qwen36", "published-layout", "think-token", "gap-in-added-range"],
)
def test_ordinary_token_message_says_why_unambiguously(
    target: Callable[[], ModelConfig], mask: int, expected: str
) -> None:
    """The reason must not read as if the id were an added token (the old "(tokenizer_config.json
    added_tokens_decoder)" parenthesis did)."""
    drafter = ModelConfig.from_json({"dflash_config": {"mask_token_id": mask}})
    finding = check_mask_token_id(target(), drafter)
    assert finding.severity == "error"
    assert finding.message.startswith(expected), finding.message
    assert "added_tokens_decoder)" not in finding.message


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (248070, []),
        (248077, []),
        (151669, [("mask_token_id", "error")]),
        (248050, [("mask_token_id", "warning")]),
    ],
)
def test_mask_check_without_tokenizer_config_uses_the_published_layout(
    mask: int, expected: list[tuple[str, str]]
) -> None:
    target = model(Q36, tokenizer=False)
    drafter = model(Q36D, setter("dflash_config", "mask_token_id", value=mask))
    findings = run_checks(
        target=target, drafter=drafter, engine="vllm", method="dflash", num_draft_tokens=15
    )
    assert [(f.check, f.severity) for f in problems(findings)] == expected


def test_unknown_tokenizer_family_is_a_warning_not_a_guess() -> None:
    target = ModelConfig.from_json(
        {
            "architectures": ["LlamaForCausalLM"],
            "num_hidden_layers": 32,
            "vocab_size": 128256,
            "hidden_size": 4096,
        }
    )
    drafter = ModelConfig.from_json(
        {
            "architectures": ["DFlashDraftModel"],
            "block_size": 10,
            "hidden_size": 4096,
            "vocab_size": 128256,
            "num_hidden_layers": 5,
            "dflash_config": {"mask_token_id": 128002, "target_layer_ids": [1, 8, 15, 22, 29]},
        }
    )
    findings = run_checks(
        target=target, drafter=drafter, engine="vllm", method="dflash", num_draft_tokens=9
    )
    assert [(f.check, f.severity) for f in problems(findings)] == [("mask_token_id", "warning")]


def test_multimodal_target_reads_text_config() -> None:
    target = model(Q36)
    assert (target.num_layers, target.vocab_size, target.hidden_size) == (64, 248320, 5120)
    assert (target.mtp_layers, target.mtp_field) == (1, "mtp_num_hidden_layers")
    assert target.architectures == ("Qwen3_5ForConditionalGeneration",)
    assert len(target.added_tokens) == 33 and min(target.added_tokens) == 248044
    assert target.thinking_default == "on"


def test_drafter_facts() -> None:
    qwen3 = model(Q3D)
    assert (qwen3.block_size, qwen3.block_size_field) == (16, "block_size")
    assert (qwen3.trained_with_thinking, qwen3.thinking_basis) == (
        False,
        "qwen3-8b-dflash-b16 is published as a non-thinking drafter",
    )
    big = model(Q35D)
    assert (big.block_size, big.block_size_field) == (16, "dflash_config.block_size")
    assert big.mask_token_id == 248077 and big.target_layer_ids == [1, 7, 14, 20, 26, 32, 39, 45]
    assert big.trained_with_thinking is None and big.mixes_sliding_and_full is False
    mixed = ModelConfig.from_json({"layer_types": ["sliding_attention", "full_attention"]})
    assert mixed.mixes_sliding_and_full is True


@pytest.mark.parametrize(("target", "expected"), [(Q3, [("mtp", "error")]), (Q36, []), (Q35, [])])
def test_mtp_needs_mtp_layers(target: str, expected: list[tuple[str, str]]) -> None:
    findings = run_checks(
        target=model(target), drafter=None, engine="vllm", method="mtp", num_draft_tokens=3
    )
    assert [(f.check, f.severity) for f in problems(findings)] == expected
    assert [f.check for f in findings] == ["mtp"]


def test_sglang_nextn_is_mtp_and_qwen3_has_none() -> None:
    (finding,) = run_checks(
        target=model(Q3), drafter=None, engine="sglang", method="NEXTN", num_draft_tokens=3
    )
    assert finding.severity == "error"
    assert "none of num_nextn_predict_layers, mtp_num_hidden_layers" in finding.message


EAGLE3_QWEN3 = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 4096,
    "vocab_size": 151936,
    "draft_vocab_size": 32000,
    "num_hidden_layers": 1,
}


@pytest.mark.parametrize(
    ("drafter", "method", "expected"),
    [
        (EAGLE3_QWEN3, "eagle3", []),
        (Q3D, "eagle3", [("architecture", "error")]),
        (EAGLE3_QWEN3, "eagle", [("architecture", "error")]),
        (
            dict(EAGLE3_QWEN3, architectures=["LlamaForCausalLM"]),
            "eagle",
            [("architecture", "warning")],
        ),
    ],
)
def test_eagle_architectures(drafter: Any, method: str, expected: list[tuple[str, str]]) -> None:
    findings = run_checks(
        target=model(Q3),
        drafter=_drafter(drafter, None),
        engine="vllm",
        method=method,
        num_draft_tokens=3,
        chat_template_kwargs=OFF,
    )
    assert [(f.check, f.severity) for f in problems(findings)] == expected
    assert [f.check for f in findings] == ["vocab_size", "hidden_size", "architecture", "thinking"]


def test_dflash_without_a_drafter_and_model_free_methods() -> None:
    (missing,) = run_checks(
        target=model(Q3), drafter=None, engine="vllm", method="dflash", num_draft_tokens=15
    )
    assert (missing.check, missing.severity) == ("drafter", "error")
    (ngram,) = run_checks(
        target=model(Q3), drafter=None, engine="vllm", method="ngram", num_draft_tokens=3
    )
    assert (ngram.check, ngram.severity) == ("method", "ok")


@pytest.mark.parametrize("method", ["none", "NONE", " none "])
def test_a_plain_run_is_ok_not_an_unknown_method(method: str) -> None:
    (finding,) = run_checks(
        target=model(Q3), drafter=None, engine="vllm", method=method, num_draft_tokens=None
    )
    assert (finding.check, finding.severity, finding.message) == (
        "method",
        "ok",
        "no speculative decoding (method 'none'): no drafter to check.",
    )
    (unknown,) = run_checks(
        target=model(Q3), drafter=None, engine="vllm", method="medusa", num_draft_tokens=3
    )
    assert (unknown.check, unknown.severity) == ("method", "warning")


def test_command_accepts_method_none() -> None:
    result = _cli(["--target", str(DATA / Q3), "--method", "none", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["findings"] == [
        {
            "check": "method",
            "severity": "ok",
            "message": "no speculative decoding (method 'none'): no drafter to check.",
            "details": {"method": "none"},
        }
    ]


@pytest.mark.parametrize(
    ("layers", "captures", "expected"),
    [
        (36, 5, [1, 9, 17, 25, 33]),
        (48, 5, [1, 12, 23, 34, 45]),
        (64, 5, [1, 16, 31, 46, 61]),
        (48, 8, [1, 7, 14, 20, 26, 32, 39, 45]),
        (64, 8, EIGHT_64),
        (36, 1, [18]),
        (36, 2, [1, 33]),
    ],
)
def test_reference_layer_ids(layers: int, captures: int, expected: list[int]) -> None:
    assert reference_layer_ids(layers, captures) == expected


@pytest.mark.parametrize(
    ("template", "kwargs", "default", "thinks"),
    [
        ("{% if enable_thinking is defined and enable_thinking is false %}", None, "on", True),
        ("{% if enable_thinking is defined and enable_thinking is false %}", OFF, "on", False),
        ("{% if thinking %}<think>{% endif %}", None, "off", False),
        ("{% if thinking %}<think>{% endif %}", {"thinking": True}, "off", True),
        ("{{ message.content }}", {"enable_thinking": True}, "none", False),
        (None, None, "none", False),
    ],
)
def test_template_thinking(
    template: str | None, kwargs: dict[str, Any] | None, default: str, thinks: bool
) -> None:
    assert template_thinking(template) == default
    assert thinking_requested(template_thinking(template), kwargs) is thinks


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.33.0", (0, 33, 0)),
        ("0.20.0rc1.dev5+g1a2b", (0, 20, 0)),
        ("v0.5.23", (0, 5, 23)),
        ("0.19.1+cu128", (0, 19, 1)),
    ],
)
def test_version_tuple(text: str, expected: tuple[int, ...]) -> None:
    assert version_tuple(text) == expected


# --- local directories and the command ----------------------------------------------------------


def _write_drafter(tmp_path: Path, config: dict[str, Any]) -> Path:
    directory = tmp_path / "drafter"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_doctor_local_reads_directories(tmp_path: Path) -> None:
    healthy = doctor_local(
        DATA / Q36, DATA / Q36D, engine="vllm", num_draft_tokens=15, method="dflash"
    )
    assert problems(healthy) == []
    broken = doctor_local(
        DATA / Q36,
        _write_drafter(tmp_path, HAND_WRITTEN_QWEN36_DRAFTER),
        engine="vllm",
        num_draft_tokens=15,
        method="dflash",
    )
    assert [(f.check, f.severity) for f in problems(broken)] == [
        ("target_layer_ids", "error"),
        ("mask_token_id", "error"),
    ]


def _cli(args: list[str]) -> Any:
    """`orch doctor ARGS` through the real entry point (which turns errors into messages)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = run_cli(["doctor", *args])
    return SimpleNamespace(exit_code=code, stdout=stdout.getvalue(), stderr=stderr.getvalue())


def test_command_json_and_exit_codes(tmp_path: Path) -> None:
    drafter = _write_drafter(tmp_path, HAND_WRITTEN_QWEN36_DRAFTER)
    result = _cli(
        [
            "--target",
            str(DATA / Q36),
            "--drafter",
            str(drafter),
            "--num-draft-tokens",
            "15",
            "--json",
        ]
    )
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert [(f["check"], f["severity"]) for f in doc["findings"] if f["severity"] != "ok"] == [
        ("target_layer_ids", "error"),
        ("mask_token_id", "error"),
    ]
    assert set(doc["findings"][0]) == {"check", "severity", "message", "details"}
    healthy = _cli(
        ["--target", str(DATA / Q36), "--drafter", str(DATA / Q36D), "--engine", "sglang"]
    )
    assert healthy.exit_code == 0
    assert "0 error(s), 0 warning(s), 8 passed" in healthy.stdout


def _said(result: Any) -> str:
    return " ".join(result.stderr.split())  # rich wraps long lines


def test_command_reports_bad_input_without_traceback(tmp_path: Path) -> None:
    missing = _cli(["--target", str(tmp_path / "nope"), "--drafter", str(DATA / Q36D)])
    assert missing.exit_code == 2
    assert _said(missing).startswith(
        f"config error: {tmp_path / 'nope'}: --target: no such directory"
    )
    assert "Traceback" not in missing.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    result = _cli(["--target", str(bad), "--drafter", str(DATA / Q36D)])
    assert result.exit_code == 2
    assert _said(result).startswith(
        f"config error: {bad / 'config.json'}: --target: config.json "
        "could not be read: config.json: not valid JSON"
    )
    kwargs = _cli(
        [
            "--target",
            str(DATA / Q36),
            "--drafter",
            str(DATA / Q36D),
            "--chat-template-kwargs",
            "[1]",
        ]
    )
    assert kwargs.exit_code == 2
    assert "--chat-template-kwargs: must be a JSON object" in _said(kwargs)
    method = _cli(["--target", str(DATA / Q36), "--method", "medusa"])
    assert method.exit_code == 2 and "--method: 'medusa' is not a speculative method" in _said(
        method
    )


# --- the simulator's shipped model directories --------------------------------------------------

SIM_MODELS = Path(__file__).resolve().parents[2] / "orchestrator" / "sim" / "models"


@pytest.mark.skipif(
    not (SIM_MODELS / "Qwen").is_dir(), reason="simulator model dirs not shipped yet"
)
@pytest.mark.parametrize(
    ("target", "drafter"),
    [("Qwen/Qwen3.6-27B", "z-lab/Qwen3.6-27B-DFlash"), ("Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash")],
)
def test_simulator_pairs_are_healthy(target: str, drafter: str) -> None:
    findings = doctor_local(
        SIM_MODELS / target,
        SIM_MODELS / drafter,
        engine="vllm",
        num_draft_tokens=None,
        method="dflash",
        chat_template_kwargs={"enable_thinking": False},
    )
    assert problems(findings) == []


@pytest.mark.skipif(
    not (SIM_MODELS / "Qwen").is_dir(), reason="simulator model dirs not shipped yet"
)
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_simulator_broken_drafter_is_caught(engine: str) -> None:
    findings = doctor_local(
        SIM_MODELS / "Qwen/Qwen3.6-27B",
        SIM_MODELS / "orch-demo/Qwen3.6-27B-DFlash-broken",
        engine=engine,
        num_draft_tokens=15,
        method="dflash",
    )
    assert [(f.check, f.severity) for f in problems(findings)] == [
        ("target_layer_ids", "error"),
        ("mask_token_id", "error"),
    ]
    target = ModelConfig.from_json(
        json.loads((SIM_MODELS / "Qwen/Qwen3.6-27B/config.json").read_text()),
        chat_template=(SIM_MODELS / "Qwen/Qwen3.6-27B/chat_template.jinja").read_text(),
    )
    assert target.thinking_default == "on"


# --- host checks --------------------------------------------------------------------------------

from orchestrator.doctor import HostProbe, estimate_parameters, run_host_checks  # noqa: E402
from orchestrator.doctor.host import estimate_weight_bytes  # noqa: E402
from orchestrator.remote.wire import GpuInfo, PortHolder  # noqa: E402


def probe(
    *,
    gpus: list[tuple[str, int, int]],
    driver: str | None = "570.124.06",
    vllm: str | None = "0.33.0",
    sglang: str | None = None,
    free: list[int] | None = None,
    checked: list[int] | None = None,
) -> HostProbe:
    """The host facts the checks read (what HostProbe.from_probe makes of a probe result)."""
    return HostProbe(
        gpus=[GpuInfo(i, name, total, used, None) for i, (name, total, used) in enumerate(gpus)],
        driver_version=driver,
        engines={"vllm": vllm, "sglang": sglang, "torch": "2.9.0"},
        checked_ports=set(checked if checked is not None else [8000]),
        free_ports=set(free if free is not None else [8000]),
    )


H100 = ("NVIDIA H100 80GB HBM3", 81559, 1)


def test_parameter_estimate_is_exact_arithmetic() -> None:
    # Qwen3-8B: embeddings 2 x 151936 x 4096, 36 x (attention 41,943,040 + MLP 150,994,944)
    assert estimate_parameters(model(Q3)) == 8_190_427_136
    assert estimate_weight_bytes(model(Q3)) == 16_380_854_272
    stated = ModelConfig.from_json({"num_parameters": 1000, "torch_dtype": "float32"})
    assert (estimate_parameters(stated), estimate_weight_bytes(stated)) == (1000, 4000)
    fp8 = ModelConfig.from_json(
        {"num_parameters": 1000, "quantization_config": {"quant_method": "fp8"}}
    )
    assert estimate_weight_bytes(fp8) == 1000


@pytest.mark.parametrize(
    ("host", "kwargs", "expected"),
    [
        (probe(gpus=[H100]), {}, []),
        (probe(gpus=[H100]), {"tensor_parallel": 2}, [("gpu_count", "error")]),
        (probe(gpus=[H100], driver=None), {}, [("driver", "error")]),
        (probe(gpus=[("NVIDIA H100 80GB HBM3", 81559, 40000)]), {}, [("gpu_memory", "error")]),
        (probe(gpus=[("NVIDIA RTX A4000", 16376, 0)]), {}, [("gpu_memory", "error")]),
        (probe(gpus=[("NVIDIA RTX 4000 Ada", 20480, 0)]), {}, [("gpu_memory", "warning")]),
        (probe(gpus=[("NVIDIA RTX A4000", 16376, 0)] * 2), {"tensor_parallel": 2}, []),
        (probe(gpus=[H100]), {"expected_gpu": "A100"}, [("gpu_model", "warning")]),
        (
            probe(gpus=[H100, ("NVIDIA A100-SXM4-80GB", 81920, 0)]),
            {"tensor_parallel": 2},
            [("gpu_model", "warning")],
        ),
        (probe(gpus=[H100], vllm=None), {}, [("engine_version", "error")]),
        (probe(gpus=[H100], vllm="0.19.1"), {}, [("engine_version", "error")]),
        (probe(gpus=[H100], vllm="0.20.0"), {}, []),
        # the real 0.32.0 CPU build served ngram (tests/real_engine/); mtp is only listed
        (probe(gpus=[H100], vllm="0.32.0+cpu"), {"method": "ngram", "drafter": None}, []),
        (
            probe(gpus=[H100], vllm="0.32.0+cpu"),
            {"method": "mtp", "drafter": None},
            [("engine_version", "warning")],
        ),
        (
            probe(gpus=[H100], sglang="0.5.10"),
            {"engine": "sglang"},
            [("engine_version", "warning")],
        ),
        (probe(gpus=[H100], sglang="0.5.23"), {"engine": "sglang"}, []),
        (probe(gpus=[H100], free=[]), {}, [("port", "error")]),
        (probe(gpus=[H100], checked=[]), {}, [("port", "warning")]),
        (probe(gpus=[H100], free=[]), {"port": None}, [("port", "warning")]),
        (probe(gpus=[H100], free=[], checked=[8000]), {"default_port": True}, [("port", "error")]),
    ],
)
def test_host_checks(
    host: HostProbe, kwargs: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    options: dict[str, Any] = {
        "engine": "vllm",
        "method": "dflash",
        "tensor_parallel": 1,
        "port": 8000,
        "target": model(Q3),
        "drafter": model(Q3D),
    }
    options.update(kwargs)
    findings = run_host_checks(host=host, **options)
    assert [f.check for f in findings] == [
        "driver",
        "gpu_count",
        "gpu_model",
        "gpu_memory",
        "engine_version",
        "port",
    ]
    assert [(f.check, f.severity) for f in problems(findings)] == expected


def test_host_memory_finding_gives_the_numbers() -> None:
    findings = run_host_checks(
        host=probe(gpus=[("NVIDIA H100 80GB HBM3", 81559, 40000)]),
        engine="vllm",
        method="dflash",
        target=model(Q3),
    )
    memory = next(f for f in findings if f.check == "gpu_memory")
    assert memory.message.startswith(
        "GPU 0 has 40.6 GiB free but the engine asks for 90% of it "
        "(71.7 GiB) and will refuse to start."
    )
    assert memory.details["weights_gib"] == 15.3
    assert memory.details["gpus"] == [
        {"index": 0, "total_gib": 79.6, "free_gib": 40.6, "budget_gib": 71.7}
    ]


def test_host_probe_free_memory_and_unprobed_ports() -> None:
    host = HostProbe(
        gpus=[GpuInfo(0, "L4", 23034, 0, None)], driver_version="550.54", engines={"vllm": "0.33.0"}
    )
    assert host.gpus[0].free_mib == 23034 and host.engines == {"vllm": "0.33.0"}
    assert host.free_ports is None


@pytest.mark.parametrize(
    ("port", "options", "free", "checked", "severity", "message"),
    [
        (8000, {}, [8000], [8000], "ok", "port 8000 is free."),
        (
            8000,
            {"default": True},
            [8000],
            [8000],
            "ok",
            "port 8000 (vLLM's default: the run sets no `port`) is free.",
        ),
        (
            30000,
            {"engine": "sglang", "default": True},
            [],
            [30000],
            "error",
            "port 30000 (SGLang's default: the run sets no `port`) is already in use on the host "
            "by a process this user cannot see: the server cannot listen there. Fix: free it "
            "(`ss -ltnp` run as root names the process), or set the run's `port` to a free one.",
        ),
        (
            38232,
            {},
            [],
            [38232],
            "error",
            "port 38232 is already in use on the host by a process this user cannot see: the "
            "server cannot listen there. Fix: free it (`ss -ltnp` run as root names the process), "
            "or set the run's `port` to a free one.",
        ),
        (
            8000,
            {"default": True},
            [],
            [],
            "warning",
            "port 8000 (vLLM's default: the run sets no `port`) was not probed: not checked.",
        ),
        (None, {}, [], [], "warning", "the run's port is not known: not checked."),
    ],
)
def test_port_finding(
    port: int | None,
    options: dict[str, Any],
    free: list[int],
    checked: list[int],
    severity: str,
    message: str,
) -> None:
    from orchestrator.doctor.host import check_port

    finding = check_port(probe(gpus=[H100], free=free, checked=checked), port, **options)
    assert (finding.check, finding.severity, finding.message) == ("port", severity, message)
    holders: dict[str, Any] = {"holders": []} if severity == "error" else {}
    assert finding.details == {"port": port, "default": options.get("default", False), **holders}


@pytest.mark.parametrize(
    ("holder", "named", "fix"),
    [
        (
            PortHolder(3322, "/usr/bin/python3 -", False, port=38232, user="bench"),
            "pid 3322 (user bench: /usr/bin/python3 -)",
            "stop that process",
        ),
        (
            PortHolder(3322111, "vllm serve m", False, port=38232, user="ci", run_id="v-1a2b"),
            "orch's server of run v-1a2b, pid 3322111 (user ci: vllm serve m)",
            "`orch stop v-1a2b` (see `orch ps`)",
        ),
    ],
)
def test_a_taken_port_names_its_holder_and_the_fix(
    holder: PortHolder, named: str, fix: str
) -> None:
    """The probe's holder of the port (pid, user, command; orch's run id) is in the refusal,
    with the one command that frees the port; holders of other ports are not."""
    from orchestrator.doctor.host import check_port

    other = PortHolder(77, "nginx", False, port=80, user="www")
    host = probe(gpus=[H100], free=[], checked=[38232, 80])
    host.port_holders = [other, holder]
    finding = check_port(host, 38232)
    assert finding.severity == "error"
    assert finding.message == (
        f"port 38232 is already in use on the host by {named}: the server cannot listen there. "
        f"Fix: {fix}, or set the run's `port` to a free one."
    )
    assert finding.details["holders"] == [holder.to_json()]


def test_a_port_refusal_hints_at_the_port_not_at_force() -> None:
    from orchestrator.commands.run import FORCE_HINT, PORT_HINT, refusal_hint

    assert refusal_hint({"port"}) == PORT_HINT and "--force cannot" in PORT_HINT
    assert "collapse" not in PORT_HINT and "doctor: warn" not in PORT_HINT
    assert refusal_hint({"mask_token_id"}) == FORCE_HINT
    assert refusal_hint({"port", "mask_token_id"}).startswith(PORT_HINT)
    assert refusal_hint({"port", "mask_token_id"}).endswith(FORCE_HINT)
