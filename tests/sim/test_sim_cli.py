"""The simulator parses the real engines' command lines, and rejects what they reject."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.sim.cli import parse_sglang, parse_vllm

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
