"""HTTP endpoints of the simulated engines (aiohttp), with the real paths and behaviours.

vLLM: /health /version /v1/models /metrics /v1/completions /v1/chat/completions, and POST
/reset_prefix_cache with ``VLLM_SERVER_DEV_MODE=1``; ``--api-key`` guards /v1/* only. SGLang adds
/health_generate /server_info /get_server_info /model_info /get_model_info /generate
/flush_cache; its key guards everything but /health* and /metrics, and /metrics exists only
with ``--enable-metrics``. Both: GET /sim/ground_truth (the simulator's own).
"""

from __future__ import annotations

import asyncio
import functools
import http
import time
import uuid
from collections.abc import Mapping
from typing import Any, Protocol

from aiohttp import web

from orchestrator.sim import openai_api as api
from orchestrator.sim.cache import FLUSH_TEXT
from orchestrator.sim.cli import LaunchConfig
from orchestrator.sim.engine import EngineCore, SimRequest
from orchestrator.sim.logs import EngineLog, vllm_request_lines
from orchestrator.sim.metrics import SglangMetrics, VllmMetrics
from orchestrator.sim.narrator import Narrator
from orchestrator.sim.startup import Plan
from orchestrator.sim.timing import natural_length, request_rng

_Handler = Any
# what vLLM's streams say when its engine core died (EngineDeadError)
DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."


class Served(Protocol):
    """What the endpoints read of the engine process (``server.py: SimServer``, which builds
    them, so they name its attributes rather than import it back)."""

    @property
    def cfg(self) -> LaunchConfig: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def log(self) -> EngineLog: ...
    @property
    def say(self) -> Narrator: ...
    @property
    def vllm(self) -> bool: ...
    @property
    def dev_mode(self) -> bool: ...
    @property
    def fingerprint(self) -> str | None: ...
    @property
    def started(self) -> float: ...
    @property
    def ready(self) -> bool: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def plan(self) -> Plan | None: ...
    @property
    def engine(self) -> EngineCore | None: ...
    @property
    def metrics(self) -> VllmMetrics | SglangMetrics | None: ...
    def reset_prefix_cache(self) -> bool: ...
    def truth(self) -> dict[str, Any]: ...
    def version(self) -> str: ...


