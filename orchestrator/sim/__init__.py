"""Engine simulator standing in for vLLM and SGLang: same argv, logs, /metrics and OpenAI API.

Entry points: ``python -m orchestrator.sim {vllm|sglang} ARGS`` and, through a sandbox made by
``sandbox.prepare_sandbox``, the real command lines: ``vllm serve MODEL ...`` and
``python -m sglang.launch_server ...`` (plus a fake ``nvidia-smi`` and models in ``HF_HOME``).

Environment read by the simulated engines:

    ORCH_SIM_SPEED          time scale (default 1): every simulated duration is divided by it.
                            Ground truth, logs and /metrics are all in wall-clock terms, i.e.
                            what the simulator actually did (x SPEED faster than the profile).
    ORCH_SIM_LOAD_S         wall seconds spent "loading the model" before serving (default 1).
    ORCH_SIM_FAIL           oom | nccl | memory (die at start-up), crash_after:S (die S s after ready).
    ORCH_SIM_FAIL_REQUESTS  1: once ready, answer every completion request with HTTP 500
                            (health, /v1/models and /metrics keep answering).
    ORCH_SIM_NIGHT, ORCH_SIM_NOISE, ORCH_SIM_SEED, ORCH_SIM_CHANGE   the night a launch plays in a
                            nightly history: seeded night-to-night noise on step and prefill
                            times, and injected changes (throughput:-10%@20, latency:+15%@20,
                            acceptance:-10%@20, drafter:broken@20); see ``nights.py``.
    ORCH_SIM_STEP_MS, ORCH_SIM_CHUNK_TOKENS   a fixed timing model for measuring clients: every
                            forward step takes this many wall ms, every decode step gives each
                            request exactly N tokens (N > 1: a speculative launch); ``fixed.py``.
    ORCH_SIM_STATE          state directory: gpus.json, gpu-<pid>.json, ground-truth-<pid>.json
                            (default: $TMPDIR/orch-sim-<uid>; the sandbox's scripts set it).
    ORCH_SIM_GPUS, ORCH_SIM_GPU_NAME, ORCH_SIM_GPU_MEMORY_MIB   override the simulated GPUs;
    ORCH_SIM_DRIVER_VERSION  the driver nvidia-smi reports (a nightly's changed attribute).
    CUDA_VISIBLE_DEVICES    which simulated GPUs a server sees, read as CUDA reads it; it uses
                            the first tp x pp x dp of them (default: of all; SGLang dp attention:
                            tp x pp). Engines on disjoint sets
                            share a host; on the same GPUs the later one finds no memory.
    VLLM_SERVER_DEV_MODE=1  vLLM serves POST /reset_prefix_cache (SGLang: /flush_cache always);
                            resets are counted in the ground truth (``cache_resets``).
    HF_HOME / HF_HUB_CACHE  where model ids are looked up (hub/models--ORG--NAME/snapshots).
    VLLM_LOG_STATS_INTERVAL vLLM stat-line period in seconds (default 10), divided by SPEED.
    VLLM_USE_V2_MODEL_RUNNER=1  needed by vLLM for DFlash drafters that mix sliding-window and
                            full attention (e.g. z-lab/Qwen3.6-27B-DFlash); without it their
                            acceptance drops (acceptance length ~1.5), as engines.md says.
"""
