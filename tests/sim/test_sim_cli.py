"""The simulator parses the real engines' command lines, and rejects what they reject."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from typing import Any

import pytest

from orchestrator.engines.flags import SGLANG_LAUNCH_SERVER, TABLES, VLLM_SERVE, FlagTable
from orchestrator.sim.cli import parse, parse_sglang, parse_vllm, sglang_parser, vllm_parser
from orchestrator.sim.logs import EngineLog
from orchestrator.sim.narrator import Narrator

DFLASH = '{"method": "dflash", "model": "z-lab/Qwen3.6-27B-DFlash", "num_speculative_tokens": 15}'


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["serve", "Qwen/Qwen3.6-27B"],
         {"model": "Qwen/Qwen3.6-27B", "host": "0.0.0.0", "port": 8000, "tp": 1, "mem_fraction": 0.9,
          "served_names": ("Qwen/Qwen3.6-27B",), "speculative": None, "seed": 0, "api_key": None}),
        (["serve", "Qwen/Qwen3.6-27B", "--host", "127.0.0.1", "--port", "8001", "--tensor-parallel-size", "2",
          "--max-model-len", "8192", "--gpu-memory-utilization", "0.92", "--served-model-name", "qwen",
          "--speculative-config", DFLASH, "--attention-backend", "flash_attn", "--seed", "7"],
         {"host": "127.0.0.1", "port": 8001, "tp": 2, "max_model_len": 8192, "mem_fraction": 0.92,
          "served_names": ("qwen",), "attention_backend": "flash_attn", "seed": 7,
          "speculative": {"method": "dflash", "model": "z-lab/Qwen3.6-27B-DFlash", "num_speculative_tokens": 15}}),
        # short forms and vLLM's underscore spelling
        (["serve", "m", "-tp", "2", "-sc", '{"method": "mtp", "num_speculative_tokens": 3}', "--max_model_len", "32k"],
         {"tp": 2, "max_model_len": 32000, "speculative": {"method": "mtp", "num_speculative_tokens": 3}}),
        # dotted JSON keys, --flag=value, several served names, the API key
        (["serve", "--model", "m", "--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens=2",
          "--served-model-name", "a", "b", "--api-key", "k1", "--enable-log-requests"],
         {"model": "m", "speculative": {"method": "mtp", "num_speculative_tokens": 2}, "served_names": ("a", "b"),
          "api_key": "k1", "log_requests": True}),
        # real flags the simulator only accepts
        (["serve", "m", "--trust-remote-code", "--dtype", "bfloat16", "--enforce-eager", "--max-num-seqs", "64",
          "--no-enable-prefix-caching", "--kv-cache-dtype", "fp8", "-pp", "1", "--disable-log-stats",
          "--max-num-batched-tokens", "16384", "--reasoning-parser", "qwen3", "--async-scheduling"],
         {"max_num_seqs": 64}),
    ],
)  # fmt: skip
def test_vllm_command_lines(argv: list[str], expected: dict) -> None:
    cfg = parse_vllm(argv)
    assert {key: getattr(cfg, key) for key in expected} == expected


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--model-path", "Qwen/Qwen3.6-27B"],
         {"model": "Qwen/Qwen3.6-27B", "host": "127.0.0.1", "port": 30000, "tp": 1, "enable_metrics": False,
          "decode_log_interval": 40, "speculative": None, "served_names": ("Qwen/Qwen3.6-27B",)}),
        (["--model-path", "Qwen/Qwen3.6-27B", "--host", "127.0.0.1", "--port", "30001", "--tp-size", "2",
          "--mem-fraction-static", "0.88", "--context-length", "8192", "--enable-metrics", "--decode-log-interval", "10",
          "--served-model-name", "qwen", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--random-seed", "3"],
         {"port": 30001, "tp": 2, "mem_fraction": 0.88, "max_model_len": 8192, "enable_metrics": True,
          "decode_log_interval": 10, "served_names": ("qwen",), "seed": 3,
          "speculative": {"algorithm": "NEXTN", "draft_model_path": None, "num_steps": 3, "eagle_topk": 1,
                          "num_draft_tokens": 4}}),
        # the docs' `--tp` works by abbreviation of --tp-size; --model is an alias of --model-path
        (["--model", "m", "--tp", "2", "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d",
          "--speculative-num-draft-tokens", "16", "--attention-backend", "fa3", "--page-size", "64",
          "--trust-remote-code", "--cuda-graph-max-bs", "8", "--mamba-ssm-dtype", "bfloat16"],
         {"model": "m", "tp": 2, "attention_backend": "fa3",
          "speculative": {"algorithm": "DFLASH", "draft_model_path": "d", "num_steps": None, "eagle_topk": None,
                          "num_draft_tokens": 16}}),
    ],
)  # fmt: skip
def test_sglang_command_lines(argv: list[str], expected: dict) -> None:
    cfg = parse_sglang(argv)
    assert {key: getattr(cfg, key) for key in expected} == expected


@pytest.mark.parametrize(
    ("engine", "argv", "message"),
    [
        ("vllm", ["serve", "m", "--disable-log-requests"], "vllm: error: unrecognized arguments: --disable-log-requests"),
        ("vllm", ["serve", "m", "--tensor-parallel-size", "two"], "argument --tensor-parallel-size/-tp: invalid int value: 'two'"),
        ("vllm", ["serve", "m", "-sc", "{method: dflash}"], "argument --speculative-config/-sc: invalid loads value: '{method: dflash}'"),
        ("sglang", ["--model-path", "m", "--speculative-algo", "MEDUSA"], "argument --speculative-algorithm: invalid choice: 'MEDUSA'"),
        ("sglang", ["--model-path", "m", "--no-such-flag"], "launch_server.py: error: unrecognized arguments: --no-such-flag"),
        ("sglang", ["--tp-size", "2"], "launch_server.py: error: the following arguments are required: --model-path/--model"),
    ],
)  # fmt: skip
def test_bad_command_lines_exit_2_with_argparse_message(
    engine: str, argv: list[str], message: str
) -> None:
    """Through the real entry point, like the controller's launch: exit status 2, usage on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.sim", engine, *argv],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stderr.startswith("usage: ")
    assert done.stdout == ""


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _serve_parser() -> argparse.ArgumentParser:
    sub = next(a for a in vllm_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


@pytest.mark.parametrize(
    ("table", "parser"), [(VLLM_SERVE, _serve_parser), (SGLANG_LAUNCH_SERVER, sglang_parser)]
)
def test_simulator_takes_exactly_the_flags_orch_checks_against(
    table: FlagTable, parser: Any
) -> None:
    """One table: a flag the simulator took but orch's checks did not know (or the reverse)
    would let an abbreviation through that the stand-in for the real CLI reads."""
    expected = {option for flag in table.flags for option in flag.option_strings}
    assert _option_strings(parser()) == expected
    assert {"--host", "--port", "--api-key", "-h"} <= expected


# The bypasses the adapters refuse, as the engine's parser reads them: an abbreviation is the flag
@pytest.mark.parametrize(
    ("engine", "extra", "flag", "field", "value"),
    [
        ("vllm", ["--hos", "0.0.0.0"], "--host", "host", "0.0.0.0"),
        ("vllm", ["--hos=0.0.0.0"], "--host", "host", "0.0.0.0"),
        ("vllm", ["--por", "9999"], "--port", "port", 9999),
        ("vllm", ["-t", "4"], "--tensor-parallel-size", "tp", 4),
        ("vllm", ["--api-k", "KEY"], "--api-key", "api_key", "KEY"),
        ("vllm", ["--api_k", "KEY"], "--api-key", "api_key", "KEY"),
        ("sglang", ["--ho", "0.0.0.0"], "--host", "host", "0.0.0.0"),
        ("sglang", ["--po", "9999"], "--port", "port", 9999),
        ("sglang", ["--tp", "4"], "--tensor-parallel-size", "tp", 4),
        ("sglang", ["--api", "KEY"], "--api-key", "api_key", "KEY"),
    ],
)  # fmt: skip
def test_abbreviations_reach_the_engine(
    engine: str, extra: list[str], flag: str, field: str, value: Any
) -> None:
    cfg = (
        parse_vllm(["serve", "m", *extra])
        if engine == "vllm"
        else parse_sglang(["--model-path", "m", *extra])
    )
    assert getattr(cfg, field) == value
    use = TABLES[engine].resolve(extra[0])  # and orch's checks read it the same way
    assert use is not None and use.flag is not None and (use.flag.name, use.exact) == (flag, False)


def test_ambiguous_abbreviation_is_refused_by_the_engine(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_vllm(["serve", "m", "--po", "9999"])
    assert info.value.code == 2
    assert "ambiguous option: --po could match --port, --pooler-config" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("engine", "argv", "banner"),
    [
        ("vllm", ["serve", "m", "--api-key", "sk-sim-key", "--port", "8001"],
         "non-default args: {'model_tag': 'm', 'port': 8001, 'api_key': ['sk-sim-key']}"),
        ("sglang", ["--model-path", "m", "--api-key", "sk-sim-key"], "api_key='sk-sim-key'"),
    ],
)  # fmt: skip
def test_banner_prints_the_api_key_as_the_real_engines_do(
    engine: str, argv: list[str], banner: str
) -> None:
    """Real vLLM logs its non-default args and SGLang its ServerArgs, the API key included: the
    simulator must too, or orch's masking of the logs it records is never exercised."""
    cfg = parse(engine, argv)
    out = io.StringIO()
    log = EngineLog(engine, cfg.tp, stream=out)
    Narrator(cfg, {}, log, log).banner()
    assert banner in out.getvalue()
