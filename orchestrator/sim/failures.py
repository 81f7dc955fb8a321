"""How the real engines die: the tracebacks and error lines they print, for the failure paths.

``StartupFailure`` carries the text an engine prints when it cannot start; the server prints it
through the engine's log format and exits 1. Texts follow the real ones closely enough that a
classifier written against real logs (CUDA out of memory, NCCL error, model not found, port in
use) recognises them.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass
class StartupFailure(Exception):
    """An engine start-up error: ``traceback`` lines, then ``exit_code``."""

    kind: str  # oom | nccl | model_not_found | port_in_use | config | memory
    traceback: list[str]
    exit_code: int = 1


def _tb(frames: list[tuple[str, int, str, str]], final: str) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    return lines + final.splitlines()


_SITE = "/opt/venv/lib/python3.12/site-packages"


def cuda_oom(
    engine: str, *, tried_gib: float, total_gib: float, in_use_gib: float
) -> StartupFailure:
    free_mib = max(0.0, (total_gib - in_use_gib) * 1024)
    message = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried_gib:.2f} GiB. "
        f"GPU 0 has a total capacity of {total_gib:.2f} GiB of which {free_mib:.2f} MiB is free. "
        f"Including non-PyTorch memory, this process has {in_use_gib:.2f} GiB memory in use. "
        f"Of the allocated memory {in_use_gib - 0.46:.2f} GiB is allocated by PyTorch, and "
        "21.48 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
        "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    if engine == "vllm":
        frames = [
            (f"{_SITE}/vllm/v1/engine/core.py", 699, "run_engine_core",
             "engine_core = EngineCoreProc(*args, **kwargs)"),
            (f"{_SITE}/vllm/v1/engine/core.py", 498, "__init__",
             "super().__init__(vllm_config, executor_class, log_stats,"),
            (f"{_SITE}/vllm/v1/engine/core.py", 83, "__init__",
             "self.model_executor = executor_class(vllm_config)"),
            (f"{_SITE}/vllm/v1/worker/gpu_model_runner.py", 2602, "load_model",
             "self.model = model_loader.load_model("),
            (f"{_SITE}/vllm/model_executor/model_loader/base_loader.py", 45, "load_model",
             "model = initialize_model(vllm_config=vllm_config,"),
            (f"{_SITE}/torch/utils/_device.py", 104, "__torch_function__",
             "return func(*args, **kwargs)"),
        ]  # fmt: skip
    else:
        frames = [
            (f"{_SITE}/sglang/srt/managers/scheduler.py", 2790, "run_scheduler_process",
             "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)"),
            (f"{_SITE}/sglang/srt/managers/tp_worker.py", 96, "__init__",
             "self.model_runner = ModelRunner("),
            (f"{_SITE}/sglang/srt/model_executor/model_runner.py", 812, "load_model",
             "self.model = get_model("),
            (f"{_SITE}/torch/utils/_device.py", 104, "__torch_function__",
             "return func(*args, **kwargs)"),
        ]  # fmt: skip
    return StartupFailure("oom", _tb(frames, message))


def nccl_error(engine: str) -> StartupFailure:
    message = (
        "torch.distributed.DistBackendError: NCCL error in: "
        "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled system error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
        "device error.\n"
        "Last error:\n"
        "Cuda failure 'peer access is not supported between these two devices'"
    )
    path = (
        "vllm/distributed/parallel_state.py"
        if engine == "vllm"
        else "sglang/srt/distributed/parallel_state.py"
    )
    frames = [
        (f"{_SITE}/{path}", 1210, "init_distributed_environment",
         "torch.distributed.all_reduce(data, group=_WORLD.cpu_group)"),
        (f"{_SITE}/torch/distributed/c10d_logger.py", 81, "wrapper",
         "return func(*args, **kwargs)"),
        (f"{_SITE}/torch/distributed/distributed_c10d.py", 2810, "all_reduce",
         "work = group.allreduce([tensor], opts)"),
    ]  # fmt: skip
    return StartupFailure("nccl", _tb(frames, message))


def model_not_found(engine: str, model: str) -> StartupFailure:
    hub = (
        "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. "
        "(Request ID: Root=1-6921a4f3-5c1b0d7e2f4a6b8c9d0e1f2a)\n\n"
        f"Repository Not Found for url: https://huggingface.co/api/models/{model}/revision/main.\n"
        "Please make sure you specified the correct `repo_id` and `repo_type`.\n"
        "If you are trying to access a private or gated repo, make sure you are authenticated. "
        "For more details, see https://huggingface.co/docs/huggingface_hub/authentication\n"
        "Invalid username or password."
    )
    first = _tb(
        [(f"{_SITE}/huggingface_hub/utils/_http.py", 409, "hf_raise_for_status",
          "response.raise_for_status()")],
        f"requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
        f"https://huggingface.co/api/models/{model}/revision/main",
    )  # fmt: skip
    second = _tb(
        [(f"{_SITE}/huggingface_hub/hf_api.py", 2665, "model_info",
          "hf_raise_for_status(r)")],
        hub,
    )  # fmt: skip
    between = ["", "The above exception was the direct cause of the following exception:", ""]
    if engine == "vllm":
        final = (
            f"ValueError: Invalid repository ID or local directory specified: '{model}'.\n"
            "Please verify the following requirements:\n"
            "1. Provide a valid Hugging Face repository ID.\n"
            "2. Specify a local directory that contains a recognized configuration file.\n"
            "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
            "   - For Mistral models: ensure the presence of a 'params.json'."
        )
    else:
        final = (
            f"OSError: {model} is not a local folder and is not a valid model identifier listed "
            "on 'https://huggingface.co/models'\nIf this is a private repository, make sure to "
            "pass a token having permission to this repo either by logging in with `hf auth "
            "login` or by passing `token=<your_token>`"
        )
    third = _tb(
        [(f"{_SITE}/transformers/utils/hub.py", 479, "cached_files",
          "raise OSError(")],
        final,
    )  # fmt: skip
    during = ["", "During handling of the above exception, another exception occurred:", ""]
    return StartupFailure("model_not_found", first + between + second + during + third)


def port_in_use(engine: str, host: str, port: int) -> StartupFailure:
    if engine == "vllm":
        frames = [
            (f"{_SITE}/vllm/entrypoints/openai/api_server.py", 1931, "run_server",
             "listen_address, sock = setup_server(args)"),
            (f"{_SITE}/vllm/entrypoints/openai/api_server.py", 1875, "setup_server",
             "sock = create_server_socket(sock_addr)"),
            (f"{_SITE}/vllm/entrypoints/openai/api_server.py", 1830, "create_server_socket",
             "sock.bind(addr)"),
        ]  # fmt: skip
        return StartupFailure(
            "port_in_use", _tb(frames, "OSError: [Errno 98] Address already in use")
        )
    line = (
        f"ERROR:    [Errno 98] error while attempting to bind on address ('{host}', {port}): "
        "[errno 98] address already in use"
    )
    return StartupFailure("port_in_use", [line])


def config_error(text: str) -> StartupFailure:
    """A validation error (ValueError, pydantic) raised while building the engine config."""
    return StartupFailure("config", text.splitlines())


def not_enough_memory(engine: str) -> StartupFailure:
    """The engine's memory pool left no room for the KV cache (``ORCH_SIM_FAIL=memory``).

    SGLang raises it from its model runner when ``--mem-fraction-static`` leaves no token for
    the pool after the weights; vLLM's counterpart is "No available memory for the cache blocks".
    """
    if engine == "vllm":
        frames = [
            (f"{_SITE}/vllm/v1/engine/core.py", 83, "__init__",
             "self._initialize_kv_caches(vllm_config)"),
            (f"{_SITE}/vllm/v1/core/kv_cache_utils.py", 699, "check_enough_kv_cache_memory",
             "raise ValueError("),
        ]  # fmt: skip
        final = (
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    else:
        frames = [
            (f"{_SITE}/sglang/srt/managers/scheduler.py", 2790, "run_scheduler_process",
             "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)"),
            (f"{_SITE}/sglang/srt/model_executor/model_runner.py", 1530, "init_memory_pool",
             'raise RuntimeError('),
        ]  # fmt: skip
        final = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    return StartupFailure("memory", _tb(frames, final))
