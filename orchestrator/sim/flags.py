"""How the simulator parses the real engines' flags: their table is ``orchestrator.engines.flags``.

The table (every flag of vLLM 0.33 ``serve`` and SGLang 0.5 ``launch_server``) is shared with the
adapters, which resolve ``extra_args`` against it: what the simulator accepts is what orch's checks
know, one list for both. Here: the types of the flags the simulator acts on; every other real
flag is accepted and ignored, and anything not in the table is an unknown flag that exits 2, as
it would on a real host. The parsers keep argparse's ``allow_abbrev``, like the real ones.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from orchestrator.engines.flags import HELP, FlagTable

SGLANG_SPEC_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH"]
BOOL = argparse.BooleanOptionalAction


def human_int(text: str) -> int:
    """vLLM accepts 32k / 1M style sizes for --max-model-len."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", text.strip())
    if not match:
        raise ValueError(text)
    scale = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3}[match.group(2).lower()]
    if match.group(2).isupper():
        scale = {"K": 1024, "M": 1024**2, "G": 1024**3}[match.group(2)]
    return int(float(match.group(1)) * scale)


# canonical flag -> add_argument keywords, for the flags the simulator acts on
VLLM_ACTS_ON: dict[str, dict[str, Any]] = {
    "--model": {"default": None},
    "--host": {"default": None},
    "--port": {"type": int, "default": None},
    "--tensor-parallel-size": {"type": int, "default": None},
    "--max-model-len": {"type": human_int, "default": None},
    "--gpu-memory-utilization": {"type": float, "default": None},
    "--served-model-name": {"nargs": "+", "default": None},
    "--speculative-config": {"type": json.loads, "default": None},
    "--attention-backend": {"default": None},
    "--seed": {"type": int, "default": None},
    "--api-key": {"nargs": "+", "default": None},
    "--max-num-seqs": {"type": int, "default": None},
    "--enable-log-requests": {"action": BOOL, "default": None},
    "--pipeline-parallel-size": {"type": int, "default": None},
    "--data-parallel-size": {"type": int, "default": None},
    "--enable-expert-parallel": {"action": BOOL, "default": None},
}
SGLANG_ACTS_ON: dict[str, dict[str, Any]] = {
    "--model-path": {"required": True},
    "--host": {"default": "127.0.0.1"},
    "--port": {"type": int, "default": 30000},
    "--tensor-parallel-size": {"type": int, "default": 1},
    "--mem-fraction-static": {"type": float, "default": None},
    "--context-length": {"type": int, "default": None},
    "--enable-metrics": {"action": "store_true"},
    "--decode-log-interval": {"type": int, "default": 40},
    "--served-model-name": {"default": None},
    "--speculative-algorithm": {"choices": SGLANG_SPEC_ALGORITHMS, "default": None},
    "--speculative-num-steps": {"type": int, "default": None},
    "--speculative-eagle-topk": {"type": int, "default": None},
    "--speculative-num-draft-tokens": {"type": int, "default": None},
    "--attention-backend": {"default": None},
    "--page-size": {"type": int, "default": None},
    "--api-key": {"default": None},
    "--random-seed": {"type": int, "default": None},
    "--max-running-requests": {"type": int, "default": None},
    "--cuda-graph-bs": {"type": int, "nargs": "+"},
    "--pipeline-parallel-size": {"type": int, "default": 1},
    "--data-parallel-size": {"type": int, "default": 1},
    "--expert-parallel-size": {"type": int, "default": 1},
    "--enable-dp-attention": {"action": "store_true"},
}


def add_table(
    parser: argparse.ArgumentParser,
    table: FlagTable,
    acts_on: dict[str, dict[str, Any]],
    *,
    group_title: str | None = None,
) -> None:
    """Every flag of ``table``: typed when the simulator acts on it, else accepted and ignored."""
    missing = set(acts_on) - {flag.name for flag in table.flags}
    if missing:  # a typo here would silently turn a simulated flag into an unknown one
        raise ValueError(f"{table.engine}: not in the flag table: {sorted(missing)}")
    others: argparse._ActionsContainer = (
        parser.add_argument_group(group_title) if group_title else parser
    )
    for flag in table.flags:
        if flag is HELP:
            continue  # argparse's own
        if flag.name in acts_on:
            parser.add_argument(*flag.names, **acts_on[flag.name])
        elif flag.value:
            others.add_argument(*flag.names, help=argparse.SUPPRESS)
        elif flag.negatable:  # vLLM's switches: --x / --no-x
            others.add_argument(*flag.names, action=BOOL, default=None, help=argparse.SUPPRESS)
        else:
            others.add_argument(*flag.names, action="store_true", help=argparse.SUPPRESS)