class Routes:
    def __init__(self, server: Served) -> None:
        self.s = server
        self.cfg = server.cfg
        self._seen: dict[str, int] = {}
        self._count = 0

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024**2)
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/v1/models", self.models)
        r.add_get("/metrics", self.metrics)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat)
        r.add_get("/sim/ground_truth", self.ground_truth)
        if self.s.vllm:
            r.add_get("/version", self.version)
            r.add_get("/ping", self.health)
            if self.s.dev_mode:
                r.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        else:
            r.add_get("/health_generate", self.health)
            for path in ("/server_info", "/get_server_info"):
                r.add_get(path, self.server_info)
            for path in ("/model_info", "/get_model_info"):
                r.add_get(path, self.model_info)
            r.add_post("/generate", self.generate)
            r.add_route("GET", "/flush_cache", self.flush_cache)
            r.add_post("/flush_cache", self.flush_cache)
        if not self.s.vllm:
            self.s.say.sglang_http_started()
        return app

    # -- middleware: API key and uvicorn-style access log
    def _needs_key(self, path: str) -> bool:
        if not self.cfg.api_key:
            return False
        if self.s.vllm:
            return path.startswith("/v1")
        return not (path.startswith("/health") or path in ("/metrics", "/sim/ground_truth"))

    @web.middleware
    async def _middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        status = 500
        transport = request.transport
        peer = transport.get_extra_info("peername") if transport else None
        try:
            if (
                self._needs_key(request.path)
                and request.headers.get("Authorization") != f"Bearer {self.cfg.api_key}"
            ):
                response: web.StreamResponse = web.json_response(
                    {"error": "Unauthorized"}, status=401
                )
            else:
                response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            where = f"{peer[0]}:{peer[1]}" if peer else "127.0.0.1:0"
            try:
                phrase = http.HTTPStatus(status).phrase
            except ValueError:
                phrase = ""
            self.s.log.uvicorn(
                f'{where} - "{request.method} {request.path_qs} HTTP/{request.version.major}.{request.version.minor}" {status} {phrase}'
            )

    def _error(self, message: str, status: int, param: str | None = None) -> web.Response:
        return web.json_response(
            api.error_body(self.cfg.engine, message, status, param), status=status
        )

    # -- simple endpoints
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.s.ready else 503)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.s.version()})

    async def models(self, request: web.Request) -> web.Response:
        plan = self.s.plan
        owner = "vllm" if self.s.vllm else "sglang"
        data = []
        for name in self.cfg.served_names:
            entry: dict[str, Any] = {
                "id": name,
                "object": "model",
                "created": int(self.s.started),
                "owned_by": owner,
                "root": self.cfg.model,
                "parent": None,
            }
            entry["max_model_len"] = plan.max_model_len if plan else None
            data.append(entry)
        return web.json_response({"object": "list", "data": data})

    async def metrics(self, request: web.Request) -> web.Response:
        if self.s.metrics is None or not self.cfg.enable_metrics:
            return web.Response(status=404, text="Not Found")
        return web.Response(
            body=self.s.metrics.exposition(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        return web.json_response({"success": self.s.reset_prefix_cache()})

    async def flush_cache(self, request: web.Request) -> web.Response:
        done = self.s.reset_prefix_cache()
        return web.Response(text=FLUSH_TEXT, status=200 if done else 400)

    async def ground_truth(self, request: web.Request) -> web.Response:
        return web.json_response(self.s.truth())

    async def server_info(self, request: web.Request) -> web.Response:
        engine, plan = self.s.engine, self.s.plan
        state: dict[str, Any] = {"last_gen_throughput": 0.0}
        if engine is not None and plan is not None:
            c = engine.counters
            state["memory_usage"] = {
                "weight": round(plan.weights_gib, 2),
                "kvcache": round(
                    plan.kv_capacity_tokens
                    * plan.target.kv_bytes_per_token()
                    / self.cfg.shards
                    / 1024**3,
                    2,
                ),
                "token_capacity": plan.kv_capacity_tokens,
                "graph": 0.73,
            }
            if engine.positions:
                steps = c.request_steps
                accept_tokens = c.num_accepted_tokens + steps
                state["avg_spec_accept_length"] = accept_tokens / steps if steps else 0.0
                state["spec_cumulative_num_accept_tokens"] = accept_tokens
                state["spec_cumulative_num_forward_ct"] = steps
        args = {k: v for k, v in self.cfg.args.items() if k != "api_key"}
        return web.json_response({**args, "internal_states": [state], "version": self.s.version()})

    async def model_info(self, request: web.Request) -> web.Response:
        plan = self.s.plan
        return web.json_response(
            {
                "model_path": self.cfg.model,
                "tokenizer_path": self.cfg.model,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": bool(plan and plan.target.has_vision),
                "has_audio_understanding": False,
                "model_type": plan.target.model_type if plan else None,
                "architectures": [plan.target.architecture] if plan else None,
            }
        )

    # -- generation
    def _new_request(self, params: api.GenParams, max_tokens: int) -> SimRequest:
        engine = self.s.engine
        assert engine is not None
        occurrence = self._seen.get(params.key, 0)
        self._seen[params.key] = occurrence + 1
        self._count += 1
        rng = request_rng(self.cfg.seed, f"{params.key}:{params.seed}:{occurrence}")
        natural = natural_length(rng)
        target = (
            max_tokens if params.ignore_eos else max(1, params.min_tokens, min(max_tokens, natural))
        )
        return SimRequest(
            rid=api.new_id(params.kind),
            prompt_tokens=params.prompt_tokens,
            max_tokens=max_tokens,
            target_tokens=min(target, max_tokens),
            rng=rng,
            num_positions=engine.positions,
        )

    def _check(self, params: api.GenParams) -> int:
        """Model name and context length, as the engines check them; returns max_tokens."""
        plan = self.s.plan
        assert plan is not None
        if self.s.vllm and params.model and params.model not in self.cfg.served_names:
            raise api.BadRequest(
                f"The model `{params.model}` does not exist.", status=404, param="model"
            )
        limit = plan.max_model_len
        if self.s.vllm and params.max_tokens is not None and params.max_tokens > limit:
            raise api.BadRequest(  # vLLM 0.32's words (tests/fixtures/vllm_cpu/errors.json)
                f"max_tokens={params.max_tokens} cannot be greater than max_model_len={limit}.",
                param="max_tokens",
            )
        max_tokens = (
            params.max_tokens if params.max_tokens is not None else limit - params.prompt_tokens
        )
        if params.prompt_tokens + max_tokens > limit:
            raise api.BadRequest(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{params.prompt_tokens + max_tokens} tokens ({params.prompt_tokens} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages or completion.",
                param="max_tokens",
            )
        return max_tokens

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        if not self.s.ready or self.s.engine is None:
            return self._error("The server is not ready.", 503)
        if self.s.env.get("ORCH_SIM_FAIL_REQUESTS") == "1":
            return self._error("Simulated internal error (ORCH_SIM_FAIL_REQUESTS=1).", 500)
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise api.BadRequest("The request body must be a JSON object.")
            params = api.parse_chat(body) if kind == "chat" else api.parse_completion(body)
            max_tokens = self._check(params)
        except ValueError:
            return self._error("The request body is not valid JSON.", 400)
        except api.BadRequest as exc:
            return self._error(exc.message, exc.status, exc.param)
        req = self._new_request(params, max_tokens)
        if self.cfg.log_requests and self.s.vllm:
            received, added = vllm_request_lines(
                req.rid, body, max_tokens=max_tokens, suffix=uuid.uuid4().hex[:8]
            )
            self.s.log.vllm(received, source="request_logger.py:65")
            self.s.log.vllm(added, source="async_llm.py:578")
        self.s.engine.submit(req)
        try:
            if params.stream:
                return await self._stream(request, req, params)
            texts: list[str] = []
            reason = "abort"
            while True:
                n, reason_now, _ = await req.queue.get()
                if reason_now == "abort":
                    return self._error("The request was aborted.", 500)
                texts += api.token_texts(params.key, len(texts), n)
                if reason_now:
                    reason = reason_now
                    break
            model = self.cfg.served_names[0]
            return web.json_response(
                api.full_response(
                    rid=req.rid, model=model, params=params, texts=texts, finish_reason=reason
                )
            )
        finally:
            self.s.engine.abort(req)  # no-op when finished; frees the slot when the client left

    async def _stream(
        self, request: web.Request, req: SimRequest, params: api.GenParams
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            }
        )
        await resp.prepare(request)
        model, created = self.cfg.served_names[0], int(time.time())
        mark = self.s.fingerprint
        chunk = functools.partial(
            api.stream_chunk,
            rid=req.rid,
            created=created,
            model=model,
            params=params,
            vllm=self.s.vllm,
        )
        try:
            if params.kind == "chat":
                await resp.write(api.sse(chunk(texts=[], finish_reason=None, role=True)))
            done = 0
            while True:
                n, reason, _ = await req.queue.get()
                if reason == "abort":
                    if self.s.stopping:  # vLLM's shutdown: the stream ends, marked aborted
                        ended = chunk(texts=[], finish_reason="abort", fingerprint=mark)
                        await resp.write(api.sse(ended))
                    elif not self.s.ready:  # the engine died: vLLM's front-end answers each
                        # open stream with its EngineDeadError as an error object, then [DONE]
                        await resp.write(api.sse(api.error_body(self.cfg.engine, DEAD, 500)))
                        await resp.write(api.sse("[DONE]"))
                        await resp.write_eof()
                        return resp
                    break
                texts = api.token_texts(params.key, done, n)
                done += n
                running = (
                    api.usage(params.prompt_tokens, done)
                    if params.include_usage and params.continuous_usage
                    else None
                )
                await resp.write(
                    api.sse(chunk(texts=texts, finish_reason=reason, running_usage=running))
                )
                if reason:
                    break
            if params.include_usage:
                await resp.write(
                    api.sse(
                        api.usage_chunk(
                            rid=req.rid,
                            created=created,
                            model=model,
                            params=params,
                            completion=done,
                            fingerprint=mark,
                        )
                    )
                )
            await resp.write(api.sse("[DONE]"))
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass
        return resp

    async def generate(self, request: web.Request) -> web.Response:
        """SGLang's native /generate (non-streaming): meta_info carries spec_verify_ct."""
        if not self.s.ready or self.s.engine is None:
            return self._error("The server is not ready.", 503)
        if self.s.env.get("ORCH_SIM_FAIL_REQUESTS") == "1":
            return self._error("Simulated internal error (ORCH_SIM_FAIL_REQUESTS=1).", 500)
        try:
            body = await request.json()
            sp = body.get("sampling_params") or {}
            prompt = (
                body.get("input_ids") if body.get("input_ids") is not None else body.get("text", "")
            )
            params = api.parse_completion(
                {
                    "prompt": prompt,
                    "max_tokens": sp.get("max_new_tokens", 128),
                    "ignore_eos": sp.get("ignore_eos", False),
                    "min_tokens": sp.get("min_new_tokens", 0),
                }
            )
            max_tokens = self._check(params)
        except (ValueError, AttributeError):
            return self._error("The request body is not valid JSON.", 400)
        except api.BadRequest as exc:
            return self._error(exc.message, exc.status, exc.param)
        req = self._new_request(params, max_tokens)
        self.s.engine.submit(req)
        texts: list[str] = []
        reason = "abort"
        try:
            while True:
                n, reason_now, _ = await req.queue.get()
                texts += api.token_texts(params.key, len(texts), n)
                if reason_now:
                    reason = reason_now
                    break
        finally:
            self.s.engine.abort(req)
        finish = (
            {"type": "length", "length": len(texts)}
            if reason == "length"
            else {"type": reason, "matched": 248046}
        )
        meta = {
            "id": req.rid,
            "finish_reason": finish,
            "prompt_tokens": params.prompt_tokens,
            "completion_tokens": len(texts),
            "cached_tokens": 0,
            "e2e_latency": (req.finished or time.time()) - req.arrival,
        }
        if req.num_positions:
            meta["spec_verify_ct"] = req.decode_steps
            meta["spec_accept_length"] = len(texts) / req.decode_steps if req.decode_steps else 0.0
        return web.json_response({"text": "".join(texts), "meta_info": meta})
