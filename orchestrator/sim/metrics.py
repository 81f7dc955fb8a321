"""/metrics in the real engines' names and types, fed by the same events as the ground truth.

vLLM updates its counters every engine step; SGLang's tokenizer-side counters move when a
request finishes and its scheduler gauges every ``--decode-log-interval`` decode steps (and it
runs prometheus in multiprocess mode, so no ``_created`` series), as on engines.md.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from orchestrator.sim.engine import EngineCore, SimRequest

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                   2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip


def one_two_five(limit: int) -> tuple[int, ...]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50... up to ``max_model_len``."""
    out: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > limit:
                return tuple(out)
            out.append(mantissa * scale)
        scale *= 10


class VllmMetrics:
    """vLLM V1's Prometheus logger: labels ``model_name`` and ``engine``; the families, labels,
    label values and buckets of vLLM 0.32 (tests/sim/test_sim_fidelity_vllm.py holds them to
    a real scrape), token buckets up to ``max_model_len``."""

    def __init__(self, engine: EngineCore, model_name: str, max_model_len: int) -> None:
        self.registry = r = CollectorRegistry()
        names, values = ["model_name", "engine"], [model_name, "0"]

        def gauge(name: str, doc: str, read: Callable[[], float]) -> None:
            g = Gauge(name, doc, names, registry=r, multiprocess_mode="mostrecent")
            g.labels(*values).set_function(read)

        gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            lambda: len(engine.running),
        )
        gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            lambda: len(engine.waiting),
        )
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
              engine.kv_usage)  # fmt: skip

        def counter(name: str, doc: str, extra: list[str] | None = None) -> Counter:
            return Counter(name, doc, names + (extra or []), registry=r)

        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        ).labels(*values)
        self.prompt = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(
            *values
        )
        self.generation = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        ).labels(*values)
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        ).labels(*values)
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        ).labels(*values)
        success = counter("vllm:request_success", "Count of successfully processed requests.", ["finished_reason"])  # fmt: skip
        self.success = {
            reason: success.labels(*values, reason)
            for reason in ("stop", "length", "abort", "error", "repetition")
        }

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=r).labels(*values)

        self.ttft = hist(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            LATENCY_BUCKETS,
        )
        self.itl = hist(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
        self.e2e = hist(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            E2E_BUCKETS,
        )
        self.queue = hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            E2E_BUCKETS,
        )
        self.prefill_time = hist(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            E2E_BUCKETS,
        )
        self.decode_time = hist(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            E2E_BUCKETS,
        )
        self.inference_time = hist(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            E2E_BUCKETS,
        )
        self.tpot = hist(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        )
        tokens = one_two_five(max_model_len)
        self.prompt_hist = hist(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.gen_hist = hist(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.spec = None
        if engine.positions:
            self.spec = (
                counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.").labels(
                    *values
                ),
                counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.").labels(
                    *values
                ),
                counter(
                    "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."
                ).labels(*values),
            )
            per_pos = counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", ["position"])  # fmt: skip
            self.per_pos = [per_pos.labels(*values, str(i)) for i in range(engine.positions)]
        self.positions = engine.positions

    def on_prefill(self, batch: list[SimRequest], wall_s: float, running: int, queued: int) -> None:
        for req in batch:
            if req.first_token is None:
                continue
            self.prompt.inc(req.prompt_tokens)
            self.prefix_queries.inc(req.prompt_tokens)
            self.ttft.observe(req.first_token - req.arrival)
            if req.scheduled is not None:
                self.queue.observe(req.scheduled - req.arrival)
                self.prefill_time.observe(req.first_token - req.scheduled)

    def on_decode(self, batch: list[SimRequest], tokens: int, wall_s: float) -> None:
        if self.spec is None or not batch:
            return
        drafts, draft_tokens, accepted = self.spec
        drafts.inc(len(batch))
        draft_tokens.inc(len(batch) * self.positions)
        step_accepted = sum(r.chunk_tokens[-1] - 1 for r in batch)
        accepted.inc(step_accepted)
        for req in batch:
            for i in range(req.chunk_tokens[-1] - 1):
                self.per_pos[i].inc()

    def on_chunk(self, req: SimRequest, tokens: int, gap_s: float | None) -> None:
        self.generation.inc(tokens)
        if gap_s is not None:
            self.itl.observe(gap_s)

    def on_finish(self, req: SimRequest) -> None:
        self.success[req.finish_reason or "abort"].inc()
        if req.finished is not None:
            self.e2e.observe(req.finished - req.arrival)
            if req.scheduled is not None:
                self.inference_time.observe(req.finished - req.scheduled)
            if req.first_token is not None:
                self.decode_time.observe(req.finished - req.first_token)
                if req.generated > 1:
                    self.tpot.observe((req.finished - req.first_token) / (req.generated - 1))
        self.prompt_hist.observe(req.prompt_tokens)
        self.gen_hist.observe(req.generated)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class SglangMetrics:
    """SGLang's scheduler gauges and tokenizer-manager counters and histograms."""

    def __init__(self, engine: EngineCore, model_name: str) -> None:
        self.registry = r = CollectorRegistry()
        sched_names = ["model_name", "engine_type", "tp_rank", "pp_rank"]
        sched_values = [model_name, "unified", "0", "0"]

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, sched_names, registry=r, multiprocess_mode="mostrecent").labels(*sched_values)  # fmt: skip

        self.num_running = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.num_queue = gauge(
            "sglang:num_queue_reqs", "The number of requests in the waiting queue."
        )
        self.num_used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.gen_throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.accept_length = gauge(
            "sglang:spec_accept_length", "The average acceptance length of speculative decoding."
        )
        self.accept_rate = gauge(
            "sglang:spec_accept_rate", "The average acceptance rate of speculative decoding."
        )
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        names, values = ["model_name"], [model_name]

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=r).labels(*values)

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=r).labels(*values)

        self.prompt = counter("sglang:prompt_tokens", "Number of prefill tokens processed.")
        self.generation = counter(
            "sglang:generation_tokens", "Number of generation tokens processed."
        )
        self.requests = counter("sglang:num_requests", "Number of requests processed.")
        self.verify_calls = counter(
            "sglang:spec_verify_calls",
            "The number of verification forward passes in the speculative decoding.",
        )
        self.ttft = hist(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            LATENCY_BUCKETS,
        )
        self.itl = hist(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
        self.e2e = hist(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            E2E_BUCKETS,
        )
        self.positions = engine.positions

    def on_prefill(self, batch: list[SimRequest], wall_s: float, running: int, queued: int) -> None:
        for req in batch:
            if req.first_token is not None:
                self.ttft.observe(req.first_token - req.arrival)

    def on_decode(self, batch: list[SimRequest], tokens: int, wall_s: float) -> None:
        pass

    def on_chunk(self, req: SimRequest, tokens: int, gap_s: float | None) -> None:
        if gap_s is not None:
            self.itl.observe(gap_s)

    def on_finish(self, req: SimRequest) -> None:
        self.prompt.inc(req.prompt_tokens)
        self.generation.inc(req.generated)
        self.requests.inc()
        if self.positions:
            self.verify_calls.inc(req.decode_steps)
        if req.finished is not None:
            self.e2e.observe(req.finished - req.arrival)

    def set_gauges(
        self,
        *,
        running: int,
        queued: int,
        used_tokens: int,
        usage: float,
        gen_tps: float,
        accept_len: float | None,
        accept_rate: float | None,
    ) -> None:
        self.num_running.set(running)
        self.num_queue.set(queued)
        self.num_used_tokens.set(used_tokens)
        self.token_usage.set(usage)
        self.gen_throughput.set(gen_tps)
        if accept_len is not None:
            self.accept_length.set(accept_len)
        if accept_rate is not None:
            self.accept_rate.set(accept_rate)

    def exposition(self) -> bytes:
        """Without ``_created`` series: SGLang's multiprocess collector does not export them."""
        text = generate_latest(self.registry).decode()
        kept = [line for line in text.splitlines() if not _names_created(line)]
        return ("\n".join(kept) + "\n").encode()


def _names_created(line: str) -> bool:
    words = line.split()
    if line.startswith("#"):
        return len(words) > 2 and words[2].endswith("_created")
    return bool(words) and words[0].split("{")[0].endswith("_created")
