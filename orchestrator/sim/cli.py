"""Command lines of the real engines: the flags they take, parsed by argparse as they do.

Flags the simulator acts on are parsed with their real types; the many other real flags are
accepted and ignored (a user may pass any of them). A flag the real CLI does not have exits 2
with argparse's own message, as the real CLI would.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.sim.flags import (
    SGLANG_BOOL_FLAGS,
    SGLANG_VALUE_FLAGS,
    VLLM_BOOL_FLAGS,
    VLLM_SHORT,
    VLLM_VALUE_FLAGS,
)
from orchestrator.sim.versions import VLLM_VERSION

BOOL = argparse.BooleanOptionalAction

SGLANG_SPEC_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH"]


@dataclass(frozen=True)
class LaunchConfig:
    """What the simulator needs from a command line, engine-neutral."""

    engine: str  # "vllm" | "sglang"
    model: str
    host: str
    port: int
    tp: int
    max_model_len: int | None
    mem_fraction: float | None
    served_names: tuple[str, ...]
    api_key: str | None
    seed: int
    attention_backend: str | None
    max_num_seqs: int | None
    enable_metrics: bool
    decode_log_interval: int
    log_requests: bool
    speculative: dict[str, Any] | None  # vLLM's JSON, or SGLang's flags as a dict
    args: dict[str, Any] = field(default_factory=dict)  # every parsed flag, for /server_info


def _add_flags(
    group: argparse._ActionsContainer,
    values: list[str],
    bools: list[str],
    short: dict[str, str] | None = None,
) -> None:
    """Real flags the simulator accepts and ignores (BooleanOptionalAction: `--x`/`--no-x`)."""
    short = short or {}
    for name in values:
        opts = [f"--{name}"] + ([short[name]] if name in short else [])
        group.add_argument(*opts, help=argparse.SUPPRESS)
    for name in bools:
        opts = [f"--{name}"] + ([short[name]] if name in short else [])
        group.add_argument(*opts, action=BOOL, default=None, help=argparse.SUPPRESS)


def vllm_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm", description="vLLM CLI")
    parser.add_argument("-v", "--version", action="version", version=VLLM_VERSION)
    sub = parser.add_subparsers(required=False, dest="subparser")
    serve = sub.add_parser(
        "serve",
        help="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.",
        usage="vllm serve [model_tag] [options]",
    )
    serve.add_argument("model_tag", nargs="?", help="The model tag to serve")
    serve.add_argument("--model", default=None)
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, default=None)
    serve.add_argument("--max-model-len", type=_human_int, default=None)
    serve.add_argument("--gpu-memory-utilization", type=float, default=None)
    serve.add_argument("--served-model-name", nargs="+", default=None)
    serve.add_argument("--speculative-config", "-sc", type=json.loads, default=None)
    serve.add_argument("--attention-backend", default=None)
    serve.add_argument("--seed", type=int, default=None)
    serve.add_argument("--api-key", nargs="+", default=None)
    serve.add_argument("--max-num-seqs", type=int, default=None)
    serve.add_argument("--enable-log-requests", action=BOOL, default=None)
    for other in ("chat", "complete", "bench", "collect-env", "run-batch"):
        sub.add_parser(other)
    group = serve.add_argument_group("other engine arguments")
    _add_flags(group, VLLM_VALUE_FLAGS, VLLM_BOOL_FLAGS, VLLM_SHORT)
    return parser


def _human_int(text: str) -> int:
    """vLLM accepts 32k / 1M style sizes for --max-model-len."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", text.strip())
    if not match:
        raise ValueError(text)
    scale = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3}[match.group(2).lower()]
    if match.group(2).isupper():
        scale = {"K": 1024, "M": 1024**2, "G": 1024**3}[match.group(2)]
    return int(float(match.group(1)) * scale)


