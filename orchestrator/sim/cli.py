"""Command lines of the real engines: the flags they take, parsed by argparse as they do.

Every real flag comes from the one table orch's own checks use (``orchestrator.engines.flags``):
flags the simulator acts on are parsed with their real types; the many others are accepted and
ignored (a user may pass any of them). A flag the real CLI does not have exits 2
with argparse's own message, as the real CLI would.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from typing import Any

from orchestrator.engines.flags import SGLANG_LAUNCH_SERVER, VLLM_SERVE
from orchestrator.sim.flags import SGLANG_ACTS_ON, VLLM_ACTS_ON, add_table
from orchestrator.sim.versions import VLLM_VERSION


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
    pp: int = 1  # pipeline parallel: the layers split over pp x tp GPUs
    dp: int = 1  # data parallel: dp replicas, each on its own pp x tp GPUs ...
    dp_within_tp: bool = False  # ... unless SGLang's dp attention keeps them inside the tp group

    @property
    def shards(self) -> int:
        """GPUs one copy of the weights is split over."""
        return self.tp * self.pp

    @property
    def gpus(self) -> int:
        """GPUs the engine takes, as the real ones do (expert parallel adds none)."""
        return self.shards * (1 if self.dp_within_tp else self.dp)


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
    for other in ("chat", "complete", "bench", "collect-env", "run-batch"):
        sub.add_parser(other)
    add_table(serve, VLLM_SERVE, VLLM_ACTS_ON, group_title="other engine arguments")
    return parser


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
        # like vLLM: --api-key, else the VLLM_API_KEY environment variable
        api_key=(ns.api_key or [None])[0] or os.environ.get("VLLM_API_KEY") or None,
        seed=ns.seed or 0,
        attention_backend=ns.attention_backend,
        max_num_seqs=ns.max_num_seqs,
        enable_metrics=True,
        decode_log_interval=40,
        log_requests=bool(ns.enable_log_requests),
        speculative=spec or None,
        args={k: v for k, v in vars(ns).items() if v is not None},
        pp=_size(parser, "--pipeline-parallel-size", ns.pipeline_parallel_size),
        dp=_size(parser, "--data-parallel-size", ns.data_parallel_size),
    )


def sglang_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="launch_server.py")
    add_table(parser, SGLANG_LAUNCH_SERVER, SGLANG_ACTS_ON)
    return parser


def _size(parser: argparse.ArgumentParser, flag: str, value: int | None) -> int:
    """A parallel size: 1 when not given; below 1 exits 2, as a bad size stops the real one."""
    if value is None:
        return 1
    if value < 1:
        parser.error(f"argument {flag}: must be at least 1, got {value}")
    return value


def parse_sglang(argv: list[str]) -> LaunchConfig:
    """`python -m sglang.launch_server ...` (argv without the program name)."""
    parser = sglang_parser()
    ns = parser.parse_args(argv)
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
        pp=_size(parser, "--pp-size", ns.pipeline_parallel_size),
        dp=_size(parser, "--dp-size", ns.data_parallel_size),
        dp_within_tp=bool(ns.enable_dp_attention),
    )


def parse(engine: str, argv: list[str]) -> LaunchConfig:
    return parse_vllm(argv) if engine == "vllm" else parse_sglang(argv)
