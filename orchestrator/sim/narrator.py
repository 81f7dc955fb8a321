"""What a simulated engine prints over its life, in each engine's words and formats.

Start-up (banner, loading, loaded, ready), shutdown, start-up failures and a crash while
serving. Kept apart from ``server.py`` so the process logic stays readable.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from orchestrator.sim.cache import DEV_MODE_WARNING, dev_mode
from orchestrator.sim.cli import LaunchConfig
from orchestrator.sim.failures import StartupFailure
from orchestrator.sim.logs import VLLM_BANNER, EngineLog, vllm_shutdown_lines
from orchestrator.sim.startup import Plan
from orchestrator.sim.versions import VLLM_VERSION


class Narrator:
    def __init__(
        self, cfg: LaunchConfig, env: Mapping[str, str], log: EngineLog, err: EngineLog
    ) -> None:
        self.cfg = cfg
        self.env = env
        self.log = log
        self.err = err
        self.started = time.time()
        self.vllm = cfg.engine == "vllm"

    def banner(self) -> None:
        """The arguments as the engines print them: secrets included (vLLM's
        ``'api_key': ['...']``, SGLang's ``api_key='...'``), for orch must hide them itself."""
        cfg = self.cfg
        if self.vllm:
            banner = VLLM_BANNER.format(version=VLLM_VERSION, model=cfg.model)
            self.log.vllm(banner, source="api_utils.py:347")
            shown = {k: v for k, v in cfg.args.items() if k != "subparser"}
            self.log.vllm(f"non-default args: {shown}", source="api_utils.py:286")
        else:
            args = ", ".join(f"{k}={v!r}" for k, v in cfg.args.items())
            self.log.sglang(f"server_args=ServerArgs({args})", rank=False)

    def loading(self, plan: Plan) -> None:
        cfg, t = self.cfg, plan.target
        if self.vllm:
            self.log.vllm(f"Resolved architecture: {t.architecture}", source="model.py:547")
            self.log.vllm(f"Using max model len {plan.max_model_len}", source="model.py:1510")
            for warning in plan.warnings:
                self.log.vllm(warning, source="speculative.py:305", level="WARNING")
            self.log.vllm(
                "Chunked prefill is enabled with max_num_batched_tokens=8192.",
                source="scheduler.py:225",
            )
            spec = "None"
            if plan.spec:
                spec = f"SpeculativeConfig(method={plan.spec.method!r}, model={plan.spec.draft_name!r}, num_spec_tokens={plan.spec.num_draft_tokens})"
            self.log.vllm(
                f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model={cfg.model!r}, speculative_config={spec}, "
                f"tokenizer={cfg.model!r}, dtype=torch.bfloat16, max_seq_len={plan.max_model_len}, tensor_parallel_size={cfg.tp}, "
                f"pipeline_parallel_size=1, seed={cfg.seed}, served_model_name={cfg.served_names[0]}, enable_prefix_caching=True",
                source="core.py:93",
                proc="EngineCore_DP0",
            )
            for rank in range(cfg.tp):
                self.log.vllm(
                    f"rank {rank} in world size {cfg.tp} is assigned as DP rank 0, PP rank 0, TP rank {rank}, EP rank {rank}",
                    source="parallel_state.py:1208",
                    proc=f"Worker_TP{rank}",
                )
            backend = (cfg.attention_backend or "FLASHINFER").upper()
            self.log.vllm(f"Using {backend} backend.", source="cuda.py:366", proc="Worker_TP0")
            self.log.vllm(
                f"Starting to load model {cfg.model}...",
                source="gpu_model_runner.py:2602",
                proc="Worker_TP0",
            )
        else:
            for warning in plan.warnings:
                self.log.warning(warning)
            self.log.sglang("Init torch distributed begin.")
            self.log.sglang("Init torch distributed ends. mem usage=0.78 GB")
            avail = plan.gpu.memory_mib / 1024 - 0.8
            self.log.sglang(f"Load weight begin. avail mem={avail:.2f} GB")

    def loaded(self, plan: Plan) -> None:
        took = time.time() - self.started
        cfg = self.cfg
        if self.vllm:
            self.log.vllm(
                f"Loading weights took {took:.2f} seconds",
                source="default_loader.py:267",
                proc="Worker_TP0",
            )
            if plan.draft is not None:
                self.log.vllm(
                    f"Loading drafter model {plan.draft.name} ({plan.draft.architecture})",
                    source="eagle.py:1012",
                    proc="Worker_TP0",
                )
            if (
                plan.spec
                and plan.spec.method == "dflash"
                and plan.draft
                and plan.draft.mixes_sliding_and_full
                and self.env.get("VLLM_USE_V2_MODEL_RUNNER") != "1"
            ):
                self.log.vllm(
                    "The DFlash draft model mixes sliding-window and full-attention layers; the V1 model runner runs all draft layers with full attention. Set VLLM_USE_V2_MODEL_RUNNER=1 for such drafters.",
                    source="dflash.py:141",
                    level="WARNING",
                    proc="Worker_TP0",
                )
            self.log.vllm(
                f"Model loading took {plan.weights_gib:.2f} GiB and {took:.6f} seconds",
                source="gpu_model_runner.py:2653",
                proc="Worker_TP0",
            )
            kv_gib = (
                plan.kv_capacity_tokens * plan.target.kv_bytes_per_token() / cfg.shards / 1024**3
            )
            self.log.vllm(
                f"Available KV cache memory: {kv_gib:.2f} GiB",
                source="gpu_worker.py:298",
                proc="Worker_TP0",
            )
            self.log.vllm(
                f"GPU KV cache size: {plan.kv_capacity_tokens:,} tokens, Maximum concurrency for {plan.max_model_len:,} tokens per request: {plan.kv_capacity_tokens / plan.max_model_len:.2f}x",
                source="kv_cache_utils.py:2327",
                proc="EngineCore_DP0",
            )
        else:
            avail = plan.gpu.memory_mib / 1024 - 0.8 - plan.weights_gib
            self.log.sglang(
                f"Load weight end. type={plan.target.architecture}, dtype=torch.bfloat16, avail mem={avail:.2f} GB, mem usage={plan.weights_gib:.2f} GB."
            )
            kv_gb = (
                plan.kv_capacity_tokens
                * plan.target.kv_bytes_per_token()
                / cfg.shards
                / 2
                / 1024**3
            )
            self.log.sglang(
                f"KV Cache is allocated. #tokens: {plan.kv_capacity_tokens}, K size: {kv_gb:.2f} GB, V size: {kv_gb:.2f} GB"
            )
            if plan.target.is_hybrid:
                self.log.sglang(
                    f"Mamba Cache is allocated. max_mamba_cache_size: {plan.max_running}, conv_state size: 0.47GB, ssm_state size: 2.81GB"
                )
            if plan.spec:
                self.log.sglang(
                    f"Speculative decoding: algorithm={plan.spec.label}, num_draft_tokens={plan.spec.num_draft_tokens + 1}, draft model={plan.spec.draft_name or cfg.model}"
                )

    def ready(self, plan: Plan) -> None:
        cfg = self.cfg
        took = time.time() - self.started
        if self.vllm:
            self.log.vllm(
                f"init engine (profile, create kv cache, warmup model) took {took:.2f} s",
                source="core.py:402",
                proc="EngineCore_DP0",
            )
            self.log.vllm("Supported tasks: ['generate']", source="entry.py:136")
            dev = dev_mode(self.env)
            if dev:
                self.log.vllm(DEV_MODE_WARNING, source="api_server.py:1770", level="WARNING")
            self.log.vllm(
                f"Starting vLLM server on http://{cfg.host}:{cfg.port}", source="entry.py:140"
            )
            self.log.vllm("Available routes are:", source="launcher.py:186")
            for path, methods in (
                ("/health", "GET"),
                ("/version", "GET"),
                ("/v1/models", "GET"),
                ("/metrics", "GET"),
                ("/v1/chat/completions", "POST"),
                ("/v1/completions", "POST"),
                *((("/reset_prefix_cache", "POST"),) if dev else ()),
            ):
                self.log.vllm(f"Route: {path}, Methods: {methods}", source="launcher.py:195")
            self.log.uvicorn(f"Started server process [{os.getpid()}]")
            self.log.uvicorn("Waiting for application startup.")
            self.log.uvicorn("Application startup complete.")
        else:
            self.log.sglang(
                f"max_total_num_tokens={plan.kv_capacity_tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests={plan.max_running}, context_len={plan.max_model_len}, available_gpu_mem=3.47 GB"
            )
            self.log.sglang("The server is fired up and ready to roll!", rank=False)

    def sglang_http_started(self) -> None:
        self.log.uvicorn(f"Started server process [{os.getpid()}]")
        self.log.uvicorn("Waiting for application startup.")
        self.log.uvicorn("Application startup complete.")
        self.log.uvicorn(
            f"Uvicorn running on http://{self.cfg.host}:{self.cfg.port} (Press CTRL+C to quit)"
        )

    def shutdown_engine(self, in_flight: int) -> None:
        """vLLM 0.32's default SIGTERM shutdown (``mode=abort``) up to the HTTP server's turn:
        the engine process is told, aborts what runs, and is force-killed with its workers."""
        if not self.vllm:
            return
        lines = vllm_shutdown_lines(os.getpid(), self.cfg.shards, in_flight)
        for proc, level, source, message in lines:
            self.log.vllm(message, source=source, level=level, proc=proc)

    def shutdown(self) -> None:
        """uvicorn's last lines; vLLM's server prints no "Finished server process" (SGLang's
        does)."""
        self.log.uvicorn("Shutting down")
        self.log.uvicorn("Waiting for application shutdown.")
        self.log.uvicorn("Application shutdown complete.")
        if not self.vllm:
            self.log.uvicorn(f"Finished server process [{os.getpid()}]")

    def failure(self, failure: StartupFailure) -> None:
        if self.vllm and failure.kind in ("oom", "nccl"):
            self.err.vllm_error(
                ["WorkerProc failed to start."] + failure.traceback,
                source="multiproc_executor.py:671",
                proc="Worker_TP0",
            )
            self.err.vllm_error(
                [
                    "EngineCore failed to start.",
                    "Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.",
                ],
                source="core.py:708",
                proc="EngineCore_DP0",
            )
            self.err.raw(
                [
                    "Traceback (most recent call last):",
                    '  File "/opt/venv/bin/vllm", line 10, in <module>',
                    "    sys.exit(main())",
                    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
                ]
            )
        elif self.vllm:
            self.err.raw(failure.traceback)
        elif failure.kind in ("oom", "nccl"):
            self.err.sglang("Scheduler hit an exception: " + failure.traceback[0])
            self.err.raw(failure.traceback[1:])
            self.err.sglang(
                "Received sigquit from a child process. It usually means the child failed.",
                rank=False,
            )
        else:
            self.err.raw(failure.traceback)

    def crash(self) -> None:
        """A simulated fatal CUDA error while serving (ORCH_SIM_FAIL=crash_after:S)."""
        lines = [
            "Traceback (most recent call last):",
            '  File "/opt/venv/lib/python3.12/site-packages/torch/cuda/graphs.py", line 88, in replay',
            "    super().replay()",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ]
        if self.vllm:
            self.err.vllm_error(
                ["EngineCore encountered a fatal error."] + lines,
                source="core.py:790",
                proc="EngineCore_DP0",
            )
            self.err.vllm_error(
                [
                    "AsyncLLM output_handler failed.",
                    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
                ],
                source="async_llm.py:480",
                proc="APIServer",
            )
        else:
            self.err.sglang("Scheduler hit an exception: " + lines[0])
            self.err.raw(lines[1:])
            self.err.sglang(
                "Received sigquit from a child process. It usually means the child failed.",
                rank=False,
            )