def _vllm_normalise(argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    """vLLM's FlexibleArgumentParser: `--a_b` == `--a-b`; `--speculative-config.k v` dotted keys."""
    out: list[str] = []
    dotted: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--speculative-config.") or arg.startswith("--speculative_config."):
            key, eq, value = arg[len("--speculative-config.") :].partition("=")
            if not eq:
                value = argv[i + 1] if i + 1 < len(argv) else ""
                i += 1
            try:
                dotted[key] = json.loads(value)
            except ValueError:
                dotted[key] = value
        elif arg.startswith("--"):
            key, eq, value = arg.partition("=")
            out.append(key.replace("_", "-") + eq + value)
        else:
            out.append(arg)
        i += 1
    return out, dotted


def parse_vllm(argv: list[str]) -> LaunchConfig:
    """`vllm serve MODEL ...` (argv without the program name). Exits 2 on a bad command line."""
    parser = vllm_parser()
    normalised, dotted = _vllm_normalise(argv)
    ns = parser.parse_args(normalised)
    if ns.subparser != "serve":
        parser.print_help()
        raise SystemExit(0 if ns.subparser is None else 2)
    model = ns.model_tag or ns.model
    if not model:
        parser.error("the following arguments are required: model_tag")
    spec = dict(ns.speculative_config or {})
    spec.update(dotted)
    names = tuple(ns.served_model_name or [model])
    return LaunchConfig(
        engine="vllm",
        model=model,
        host=ns.host or "0.0.0.0",
        port=ns.port or 8000,
        tp=ns.tensor_parallel_size or 1,
        max_model_len=ns.max_model_len,
        mem_fraction=ns.gpu_memory_utilization or 0.9,
        served_names=names,
        api_key=(ns.api_key or [None])[0],
        seed=ns.seed or 0,
        attention_backend=ns.attention_backend,
        max_num_seqs=ns.max_num_seqs,
        enable_metrics=True,
        decode_log_interval=40,
        log_requests=bool(ns.enable_log_requests),
        speculative=spec or None,
        args={k: v for k, v in vars(ns).items() if v is not None},
    )


def sglang_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="launch_server.py")
    parser.add_argument("--model-path", "--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=1)
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument("--context-length", type=int, default=None)
    parser.add_argument("--enable-metrics", action="store_true")
    parser.add_argument("--decode-log-interval", type=int, default=40)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--speculative-algorithm", choices=SGLANG_SPEC_ALGORITHMS, default=None)
    parser.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    parser.add_argument("--speculative-num-steps", type=int, default=None)
    parser.add_argument("--speculative-eagle-topk", type=int, default=None)
    parser.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    parser.add_argument("--attention-backend", default=None)
    parser.add_argument("--page-size", type=int, default=None)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--random-seed", type=int, default=None)
    parser.add_argument("--max-running-requests", type=int, default=None)
    for name in SGLANG_VALUE_FLAGS:
        if name != "max-running-requests":
            parser.add_argument(f"--{name}")
    for name in SGLANG_BOOL_FLAGS:
        parser.add_argument(f"--{name}", action="store_true")
    parser.add_argument("--cuda-graph-bs", type=int, nargs="+")
    parser.add_argument("--pp-size", dest="pipeline_parallel_size")
    parser.add_argument("--dp-size", dest="data_parallel_size")
    parser.add_argument("--ep-size", dest="expert_parallel_size")
    return parser


def parse_sglang(argv: list[str]) -> LaunchConfig:
    """`python -m sglang.launch_server ...` (argv without the program name)."""
    ns = sglang_parser().parse_args(argv)
    spec = None
    if ns.speculative_algorithm:
        spec = {
            "algorithm": ns.speculative_algorithm,
            "draft_model_path": ns.speculative_draft_model_path,
            "num_steps": ns.speculative_num_steps,
            "eagle_topk": ns.speculative_eagle_topk,
            "num_draft_tokens": ns.speculative_num_draft_tokens,
        }
    return LaunchConfig(
        engine="sglang",
        model=ns.model_path,
        host=ns.host,
        port=ns.port,
        tp=ns.tensor_parallel_size,
        max_model_len=ns.context_length,
        mem_fraction=ns.mem_fraction_static,
        served_names=(ns.served_model_name or ns.model_path,),
        api_key=ns.api_key,
        seed=ns.random_seed if ns.random_seed is not None else 0,
        attention_backend=ns.attention_backend,
        max_num_seqs=ns.max_running_requests,
        enable_metrics=bool(ns.enable_metrics),
        decode_log_interval=max(1, ns.decode_log_interval),
        log_requests=bool(ns.log_requests),
        speculative=spec,
        args=dict(vars(ns)),
    )


def parse(engine: str, argv: list[str]) -> LaunchConfig:
    return parse_vllm(argv) if engine == "vllm" else parse_sglang(argv)
