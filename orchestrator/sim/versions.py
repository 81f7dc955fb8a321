"""Version strings the simulated software reports (engines.md: vLLM 0.33.0, SGLang 0.5.23)."""

from __future__ import annotations

VLLM_VERSION = "0.33.0"
SGLANG_VERSION = "0.5.23"
DRIVER_VERSION = "580.95.05"
CUDA_VERSION = "13.0"
