"""The start-up death classifier, on lines as the real engines print them."""

from __future__ import annotations

import pytest

from orchestrator.engines.failures import (
    GPU_MEMORY_IN_USE,
    KV_CACHE_MEMORY,
    MAX_MODEL_LEN,
    MODEL_NOT_FOUND,
    NCCL_ERROR,
    OOM,
    PORT_IN_USE,
    TOO_FEW_GPUS,
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
    # no room for the KV cache: the advice is the opposite of an OOM's (more memory fraction)
    (
        [
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine."
        ],
        KV_CACHE_MEMORY,
    ),
    (
        [
            "[2026-07-30 13:35:13 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        ],
        KV_CACHE_MEMORY,
    ),
    (
        [
            "ValueError: To serve at least one request with the models's max seq len (262144), (16.00 GiB "
            "KV cache is needed, which is larger than the available KV cache memory (3.20 GiB). Based on "
            "the available memory, the estimated maximum model length is 52000."
        ],
        KV_CACHE_MEMORY,
    ),
    # other processes hold the GPUs' memory (vLLM checks at start-up)
    (
        [
            "ValueError: Free memory on device cuda:0 (10.12/47.40 GiB) on startup is less than desired "
            "GPU memory utilization (0.9, 42.66 GiB). Decrease GPU memory utilization or reduce GPU "
            "memory used by other processes."
        ],
        GPU_MEMORY_IN_USE,
    ),
    (
        [
            "ValueError: User-specified max_model_len (300000) is greater than the derived max_model_len "
            "(max_position_embeddings=262144 or model_max_length=None in model's config.json)."
        ],
        MAX_MODEL_LEN,
    ),
    (
        [
            "AssertionError: please set tensor_parallel_size (4) to less than max local gpu count (2)"
        ],
        TOO_FEW_GPUS,
    ),
    (["RuntimeError: CUDA error: invalid device ordinal"], TOO_FEW_GPUS),
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


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_start_up_death_the_simulator_prints_is_classified(engine: str) -> None:
    """The simulator dies as the engines do; each of its deaths must get its cause."""
    from orchestrator.sim import failures as sim

    deaths = [
        (sim.cuda_oom(engine, tried_gib=2.0, total_gib=47.4, in_use_gib=46.0), OOM),
        (sim.nccl_error(engine), NCCL_ERROR),
        (sim.model_not_found(engine, "Qwen/Nope"), MODEL_NOT_FOUND),
        (sim.port_in_use(engine, "127.0.0.1", 8000), PORT_IN_USE),
        (sim.not_enough_memory(engine), KV_CACHE_MEMORY),
    ]
    for death, cause in deaths:
        assert classify(death.traceback) == cause, death.kind


def test_causes_found_outside_the_log_have_titles_and_hints() -> None:
    from orchestrator.engines.failures import ANOTHER_SERVER, ENGINE_DIED, REQUESTS_FAILED

    assert describe(ANOTHER_SERVER)[0] == "another server answered"
    assert "distinct `port:`" in (describe(ANOTHER_SERVER)[1] or "")
    assert describe(ENGINE_DIED)[0] == "the engine died while serving"
    assert describe(REQUESTS_FAILED)[0] == "every measured request failed"
    assert describe(KV_CACHE_MEMORY)[0] == "not enough memory for the KV cache"
    assert "raise gpu_memory_fraction" in (describe(KV_CACHE_MEMORY)[1] or "")
