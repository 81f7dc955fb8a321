"""The simulated engine process: start-up, the HTTP server, shutdown.

Life of a process, as for the real engines: print the start-up lines, claim the port (vLLM binds
before loading and listens once ready; SGLang serves /health with 503 until its warm-up request
is done), "load" the model for ``ORCH_SIM_LOAD_S`` seconds while holding GPU memory (a
``gpu-<pid>.json`` state file the fake nvidia-smi reads), serve, and on SIGTERM shut down like
uvicorn and release the memory. Start-up errors print the engine's own traceback and exit 1.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
import sys
import time
import traceback
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from orchestrator.sim import failures
from orchestrator.sim.cache import CacheResets, dev_mode
from orchestrator.sim.cli import LaunchConfig
from orchestrator.sim.engine import EngineCore, SimRequest
from orchestrator.sim.failures import StartupFailure
from orchestrator.sim.gpus import (
    GpuActivity,
    memory_lock,
    register_process,
    state_dir,
    unregister_process,
)
from orchestrator.sim.logs import EngineLog
from orchestrator.sim.metrics import SglangMetrics, VllmMetrics
from orchestrator.sim.narrator import Narrator
from orchestrator.sim.routes import Routes
from orchestrator.sim.startup import Plan, claim_memory, plan_launch
from orchestrator.sim.stats import SglangBatchLogger, VllmStatLogger, ground_truth
from orchestrator.sim.timing import request_rng
from orchestrator.sim.versions import SGLANG_VERSION, VLLM_VERSION

SHUTDOWN_S = 2.0  # longest wait for request handlers once the listener is closed


class SimServer:
    def __init__(self, cfg: LaunchConfig, environ: Mapping[str, str]) -> None:
        self.cfg = cfg
        self.env = environ
        self.log = EngineLog(cfg.engine, cfg.tp)
        self.err = EngineLog(cfg.engine, cfg.tp, stream=sys.stderr)
        self.say = Narrator(cfg, environ, self.log, self.err)
        self.speed = max(1e-6, float(environ.get("ORCH_SIM_SPEED") or 1.0))
        self.load_s = max(0.0, float(environ.get("ORCH_SIM_LOAD_S") or 1.0))
        self.state = state_dir(environ)
        self.stop = asyncio.Event()
        self.ready = False
        self.stopping = False  # SIGTERM came: requests are being aborted
        self.plan: Plan | None = None
        self.engine: EngineCore | None = None
        self.metrics: VllmMetrics | SglangMetrics | None = None
        self.started = time.time()
        self.dev_mode = self.vllm and dev_mode(environ)  # vLLM's development endpoints
        # vLLM's system_fingerprint in streams: its version and a new suffix every start
        self.fingerprint = f"vllm-{VLLM_VERSION}-{uuid.uuid4().hex[:8]}" if self.vllm else None
        self.cache_resets = CacheResets(cfg.engine, self.log)
        self._tasks: list[asyncio.Task[Any]] = []
        self._runner: web.AppRunner | None = None
        self._crashed = False  # set by a simulated crash or a failed background task

    @property
    def vllm(self) -> bool:
        return self.cfg.engine == "vllm"

    # -- lifecycle
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        sock: socket.socket | None = None
        try:
            self.say.banner()
            sock = self._bind()
            self.plan = plan_launch(self.cfg, self.env, self.state)
            if await self._load(self.plan):
                return 0
            self._start_engine(self.plan)
            await self._serve(sock)
            if not self.vllm and await self._warm_up():
                return 1 if self._crashed else 0
            self.ready = True
            self.say.ready(self.plan)
            await self.stop.wait()
            if self._crashed:
                return 1
            await self._shut_down()
            return 0
        except StartupFailure as failure:
            self.say.failure(failure)
            return failure.exit_code
        finally:
            for task in self._tasks:
                task.cancel()
            if self._runner is not None:
                await self._runner.cleanup()
            if sock is not None:
                sock.close()
            unregister_process(self.state, os.getpid())
            self._write_truth()

    async def _shut_down(self) -> None:
        """SIGTERM as vLLM's default shutdown (``mode=abort``) does it, logged in vLLM 0.32's
        words: in-flight requests end at once (streams with ``finish_reason: abort`` and
        ``[DONE]``), then the HTTP server closes and the process exits in about a second. Left
        open, a stream kept aiohttp's clean-up waiting for its handler (60 s) after uvicorn's
        last line."""
        self.stopping = True
        if self.engine is not None:
            in_flight = list(self.engine.running) + list(self.engine.waiting)
            self.say.shutdown_engine(len(in_flight))
            for req in in_flight:
                self.engine.abort(req)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.say.shutdown()

    async def _pause(self, seconds: float) -> bool:
        """Sleep; True when a stop signal arrived meanwhile."""
        try:
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            return False
        return True

    def _bind(self) -> socket.socket:
        """Claim the port before loading, as vLLM does, so a clash fails in a second."""
        family = socket.AF_INET6 if ":" in self.cfg.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.cfg.host, self.cfg.port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise failures.port_in_use(self.cfg.engine, self.cfg.host, self.cfg.port) from None
            raise failures.config_error(f"OSError: [Errno {exc.errno}] {exc.strerror}") from None
        return sock

    async def _load(self, plan: Plan) -> bool:
        """Start-up lines and the load time, holding GPU memory. True if stopped meanwhile."""
        register_process(
            self.state,
            pid=os.getpid(),
            gpus=plan.devices,
            memory_mib=int(plan.weights_gib * 1024) + 500,
            process_name=sys.executable,
        )
        self.say.loading(plan)
        if await self._pause(self.load_s * 0.7):
            return True
        with memory_lock(self.state):  # the KV cache: claimed whole, or CUDA out of memory
            claim_memory(plan, self.state, os.getpid())
            register_process(
                self.state,
                pid=os.getpid(),
                gpus=plan.devices,
                memory_mib=plan.memory_mib,
                process_name=sys.executable,
            )
        self.say.loaded(plan)
        return await self._pause(self.load_s * 0.3)

    def _start_engine(self, plan: Plan) -> None:
        self.engine = engine = EngineCore(
            profile=plan.profile,
            speed=self.speed,
            max_running=plan.max_running,
            kv_capacity_tokens=plan.kv_capacity_tokens,
        )
        throttle = plan.night.throttle if plan.night else None
        engine.listeners.append(
            GpuActivity(
                self.state,
                os.getpid(),
                throttle,
                gpus=plan.devices,
                memory_mib=plan.memory_mib,
            )
        )
        name = self.cfg.served_names[0]
        if self.vllm:
            self.metrics = VllmMetrics(engine, name, plan.max_model_len)
            engine.listeners.append(self.metrics)
            if not self.cfg.args.get("disable_log_stats"):
                interval = float(self.env.get("VLLM_LOG_STATS_INTERVAL") or 10.0) / self.speed
                self._spawn(VllmStatLogger(engine, self.log, interval).run())
        else:
            self.metrics = SglangMetrics(engine, name)
            engine.listeners.append(self.metrics)
            engine.listeners.append(
                SglangBatchLogger(
                    engine,
                    self.log,
                    self.metrics,
                    interval=self.cfg.decode_log_interval,
                    hybrid=plan.target.is_hybrid,
                )
            )
        self._spawn(engine.run())
        self._spawn(self._truth_writer())
        crash = self.env.get("ORCH_SIM_FAIL", "")
        if crash.startswith("crash_after:"):
            self._spawn(self._crash_later(float(crash.split(":", 1)[1])))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(self._task_done)
        self._tasks.append(task)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        """A background task that fails is a bug in the simulator: die loudly, not hang."""
        exc = None if task.cancelled() else task.exception()
        if exc is None:
            return
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        self.err.raw("".join(lines).rstrip("\n").split("\n"))
        self._crashed = True
        self.stop.set()

    async def _serve(self, sock: socket.socket) -> None:
        routes = Routes(self)
        # a client that stops reading must not hold the exit for aiohttp's default 60 s
        self._runner = web.AppRunner(
            routes.app(), access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_S
        )
        await self._runner.setup()
        try:
            await web.SockSite(self._runner, sock).start()
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise failures.port_in_use(self.cfg.engine, self.cfg.host, self.cfg.port) from None
            raise

    async def _warm_up(self) -> bool:
        """SGLang's own first request (counted in its lifetime stats, like the real one)."""
        assert self.engine is not None
        req = SimRequest(
            rid="warmup-0",
            prompt_tokens=6,
            max_tokens=8,
            target_tokens=8,
            rng=request_rng(self.cfg.seed, "warmup"),
            num_positions=self.engine.positions,
            warmup=True,
        )
        self.engine.submit(req)
        done = asyncio.ensure_future(self._drain(req))
        stop = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait({done, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if self.stop.is_set():
            done.cancel()
            return True
        self.log.uvicorn(f'127.0.0.1:{_ephemeral()} - "POST /generate HTTP/1.1" 200 OK')
        return False

    @staticmethod
    async def _drain(req: SimRequest) -> None:
        while True:
            _, reason, _ = await req.queue.get()
            if reason:
                return

    async def _crash_later(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self._crashed = True
        self.ready = False
        if self.engine is not None:
            for req in list(self.engine.running) + list(self.engine.waiting):
                self.engine.abort(req)
        self.say.crash()
        self.stop.set()

    async def _truth_writer(self) -> None:
        last = None
        while True:
            await asyncio.sleep(1.0)
            if self.engine is not None:
                mark = (
                    self.engine.counters.forward_steps,
                    len(self.engine.requests),
                    len(self.cache_resets.times),
                )
                if mark != last:
                    last = mark
                    self._write_truth()

    def truth(self) -> dict[str, Any]:
        plan = self.plan
        meta: dict[str, Any] = {
            "engine": self.cfg.engine,
            "pid": os.getpid(),
            "model": self.cfg.model,
            "served_model_name": self.cfg.served_names[0],
            "port": self.cfg.port,
            "seed": self.cfg.seed,
            "speed": self.speed,
            "ready": self.ready,
            "started_time": self.started,
            "cache_resets": self.cache_resets.truth(),
        }
        if plan is not None:
            spec = plan.profile.spec
            meta["profile"] = {
                "name": plan.profile.name,
                "step_s": plan.profile.step_s,
                "step_wall_s": plan.profile.step_s / self.speed,
                "expected_decode_tok_s": plan.profile.expected_tokens_per_s() * self.speed,
                "method": spec.method if spec else None,
                "num_draft_tokens": spec.num_draft_tokens if spec else 0,
                "expected_acceptance_length": spec.expected_acceptance_length() if spec else 1.0,
                "expected_per_position": list(spec.position_rates) if spec else [],
            }
            meta["drafter_fit"] = (
                {"ok": plan.fit.ok, "problems": list(plan.fit.problems)} if plan.fit else None
            )
            meta["night"] = plan.night.truth() if plan.night else None
        if self.engine is None:
            return {**meta, "totals": {}, "requests": []}
        return ground_truth(self.engine, meta)

    def reset_prefix_cache(self) -> bool:
        """The engine's prefix-cache reset (see ``cache.py``); the ground truth counts it."""
        done = self.cache_resets.reset(self.engine)
        if done:
            self._write_truth()
        return done

    def _write_truth(self) -> None:
        if self.engine is None:
            return
        path = Path(self.state) / f"ground-truth-{os.getpid()}.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(json.dumps(self.truth()))
            os.replace(tmp, path)
        except OSError:
            pass

    def version(self) -> str:
        return VLLM_VERSION if self.vllm else SGLANG_VERSION


def _ephemeral() -> int:
    return 40000 + os.getpid() % 20000


def main(engine: str, cfg: LaunchConfig) -> int:
    return asyncio.run(SimServer(cfg, dict(os.environ)).run())
