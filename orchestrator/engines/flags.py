"""The real engines' command lines: every flag of vLLM 0.33 ``serve`` and SGLang 0.5
``launch_server``, and how their parsers read what a user writes.

One table serves both sides: the simulator builds its parsers from it (it accepts exactly these
flags, as the real CLIs do), and the adapters resolve ``extra_args`` against it before checking
them. Both engines parse with argparse and its default ``allow_abbrev``: a unique prefix of a long
flag IS that flag (SGLang's docs rely on it: ``--tp`` is ``--tp-size``), so ``--hos 0.0.0.0``
moves a server exactly as ``--host 0.0.0.0`` does. A check comparing spellings can be walked
around; one comparing what the parser will read cannot. vLLM's FlexibleArgumentParser also reads
``--a_b`` as ``--a-b`` and ``--json-flag.key value`` as part of ``--json-flag``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """One argparse option: all its spellings (the first names its ``dest``)."""

    names: tuple[str, ...]
    value: bool = True  # takes a value; False: a switch
    negatable: bool = False  # argparse.BooleanOptionalAction: ``--no-<name>`` too

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def option_strings(self) -> tuple[str, ...]:
        if not self.negatable:
            return self.names
        return self.names + tuple("--no-" + n[2:] for n in self.names if n.startswith("--"))


@dataclass(frozen=True)
class FlagUse:
    """A flag-like item of a command line, and what the engine's parser makes of it."""

    index: int
    written: str  # as written, without any ``=value``
    flag: Flag | None  # None: not a flag of this engine, or an ambiguous abbreviation
    candidates: tuple[Flag, ...]  # every flag it may stand for (several: ambiguous)
    inline: str | None = None  # the ``=value`` part (or a short flag's attached value)

    @property
    def exact(self) -> bool:
        """Written as one of the flag's own spellings (not an abbreviation of it)."""
        return self.flag is not None and any(
            self.written == n or normal_spelling(self.written) == n
            for n in self.flag.option_strings
        )


def looks_like_flag(item: str) -> bool:
    """What argparse takes for an option: ``-x``/``--x``, but not ``-``, ``--`` or ``-1.5``."""
    if not item.startswith("-") or item in ("-", "--"):
        return False
    try:
        float(item)
    except ValueError:
        return True
    return False


def normal_spelling(head: str) -> str:
    """vLLM's FlexibleArgumentParser: ``--max_model_len`` -> ``--max-model-len``,
    ``--speculative-config.method`` -> ``--speculative-config``."""
    if not head.startswith("--"):
        return head
    return "--" + head[2:].split(".", 1)[0].replace("_", "-")


class FlagTable:
    """One engine's flags, resolved the way its argparse parser resolves them."""

    def __init__(self, engine: str, flags: Iterable[Flag], *, flexible: bool) -> None:
        self.engine = engine
        self.flags = tuple(flags)
        self.flexible = flexible  # vLLM's FlexibleArgumentParser spellings
        self._by_option: dict[str, Flag] = {}
        for flag in self.flags:
            for option in flag.option_strings:
                if option in self._by_option:
                    raise ValueError(f"{engine}: {option} is declared twice")
                self._by_option[option] = flag

    def __getitem__(self, option: str) -> Flag:
        """The flag spelled exactly ``option`` (KeyError: the engine has no such flag)."""
        return self._by_option[option]

    def get(self, option: str) -> Flag | None:
        return self._by_option.get(option)

    def resolve(self, item: str, index: int = 0) -> FlagUse | None:
        """What the parser reads ``item`` as; None when it is a value, not a flag."""
        if not looks_like_flag(item):
            return None
        head, eq, value = item.partition("=")
        inline = value if eq else None
        key = normal_spelling(head) if self.flexible else head
        exact = self._by_option.get(key)
        if exact is not None:
            return FlagUse(index, head, exact, (exact,), inline)
        matches = {f for option, f in self._by_option.items() if option.startswith(key)}
        attached = self._by_option.get(key[:2]) if not key.startswith("--") else None
        if attached is not None and not matches:  # ``-O3``: a short flag and its value
            return FlagUse(index, head, attached, (attached,), item[2:])
        if attached is not None:
            matches.add(attached)
        candidates = tuple(sorted(matches, key=lambda f: f.name))
        flag = candidates[0] if len(candidates) == 1 else None
        return FlagUse(index, head, flag, candidates, inline)

    def uses(self, args: Sequence[str]) -> list[FlagUse]:
        """Every flag-like item of ``args``, resolved."""
        found = (self.resolve(str(item), i) for i, item in enumerate(args))
        return [use for use in found if use is not None]

    def value(self, args: Sequence[str], option: str) -> str | None:
        """The value the engine will read for ``option`` from ``args``: THE flag reader.

        Every spelling the parser accepts counts (``--attention-b x``, ``--attention-backend=x``,
        vLLM's ``--attention_backend x``); the last use wins, as in argparse. None when the flag
        is not given (or given without a value), or when this engine has no such flag.
        """
        flag = self.get(option)
        if flag is None:
            return None
        items = [str(a) for a in args]
        found: str | None = None
        for use in self.uses(items):
            if use.flag == flag:
                given = values_of(items, use)
                found = given[0] if given else None
        return found

    def switch(self, args: Sequence[str], option: str) -> bool | None:
        """Whether the switch ``option`` is on in ``args``: the last use wins, ``--no-x`` (vLLM's
        negatable switches) turns it off; None when it is not given."""
        flag = self.get(option)
        if flag is None:
            return None
        found: bool | None = None
        for use in self.uses([str(a) for a in args]):
            if use.flag == flag:
                written = normal_spelling(use.written) if self.flexible else use.written
                found = not (written.startswith("--no-") and not flag.name.startswith("--no-"))
        return found


