"""Log lines in each engine's own format (prefixes, date formats), written and flushed at once.

vLLM: ``(APIServer pid=4021) INFO 12-02 10:57:11 [loggers.py:123] message``; that prefix is its
logging format, so uvicorn's lines (``INFO:     Application startup complete.``) come bare, as
vLLM 0.32 prints them (tests/fixtures/vllm_cpu/). SGLang:
``[2026-07-30 13:35:13 TP0] message`` (no rank part with tp=1, no level name).
The stat lines are built by pure functions so tests can pin them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO


class EngineLog:
    def __init__(self, engine: str, tp: int, *, stream: TextIO | None = None) -> None:
        self.engine = engine
        self.tp = tp
        self.pid = os.getpid()
        self.stream = stream or sys.stdout

    def _write(self, lines: Sequence[str]) -> None:
        self.stream.write("".join(line + "\n" for line in lines))
        self.stream.flush()

    def vllm(
        self, message: str, *, source: str, level: str = "INFO", proc: str = "APIServer"
    ) -> None:
        head = f"({proc} pid={self.pid}) {level} {time.strftime('%m-%d %H:%M:%S')} [{source}]"
        self._write([f"{head} {part}" for part in message.split("\n")])

    def sglang(self, message: str, *, rank: bool = True) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        where = " TP0" if rank and self.tp > 1 else ""
        self._write([f"[{stamp}{where}] {part}" for part in message.split("\n")])

    def info(self, message: str, *, source: str = "api_server.py:1896") -> None:
        """An engine-neutral informational line in the engine's own format."""
        if self.engine == "vllm":
            self.vllm(message, source=source)
        else:
            self.sglang(message)

    def warning(self, message: str, *, source: str = "server_args.py:1183") -> None:
        """vLLM: a WARNING record; SGLang: ``[date] WARNING server_args.py:1183: message``."""
        if self.engine == "vllm":
            self.vllm(message, source=source, level="WARNING")
        else:
            self.sglang(f"WARNING {source}: {message}", rank=False)

    def uvicorn(self, message: str, level: str = "INFO") -> None:
        text = f"{level + ':':<9} {message}"
        if self.engine == "vllm":
            self._write([text])
        else:
            self._write([f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {text}"])

    def raw(self, lines: Sequence[str], *, proc: str = "APIServer") -> None:
        """Uncaught-exception text: vLLM still prefixes each line with the process tag."""
        if self.engine == "vllm":
            self._write([f"({proc} pid={self.pid}) {line}" for line in lines])
        else:
            self._write(list(lines))

    def vllm_error(self, lines: Sequence[str], *, source: str, proc: str) -> None:
        """``logger.exception``: vLLM's formatter repeats the header on every line."""
        head = f"({proc} pid={self.pid}) ERROR {time.strftime('%m-%d %H:%M:%S')} [{source}]"
        self._write([f"{head} {line}" for line in lines])


VLLM_BANNER = """
       █     █     █▄   ▄█
 ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}
  █▄█▀ █     █     █     █  model   {model}
   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀
"""


# vLLM 0.32's default SIGTERM shutdown (mode=abort) as its log shows it: process, level, source,
# message after "[shutdown] "; "*" rows only with requests in flight, "+" rows once per worker.
_VLLM_SHUTDOWN = """\
APIServer INFO launcher.py:254 API server: shutdown triggered
APIServer INFO launcher.py:270 API server: stopping engine client mode=abort timeout=0s
APIServer INFO core_client.py:770 MPClient: start timeout=0s
APIServer INFO core_client.py:772 MPClient: stopping engine manager
APIServer INFO utils.py:628 Process manager: send sigterm to process EngineCore
APIServer WARNING utils.py:648 Process manager: force killing remaining processes count=1
APIServer WARNING utils.py:653 Process manager: force killing remaining process EngineCore pid {pid}
EngineCore_DP0 INFO core.py:1454 EngineCore: trigger received signal=SIGTERM
EngineCore_DP0 INFO core.py:1635 EngineCore: start mode=abort timeout=0s
*EngineCore_DP0 INFO core.py:1644 EngineCore: aborting in-flight requests count={in_flight}
EngineCore_DP0 INFO core.py:1666 EngineCore: request processing complete; starting resource teardown
EngineCore_DP0 INFO core.py:1499 EngineCore: exiting busy loop
EngineCore_DP0 INFO multiproc_executor.py:479 Executor: waiting for worker exit count={workers}
+APIServer WARNING system_utils.py:225 force killing sub process VLLM::Worker pid {pid}
APIServer INFO core_client.py:774 MPClient: engine manager stopped
APIServer INFO core_client.py:775 MPClient: cleaning up background resources
APIServer INFO core_client.py:777 MPClient: complete
APIServer INFO launcher.py:279 API server: engine client stopped
APIServer INFO launcher.py:282 API server: signalling HTTP server shutdown
APIServer INFO launcher.py:304 API server: shutting down FastAPI HTTP server
"""


def vllm_shutdown_lines(pid: int, workers: int, in_flight: int) -> list[tuple[str, str, str, str]]:
    """(process, level, source, message) of each line of vLLM 0.32's SIGTERM shutdown."""
    out = []
    for row in _VLLM_SHUTDOWN.splitlines():
        mark = row[0] if row[0] in "*+" else ""
        proc, level, source, message = row.lstrip("*+").split(" ", 3)
        if mark == "*" and not in_flight:
            continue
        text = "[shutdown] " + message.format(pid=pid, workers=workers, in_flight=in_flight)
        out += [(proc, level, source, text)] * (workers if mark == "+" else 1)
    return out


def vllm_request_lines(
    rid: str, body: dict[str, Any], *, max_tokens: int, suffix: str
) -> list[str]:
    """``--enable-log-requests``: vLLM 0.32's "Received request" (every SamplingParams field,
    as it prints them) and "Added request" lines; it prints no line when a request finishes."""

    def num(key: str, default: float, kind: type = float) -> object:
        value = body.get(key, default)
        try:
            return kind(value)
        except (TypeError, ValueError):
            return value  # the real engine refuses it; the simulator only logs it

    stop = body.get("stop") or []
    params = {
        "n": 1, "presence_penalty": num("presence_penalty", 0.0),
        "frequency_penalty": num("frequency_penalty", 0.0),
        "repetition_penalty": num("repetition_penalty", 1.0),
        "temperature": num("temperature", 1.0), "watermarking": None,
        "top_p": num("top_p", 1.0), "top_k": num("top_k", 0, int), "min_p": num("min_p", 0.0),
        "seed": body.get("seed"), "stop": stop if isinstance(stop, list) else [stop],
        "stop_token_ids": [], "bad_words": [], "thinking_token_budget": None,
        "include_stop_str_in_output": False, "ignore_eos": bool(body.get("ignore_eos", False)),
        "max_tokens": max_tokens, "min_tokens": num("min_tokens", 0, int),
        "logprobs": body.get("logprobs"), "prompt_logprobs": None, "skip_special_tokens": True,
        "spaces_between_special_tokens": True, "structured_outputs": None, "extra_args": None,
    }  # fmt: skip
    shown = ", ".join(f"{key}={value!r}" for key, value in params.items())
    return [
        f"Received request {rid}-0: params: SamplingParams({shown}), lora_request: None.",
        f"Added request {rid}-0-{suffix}.",
    ]


def vllm_engine_line(
    *,
    prompt_tps: float,
    gen_tps: float,
    running: int,
    waiting: int,
    kv_usage: float,
    prefix_hit: float,
) -> str:
    return (
        f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, "
        f"Avg generation throughput: {gen_tps:.1f} tokens/s, Running: {running} reqs, "
        f"Waiting: {waiting} reqs, GPU KV cache usage: {kv_usage * 100:.1f}%, "
        f"Prefix cache hit rate: {prefix_hit * 100:.1f}%"
    )


def vllm_spec_line(
    *, drafts: int, draft_tokens: int, accepted: int, per_pos: Sequence[int], interval_s: float
) -> str:
    """vLLM's SpecDecodingLogging line for one interval (engines.md definitions)."""
    mean_len = 1 + (accepted / drafts if drafts else 0.0)
    rates = ", ".join(f"{(a / drafts if drafts else 0.0):.3f}" for a in per_pos)
    avg = f"{accepted / draft_tokens * 100:.1f}%" if draft_tokens else "nan%"
    span = interval_s if interval_s > 0 else 1.0
    return (
        f"SpecDecoding metrics: Mean acceptance length: {mean_len:.2f}, "
        f"Accepted throughput: {accepted / span:.2f} tokens/s, "
        f"Drafted throughput: {draft_tokens / span:.2f} tokens/s, "
        f"Accepted: {accepted} tokens, Drafted: {draft_tokens} tokens, "
        f"Per-position acceptance rate: {rates}, Avg Draft acceptance rate: {avg}"
    )


def sglang_decode_line(
    *,
    running: int,
    tokens: int,
    usage: float,
    hybrid: bool,
    mamba_num: int,
    mamba_usage: float,
    accept_len: float | None,
    accept_rate: float | None,
    gen_tps: float,
    queue: int,
) -> str:
    parts = [f"Decode batch, #running-req: {running}"]
    if hybrid:
        parts += [
            f"#full token: {tokens}",
            f"full token usage: {usage:.2f}",
            f"mamba num: {mamba_num}",
            f"mamba usage: {mamba_usage:.2f}",
        ]
    else:
        parts += [f"#token: {tokens}", f"token usage: {usage:.2f}"]
    if accept_len is not None:
        parts.append(f"accept len: {accept_len:.2f}")
        if accept_rate is not None:
            parts.append(f"accept rate: {accept_rate:.2f}")
    parts += [
        "cuda graph: True",
        f"gen throughput (token/s): {gen_tps:.2f}",
        f"#queue-req: {queue}",
    ]
    return ", ".join(parts)


def sglang_prefill_line(
    *,
    new_seq: int,
    new_tokens: int,
    usage: float,
    hybrid: bool,
    mamba_usage: float,
    running: int,
    queue: int,
    input_tps: float,
) -> str:
    usage_part = (
        f"full token usage: {usage:.2f}, mamba usage: {mamba_usage:.2f}"
        if hybrid
        else f"token usage: {usage:.2f}"
    )
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_tokens}, #cached-token: 0, "
        f"{usage_part}, #running-req: {running}, #queue-req: {queue}, cuda graph: True, "
        f"input throughput (token/s): {input_tps:.2f}"
    )
