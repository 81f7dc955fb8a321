"""The start-up death classifier, on lines as the real engines print them."""

from __future__ import annotations

import pytest

from orchestrator.engines.failures import (
    MODEL_NOT_FOUND,
    NCCL_ERROR,
    OOM,
    PORT_IN_USE,
    UNKNOWN_ARGUMENT,
    classify,
    describe,
)

CASES = [
    # CUDA out of memory
    (
        [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 47.40 GiB of which 1.12 GiB is free."
        ],
        OOM,
    ),
    (
        [
            "(EngineCore_0 pid=812) torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB"
        ],
        OOM,
    ),
    (["RuntimeError: CUDA error: out of memory"], OOM),
    (
        [
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine."
        ],
        OOM,
    ),
    # unknown argument (argparse)
    (
        [
            "usage: vllm serve [model_tag] [options]",
            "vllm serve: error: unrecognized arguments: --max-num-seq 4",
        ],
        UNKNOWN_ARGUMENT,
    ),
    (["launch_server.py: error: unrecognized arguments: --speculative-foo 3"], UNKNOWN_ARGUMENT),
    (
        ["vllm serve: error: argument --tensor-parallel-size/-tp: invalid int value: 'two'"],
        UNKNOWN_ARGUMENT,
    ),
    (
        ["launch_server.py: error: the following arguments are required: --model-path"],
        UNKNOWN_ARGUMENT,
    ),
    # model not found
    (
        [
            "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=1-6745)"
        ],
        MODEL_NOT_FOUND,
    ),
    (
        [
            "OSError: Qwen/Qwen3.6-27X does not appear to have a file named config.json. Checkout "
            "'https://huggingface.co/Qwen/Qwen3.6-27X/tree/main' for available files."
        ],
        MODEL_NOT_FOUND,
    ),
    (
        [
            "OSError: Can't load the configuration of 'Qwen/Nope'. If you were trying to load it from "
            "'https://huggingface.co/models', make sure you don't have a local directory with the same name."
        ],
        MODEL_NOT_FOUND,
    ),
    (["huggingface_hub.errors.GatedRepoError: 401 Client Error."], MODEL_NOT_FOUND),
    # port in use (uvicorn prints it lower-case)
    (
        [
            "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): "
            "address already in use"
        ],
        PORT_IN_USE,
    ),
    (["OSError: [Errno 98] Address already in use"], PORT_IN_USE),
    # NCCL
    (
        [
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.21.5"
        ],
        NCCL_ERROR,
    ),
    (
        ["RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"],
        NCCL_ERROR,
    ),
    # an OOM during NCCL set-up is an OOM: that is what the user must fix
    (
        [
            "RuntimeError: NCCL error: unhandled cuda error",
            "torch.OutOfMemoryError: CUDA out of memory.",
        ],
        OOM,
    ),
    # nothing recognisable
    (
        [
            "Traceback (most recent call last):",
            "TypeError: argument of type 'NoneType' is not iterable",
        ],
        None,
    ),
    (
        ["INFO 12-02 10:57:11 [api_server.py:1024] Starting vLLM server on http://127.0.0.1:8000"],
        None,
    ),
    ([], None),
]


@pytest.mark.parametrize(("lines", "expected"), CASES)
def test_classify(lines: list[str], expected: str | None) -> None:
    assert classify(lines) == expected


def test_describe_gives_title_and_hint() -> None:
    assert describe(OOM)[0] == "CUDA out of memory"
    assert "gpu_memory_fraction" in (describe(OOM)[1] or "")
    assert describe(None) == (
        "exited during start-up",
        "read the log lines above for the engine's own error",
    )
