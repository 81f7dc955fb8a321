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
            r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError|CUDA error: out of memory"
            r"|No available memory for the cache blocks",
            re.IGNORECASE,
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
    if cause is None or cause not in BY_NAME:
        return "exited during start-up", "read the log lines above for the engine's own error"
    found = BY_NAME[cause]
    return found.title, found.hint