def values_of(args: Sequence[str], use: FlagUse) -> list[str]:
    """The value(s) given with ``use``: its ``=value``, else the items after it up to the next
    flag (vLLM's ``--api-key`` and ``--served-model-name`` take several)."""
    if use.inline is not None:
        return [use.inline]
    out: list[str] = []
    for item in args[use.index + 1 :]:
        if looks_like_flag(str(item)):
            break
        out.append(str(item))
    return out


HELP = Flag(("-h", "--help"), value=False)  # argparse adds it to every parser

# vLLM 0.33 `serve`: the flags orch emits or the simulator acts on.
VLLM_CORE = (
    Flag(("--model",)),
    Flag(("--host",)),
    Flag(("--port",)),
    Flag(("--tensor-parallel-size", "-tp")),
    Flag(("--max-model-len",)),
    Flag(("--gpu-memory-utilization",)),
    Flag(("--served-model-name",)),
    Flag(("--speculative-config", "-sc")),
    Flag(("--attention-backend",)),
    Flag(("--seed",)),
    Flag(("--api-key",)),
    Flag(("--max-num-seqs",)),
    Flag(("--enable-log-requests",), value=False, negatable=True),
)

# SGLang 0.5 ServerArgs: the flags orch emits or the simulator acts on.
SGLANG_CORE = (
    Flag(("--model-path", "--model")),
    Flag(("--host",)),
    Flag(("--port",)),
    Flag(("--tensor-parallel-size", "--tp-size")),
    Flag(("--mem-fraction-static",)),
    Flag(("--context-length",)),
    Flag(("--enable-metrics",), value=False),
    Flag(("--decode-log-interval",)),
    Flag(("--served-model-name",)),
    Flag(("--speculative-algorithm",)),
    Flag(("--speculative-draft-model-path", "--speculative-draft-model")),
    Flag(("--speculative-num-steps",)),
    Flag(("--speculative-eagle-topk",)),
    Flag(("--speculative-num-draft-tokens",)),
    Flag(("--attention-backend",)),
    Flag(("--page-size",)),
    Flag(("--api-key",)),
    Flag(("--random-seed",)),
    Flag(("--max-running-requests",)),
    Flag(("--cuda-graph-bs",)),
    Flag(("--pipeline-parallel-size", "--pp-size")),
    Flag(("--data-parallel-size", "--dp-size")),
    Flag(("--expert-parallel-size", "--ep-size")),
)

