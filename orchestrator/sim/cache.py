"""The engines' prefix-cache reset endpoints, with the real conditions and answers.

vLLM serves ``POST /reset_prefix_cache`` only when ``VLLM_SERVER_DEV_MODE`` is on (it says so
with a SECURITY WARNING at start; without it the path is a 404) and answers ``{"success":
false}`` while running requests hold KV blocks. SGLang serves ``/flush_cache`` (GET or POST)
always and answers 400 while requests are running or waiting. The simulator models no prefix
cache (its hit rate is 0), so a reset changes no timing; every accepted reset is counted, with
its time, in the ground truth so tests can check when the controller reset it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from orchestrator.sim.engine import EngineCore
from orchestrator.sim.logs import EngineLog

DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
DEV_MODE_WARNING = (
    "SECURITY WARNING: Development endpoints are enabled! This should not be used in production!"
)
# SGLang answers this text whatever happened; the status code says which
FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)


def dev_mode(environ: Mapping[str, str]) -> bool:
    """vLLM's ``bool(int(os.getenv("VLLM_SERVER_DEV_MODE", "0")))``; a non-integer is off."""
    try:
        return int(environ.get(DEV_MODE_ENV) or "0") != 0
    except ValueError:
        return False


class CacheResets:
    """Decides each reset as the engine would, logs it in the engine's words, counts it."""

    def __init__(self, engine_name: str, log: EngineLog) -> None:
        self.vllm = engine_name == "vllm"
        self.log = log
        self.times: list[float] = []  # accepted resets (Unix seconds)
        self.refused = 0

    def reset(self, engine: EngineCore | None) -> bool:
        """Reset now if the engine allows it; False (and a log line) when it refuses."""
        if self.vllm:
            self.log.vllm("Resetting prefix cache...", source="api_server.py:1032")
        if engine is None:
            self.refused += 1
            return False
        busy = len(engine.running) if self.vllm else len(engine.running) + len(engine.waiting)
        if busy:
            self.refused += 1
            self._refusal(engine)
            return False
        self.times.append(time.time())
        if not self.vllm:
            self.log.sglang("Cache flushed successfully!")
        return True

    def _refusal(self, engine: EngineCore) -> None:
        if self.vllm:
            blocks = sum(-(-(r.prompt_tokens + r.generated) // 16) for r in engine.running)
            self.log.vllm(
                f"Failed to reset prefix cache because some blocks ({blocks}) are not freed yet",
                source="block_pool.py:389",
                level="WARNING",
                proc="EngineCore_DP0",
            )
        else:
            self.log.warning(
                "Cache not flushed because there are pending requests. "
                f"#queue-req: {len(engine.waiting)}, #running-req: {len(engine.running)}",
                source="scheduler.py:2456",
            )

    def truth(self) -> dict[str, Any]:
        return {"count": len(self.times), "times": list(self.times), "refused": self.refused}
