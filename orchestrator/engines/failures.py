"""Name the reason an engine died during start-up, from its last log lines.

A person reading a 40-line traceback wants the one-word answer first ("CUDA out of memory"),
then the lines. This module is pure: a table of (cause, pattern) tried in order, most specific
first, because one death often prints several symptoms (an OOM inside NCCL set-up mentions both;
the OOM is what the user must fix).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

OOM = "cuda_out_of_memory"
UNKNOWN_ARGUMENT = "unknown_argument"
MODEL_NOT_FOUND = "model_not_found"
PORT_IN_USE = "port_in_use"
NCCL_ERROR = "nccl_error"
KV_CACHE_MEMORY = "kv_cache_memory"
GPU_MEMORY_IN_USE = "gpu_memory_in_use"
MAX_MODEL_LEN = "max_model_len_too_long"
TOO_FEW_GPUS = "too_few_gpus"
# Deaths and refusals seen from outside the log (not start-up lines): the controller names them.
ANOTHER_SERVER = "another_server_answered"
ENGINE_DIED = "engine_died"
STOPPED = "stopped_by_orch_stop"  # someone ran `orch stop` on the run's server
REQUESTS_FAILED = "all_requests_failed"


@dataclass(frozen=True)
class Cause:
    name: str
    title: str  # what a person reads
    hint: str  # what to do about it
    pattern: re.Pattern[str]


CAUSES: tuple[Cause, ...] = (
    Cause(
        OOM,
        "CUDA out of memory",
        "lower gpu_memory_fraction or max_model_len, use more GPUs (tensor_parallel), "
        "or free the GPUs",
        re.compile(
            r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError|CUDA error: out of memory",
            re.IGNORECASE,
        ),
    ),
    Cause(
        GPU_MEMORY_IN_USE,
        "GPU memory held by other processes",
        "other processes use the GPUs' memory: free them (nvidia-smi; orch ps / orch stop), "
        "or lower gpu_memory_fraction",
        # vLLM: the free memory at start-up is below --gpu-memory-utilization's share
        re.compile(r"Free memory on device .* is less than desired GPU memory utilization"),
    ),
    Cause(
        KV_CACHE_MEMORY,
        "not enough memory for the KV cache",
        "the weights leave no room for the KV cache: raise gpu_memory_fraction (SGLang's "
        "--mem-fraction-static, vLLM's --gpu-memory-utilization), lower max_model_len, or use "
        "more GPUs (tensor_parallel); vLLM's CPU build sizes it with VLLM_CPU_KVCACHE_SPACE "
        "(GiB) in the run's env",
        re.compile(
            # SGLang: the memory pool got no token at all
            r"Not enough memory\. Please try to increase --mem-fraction-static"
            # vLLM: no KV cache block, or fewer than one request of max_model_len needs
            r"|No available memory for the cache blocks"
            r"|KV cache is needed, which is larger than the available KV cache memory"
        ),
    ),
    Cause(
        MAX_MODEL_LEN,
        "max_model_len longer than the model allows",
        "lower max_model_len to the model's max_position_embeddings (or set "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the run's env if you know it is safe)",
        re.compile(r"max_model_len \(\d+\) is greater than the derived max_model_len"),
    ),
    Cause(
        TOO_FEW_GPUS,
        "fewer GPUs than tensor_parallel",
        "tensor_parallel asks for more GPUs than the host shows (CUDA_VISIBLE_DEVICES, "
        "nvidia-smi): lower it or pick a host with more GPUs",
        re.compile(
            r"to less than max local gpu count|CUDA error: invalid device ordinal",
        ),
    ),
    Cause(
        UNKNOWN_ARGUMENT,
        "unknown argument",
        "the engine version on the host does not accept a flag: check extra_args and the "
        "engine's --help",
        # argparse prints "<prog>: error: ..."; ": error: " keeps "TypeError: argument ..." out.
        re.compile(
            r": error: (unrecognized arguments|argument |the following arguments are required)"
        ),
    ),
    Cause(
        MODEL_NOT_FOUND,
        "model not found",
        "check the model id or path, that it is in the host's Hugging Face cache (HF_HOME), "
        "and HF_TOKEN for gated models",
        re.compile(
            r"RepositoryNotFoundError|GatedRepoError|does not appear to have a file named config\.json"
            r"|OSError: (We couldn't connect|Can't load|Incorrect path_or_model_id)"
            r"|is not a local folder and is not a valid model identifier"
            r"|No such file or directory: .*config\.json"
        ),
    ),
    Cause(
        PORT_IN_USE,
        "port already in use",
        "another process holds the port: stop it (orch ps / orch stop) or choose another port",
        re.compile(r"address already in use|EADDRINUSE|\[Errno 98\]", re.IGNORECASE),
    ),
    Cause(
        NCCL_ERROR,
        "NCCL error",
        "multi-GPU communication failed: check the GPUs are visible (CUDA_VISIBLE_DEVICES), "
        "try NCCL_P2P_DISABLE=1, and see NCCL_DEBUG=INFO output",
        re.compile(r"NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError"),
    ),
)

BY_NAME: dict[str, Cause] = {cause.name: cause for cause in CAUSES}

# (title, hint) of the causes the controller finds itself, not in the engine's log.
RUN_CAUSES: dict[str, tuple[str, str]] = {
    ANOTHER_SERVER: (
        "another server answered",
        "another process listens on the run's port, so what answered was not the engine this "
        "run started: stop it (orch ps / orch stop, or the process named), and give runs that "
        "share a machine distinct `port:` values",
    ),
    ENGINE_DIED: (
        "the engine died while serving",
        "read the last log lines; an engine killed by a signal (SIGKILL) may have been ended "
        "by the kernel's OOM killer (dmesg) or by someone else",
    ),
    STOPPED: (
        "stopped by `orch stop`",
        "the server was stopped on purpose, so this measurement is incomplete: measure it "
        "again (`orch run --resume` on the results folder, or a new `orch run`)",
    ),
    REQUESTS_FAILED: (
        "every measured request failed",
        "no figure can be measured from failed requests: see the errors in requests.jsonl and "
        "the server's log",
    ),
}


def classify(log_lines: Sequence[str], causes: Sequence[Cause] = CAUSES) -> str | None:
    """The first cause in table order that any line shows, or None when nothing is recognised.

    ``causes``: the engine's table (``Engine.failure_causes``); both engines share ``CAUSES``
    today, since the symptoms come from the Python stack they share (torch, NCCL, argparse).
    """
    for cause in causes:
        if any(cause.pattern.search(line) for line in log_lines):
            return cause.name
    return None


def describe(cause: str | None) -> tuple[str, str | None]:
    """(title, hint) for a cause returned by classify; an unknown death gets a generic hint."""
    if cause is not None and cause in RUN_CAUSES:
        return RUN_CAUSES[cause]
    if cause is None or cause not in BY_NAME:
        return "exited during start-up", "read the log lines above for the engine's own error"
    found = BY_NAME[cause]
    return found.title, found.hint