# vLLM 0.33 `serve`: the other flags taking a value.
VLLM_VALUE_FLAGS = [
    "uds",
    "uvicorn-log-level",
    "allowed-origins",
    "allowed-methods",
    "allowed-headers",
    "lora-modules",
    "chat-template",
    "chat-template-content-format",
    "response-role",
    "ssl-keyfile",
    "ssl-certfile",
    "ssl-ca-certs",
    "ssl-cert-reqs",
    "root-path",
    "middleware",
    "tool-call-parser",
    "tool-parser-plugin",
    "tool-server",
    "log-config-file",
    "max-log-len",
    "h11-max-incomplete-event-size",
    "h11-max-header-count",
    "runner",
    "convert",
    "task",
    "tokenizer",
    "tokenizer-mode",
    "hf-config-path",
    "allowed-local-media-path",
    "allowed-media-domains",
    "revision",
    "code-revision",
    "rope-scaling",
    "rope-theta",
    "tokenizer-revision",
    "quantization",
    "max-logprobs",
    "logprobs-mode",
    "config-format",
    "hf-token",
    "hf-overrides",
    "pooler-config",
    "logits-processor-pattern",
    "generation-config",
    "override-generation-config",
    "model-impl",
    "override-attention-dtype",
    "logits-processors",
    "io-processor-plugin",
    "load-format",
    "download-dir",
    "safetensors-load-strategy",
    "model-loader-extra-config",
    "ignore-patterns",
    "pt-load-map-location",
    "reasoning-parser",
    "distributed-executor-backend",
    "pipeline-parallel-size",
    "decode-context-parallel-size",
    "data-parallel-size",
    "data-parallel-rank",
    "data-parallel-start-rank",
    "data-parallel-size-local",
    "data-parallel-address",
    "data-parallel-rpc-port",
    "data-parallel-backend",
    "eplb-config",
    "expert-placement-strategy",
    "max-parallel-loading-workers",
    "worker-cls",
    "worker-extension-cls",
    "block-size",
    "kv-cache-memory",
    "swap-space",
    "kv-cache-dtype",
    "num-gpu-blocks-override",
    "prefix-caching-hash-algo",
    "cpu-offload-gb",
    "mamba-cache-dtype",
    "mamba-ssm-cache-dtype",
    "limit-mm-per-prompt",
    "media-io-kwargs",
    "mm-processor-kwargs",
    "mm-processor-cache-gb",
    "mm-encoder-tp-mode",
    "max-loras",
    "max-lora-rank",
    "max-cpu-loras",
    "lora-dtype",
    "show-hidden-metrics-for-version",
    "otlp-traces-endpoint",
    "collect-detailed-traces",
    "max-num-batched-tokens",
    "max-num-partial-prefills",
    "max-long-partial-prefills",
    "cuda-graph-sizes",
    "long-prefill-token-threshold",
    "num-lookahead-slots",
    "scheduling-policy",
    "scheduler-cls",
    "kv-transfer-config",
    "kv-events-config",
    "compilation-config",
    "additional-config",
    "structured-outputs-config",
    "max-cudagraph-capture-size",
    "config",
    "dtype",
]
VLLM_BOOL_FLAGS = [
    "disable-uvicorn-access-log",
    "allow-credentials",
    "enable-ssl-refresh",
    "return-tokens-as-token-ids",
    "disable-frontend-multiprocessing",
    "enable-request-id-headers",
    "enable-auto-tool-choice",
    "disable-fastapi-docs",
    "enable-prompt-tokens-details",
    "enable-server-load-tracking",
    "enable-force-include-usage",
    "enable-tokenizer-info-endpoint",
    "enable-log-outputs",
    "log-error-stack",
    "trust-remote-code",
    "enforce-eager",
    "disable-sliding-window",
    "disable-cascade-attn",
    "skip-tokenizer-init",
    "enable-prompt-embeds",
    "enable-sleep-mode",
    "use-tqdm-on-load",
    "data-parallel-hybrid-lb",
    "enable-expert-parallel",
    "enable-eplb",
    "ray-workers-use-nsight",
    "disable-custom-all-reduce",
    "enable-prefix-caching",
    "calculate-kv-scales",
    "kv-sharing-fast-prefill",
    "disable-mm-preprocessor-cache",
    "interleave-mm-strings",
    "skip-mm-profiling",
    "language-model-only",
    "enable-lora",
    "fully-sharded-loras",
    "enable-chunked-prefill",
    "disable-chunked-mm-input",
    "disable-hybrid-kv-cache-manager",
    "async-scheduling",
    "disable-log-stats",
    "headless",
]
VLLM_SHORT = {"pipeline-parallel-size": "-pp", "data-parallel-size": "-dp",
               "quantization": "-q", "decode-context-parallel-size": "-dcp",
               "compilation-config": "-O", "data-parallel-size-local": "-dpl",
               "data-parallel-address": "-dpa", "data-parallel-rpc-port": "-dpp",
               "data-parallel-backend": "-dpb", "data-parallel-rank": "-dpn",
               "enable-expert-parallel": "-ep"}  # fmt: skip

# SGLang 0.5 ServerArgs: the other flags taking a value.
SGLANG_VALUE_FLAGS = [
    "tokenizer-path",
    "tokenizer-mode",
    "tokenizer-worker-num",
    "load-format",
    "model-loader-extra-config",
    "revision",
    "model-impl",
    "warmups",
    "nccl-port",
    "dtype",
    "quantization",
    "quantization-param-path",
    "kv-cache-dtype",
    "max-queued-requests",
    "max-total-tokens",
    "chunked-prefill-size",
    "max-prefill-tokens",
    "schedule-policy",
    "schedule-conservativeness",
    "hybrid-kvcache-ratio",
    "swa-full-tokens-ratio",
    "device",
    "max-micro-batch-size",
    "stream-interval",
    "constrained-json-whitespace-pattern",
    "watchdog-timeout",
    "dist-timeout",
    "download-dir",
    "base-gpu-id",
    "gpu-id-step",
    "log-level",
    "log-level-http",
    "log-requests-level",
    "crash-dump-folder",
    "bucket-time-to-first-token",
    "bucket-inter-token-latency",
    "bucket-e2e-request-latency",
    "kv-events-config",
    "weight-version",
    "chat-template",
    "completion-template",
    "file-storage-path",
    "reasoning-parser",
    "tool-call-parser",
    "tool-server",
    "load-balance-method",
    "dist-init-addr",
    "nnodes",
    "node-rank",
    "json-model-override-args",
    "preferred-sampling-params",
    "max-lora-rank",
    "lora-target-modules",
    "lora-paths",
    "max-loras-per-batch",
    "lora-backend",
    "prefill-attention-backend",
    "decode-attention-backend",
    "sampling-backend",
    "grammar-backend",
    "mm-attention-backend",
    "speculative-draft-model-revision",
    "speculative-accept-threshold-single",
    "speculative-accept-threshold-acc",
    "speculative-token-map",
    "speculative-attention-mode",
    "moe-a2a-backend",
    "moe-runner-backend",
    "mamba-ssm-dtype",
    "max-mamba-cache-size",
    "hicache-ratio",
    "hicache-size",
    "hicache-write-policy",
    "cuda-graph-max-bs",
    "torch-compile-max-bs",
    "torchao-config",
    "triton-attention-num-kv-splits",
    "num-continuous-decode-steps",
    "disaggregation-mode",
    "disaggregation-transfer-backend",
    "disaggregation-bootstrap-port",
]
SGLANG_BOOL_FLAGS = [
    "skip-tokenizer-init",
    "trust-remote-code",
    "is-embedding",
    "enable-multimodal",
    "skip-server-warmup",
    "enable-fp32-lm-head",
    "disable-hybrid-swa-memory",
    "stream-output",
    "sleep-on-idle",
    "log-requests",
    "show-time-cost",
    "enable-metrics-for-all-schedulers",
    "collect-tokens-histogram",
    "enable-request-time-stats-logging",
    "enable-cache-report",
    "enable-lora",
    "enable-eplb",
    "enable-hierarchical-cache",
    "disable-radix-cache",
    "disable-cuda-graph",
    "disable-cuda-graph-padding",
    "enable-profile-cuda-graph",
    "enable-cudagraph-gc",
    "enable-nccl-nvls",
    "enable-symm-mem",
    "enable-tokenizer-batch-encode",
    "disable-outlines-disk-cache",
    "disable-custom-all-reduce",
    "enable-mscclpp",
    "disable-overlap-schedule",
    "enable-mixed-chunk",
    "enable-dp-attention",
    "enable-dp-lm-head",
    "enable-two-batch-overlap",
    "enable-torch-compile",
    "enable-nan-detection",
    "enable-p2p-check",
    "triton-attention-reduce-in-fp32",
    "delete-ckpt-after-loading",
    "enable-memory-saver",
    "allow-auto-truncate",
    "enable-custom-logit-processor",
    "disable-shared-experts-fusion",
    "disable-chunked-prefix-cache",
    "disable-fast-image-processor",
    "enable-return-hidden-states",
    "enable-deterministic-inference",
]


def _other_flags(
    values: Iterable[str], switches: Iterable[str], short: dict[str, str], *, negatable: bool
) -> tuple[Flag, ...]:
    def names(name: str) -> tuple[str, ...]:
        return (f"--{name}",) + ((short[name],) if name in short else ())

    return (
        *(Flag(names(n)) for n in values),
        *(Flag(names(n), value=False, negatable=negatable) for n in switches),
    )


VLLM_SERVE = FlagTable(
    "vllm",
    (
        *VLLM_CORE,
        *_other_flags(VLLM_VALUE_FLAGS, VLLM_BOOL_FLAGS, VLLM_SHORT, negatable=True),
        HELP,
    ),
    flexible=True,
)
SGLANG_LAUNCH_SERVER = FlagTable(
    "sglang",
    (*SGLANG_CORE, *_other_flags(SGLANG_VALUE_FLAGS, SGLANG_BOOL_FLAGS, {}, negatable=False), HELP),
    flexible=False,
)
TABLES: dict[str, FlagTable] = {"vllm": VLLM_SERVE, "sglang": SGLANG_LAUNCH_SERVER}
