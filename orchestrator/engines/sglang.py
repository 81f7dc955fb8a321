"""SGLang: ``python -m sglang.launch_server --model-path MODEL ...``.

The playbook's ``num_draft_tokens`` N (tokens drafted per step) maps to SGLang's flags as:
EAGLE / EAGLE3 / NEXTN (= mtp) ``--speculative-num-steps N --speculative-eagle-topk K
--speculative-num-draft-tokens N+1`` (a chain when K is 1, the verified token included);
DFLASH ``--speculative-num-draft-tokens N+1`` (the drafter's block size, anchor included);
NGRAM ``--speculative-num-draft-tokens N+1`` as well (SGLang counts the last verified token in
the draft, like EAGLE). ``options`` become ``--speculative-<key>`` flags (``True`` alone,
``False``/``None`` omitted), so any knob SGLang adds later is reachable without a code change.
``python`` is resolved on the host to the interpreter the agent runs in (the engine's venv).
The rest of what orch knows of SGLang (its log parser, Prometheus delta, stats interval, doctor
facts) is on ``SglangEngine`` too.
"""

from __future__ import annotations

from typing import ClassVar

from orchestrator.config.methods import CHAIN_METHODS, EngineName, SpeculativeMethod
from orchestrator.config.playbook import RunSpec, SpeculativeSpec
from orchestrator.engines.base import LOOPBACK, CacheReset, Engine
from orchestrator.engines.flags import SGLANG_LAUNCH_SERVER, FlagTable
from orchestrator.engines.reference import (
    DflashBlock,
    DoctorFacts,
    MethodSupport,
    StatsInterval,
)
from orchestrator.metrics import sglang_log
from orchestrator.metrics.logparse import LineParser
from orchestrator.metrics.prom import Scrape, SpecDelta, sglang_spec_delta

# --speculative-algorithm: SGLang's own name of each playbook method
ALGORITHMS: dict[SpeculativeMethod, str] = {
    "mtp": "NEXTN",
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "dflash": "DFLASH",
    "ngram": "NGRAM",
    "draft_model": "STANDALONE",  # a smaller model of the same tokenizer drafts
}
_READ = "docs/ENGINES.md (SGLang 0.5.23)"

# SGLang 0.5.23 is the release the engine reference (docs/) was read from.
DOCTOR = DoctorFacts(
    layer_shift=0,  # its hook captures "before layer i + 1" but handles the last layer
    default_memory_fraction=0.88,  # a typical --mem-fraction-static on one GPU
    method_support={
        "dflash": MethodSupport(
            None,
            "0.5.23",
            "DFLASH merged in SGLang in April 2026 (#22077); docs/ENGINES.md (0.5.23)",
        ),
        "mtp": MethodSupport(None, "0.5.23", "docs/ENGINES.md (SGLang 0.5.23, NEXTN)"),
        "eagle": MethodSupport(None, "0.5.23", _READ),
        "eagle3": MethodSupport(None, "0.5.23", _READ),
        "draft_model": MethodSupport(None, "0.5.23", "docs/ENGINES.md (SGLang 0.5.23, STANDALONE)"),
        "ngram": MethodSupport(None, "0.5.23", "docs/ENGINES.md (SGLang 0.5.23, NGRAM)"),
    },
    drafter_architectures={"dflash": frozenset({"DFlashDraftModel"})},
    dflash_block=DflashBlock(
        exact=True,
        setting="SGLang DFLASH verifies whole blocks: --speculative-num-draft-tokens",
    ),
    attention_fix=(
        "request an attention backend SGLang keeps on this GPU and KV cache dtype (see its log)"
    ),
)


class SglangEngine(Engine):
    name: ClassVar[EngineName] = "sglang"
    display_name = "SGLang"
    package = "sglang"
    default_port = 30000
    server_info_path = "/server_info"
    log_parser = LineParser(
        sglang_log.ENGINE, sglang_log.KINDS, sglang_log.parse, sglang_log.is_signature
    )
    # orch passes the flag with this value (SGLang's own default is 40 as well)
    stats_interval = StatsInterval(
        "--decode-log-interval",
        40,
        "decode steps",
        "flag",
        line="Decode batch line with an accept len",
    )
    doctor = DOCTOR
    # its --speculative-algorithm names (NEXTN: a built-in MTP head); STANDALONE: a draft model
    method_aliases: ClassVar[dict[str, str]] = {
        algorithm.lower(): method for method, algorithm in ALGORITHMS.items()
    }
    flags: ClassVar[FlagTable] = SGLANG_LAUNCH_SERVER
    ready_lines = ("The server is fired up and ready to roll!",)
    # GET or POST; 400 while requests are running or waiting: the load generator asks again
    cache_reset_request = CacheReset("POST", "/flush_cache")
    flag_fields: ClassVar[dict[str, str]] = {
        "--model-path": "`model`",
        "--port": "`port`",
        "--tp-size": "`tensor_parallel`",
        "--mem-fraction-static": "`gpu_memory_fraction`",
        "--context-length": "`max_model_len`",
        "--served-model-name": "`served_name`",
        "--speculative-algorithm": "`speculative.method`",
        "--speculative-draft-model-path": "`speculative.draft_model`",
        "--speculative-num-steps": "`speculative.num_draft_tokens`",
        "--speculative-num-draft-tokens": "`speculative.num_draft_tokens`",
        "--speculative-eagle-topk": "`speculative.eagle_topk`",
        "--speculative-ngram-min-match-window-size": "`speculative.prompt_lookup_min`",
        "--speculative-ngram-max-match-window-size": "`speculative.prompt_lookup_max`",
    }
    # speculation switched on behind `speculative`'s back would go unmeasured
    owned_flags: ClassVar[dict[str, str]] = {"--speculative-algorithm": "`speculative.method`"}
    num_tokens_hint: ClassVar[str] = (
        "for SGLang it becomes --speculative-num-steps N and --speculative-num-draft-tokens N+1"
    )

    def spec_delta(self, before: Scrape, after: Scrape) -> SpecDelta:
        return sglang_spec_delta(before, after)

    def expert_size(self, run: RunSpec, *, tensor: int, data: int) -> int:
        """``--ep-size``: the experts sharded within the tensor-parallel group."""
        return self.size_flag(run, "--expert-parallel-size")

    def data_within_tensor(self, run: RunSpec) -> bool:
        """``--enable-dp-attention``: the dp ranks are attention replicas inside the tp group."""
        return bool(self.flags.switch([str(a) for a in run.extra_args], "--enable-dp-attention"))

    def base_argv(self, run: RunSpec, *, port: int) -> list[str]:
        argv = [
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            run.model,
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--tp-size",
            str(run.tensor_parallel or 1),
        ]
        if run.gpu_memory_fraction is not None:
            argv += ["--mem-fraction-static", str(run.gpu_memory_fraction)]
        if run.max_model_len is not None:
            argv += ["--context-length", str(run.max_model_len)]
        return argv + [
            "--enable-metrics",
            "--decode-log-interval",
            f"{self.stats_interval.default:g}",
            "--served-model-name",
            self.served_name(run),
        ]

    def speculative_argv(self, run: RunSpec) -> list[str]:
        spec = run.speculative
        if spec.method == "none":
            return []
        n = spec.num_draft_tokens or 0  # validated positive before any argv is used
        argv = ["--speculative-algorithm", ALGORITHMS[spec.method]]
        if spec.draft_model:
            argv += ["--speculative-draft-model-path", spec.draft_model]
        if spec.method in CHAIN_METHODS:
            topk = spec.eagle_topk or 1
            argv += ["--speculative-num-steps", str(n), "--speculative-eagle-topk", str(topk)]
        argv += ["--speculative-num-draft-tokens", str(n + 1)]
        for value, flag in (
            (spec.prompt_lookup_min, "--speculative-ngram-min-match-window-size"),
            (spec.prompt_lookup_max, "--speculative-ngram-max-match-window-size"),
        ):
            if value is not None:
                argv += [flag, str(value)]
        return argv + self.option_flags(run, argv)

    def option_flags(self, run: RunSpec, emitted: list[str]) -> list[str]:
        out: list[str] = []
        for key, value in run.speculative.options.items():
            flag = "--" + (key if key.startswith("speculative") else "speculative-" + key).replace(
                "_", "-"
            )
            if flag in emitted:
                self.fail(
                    run,
                    f"speculative.options.{key} is set by orch from "
                    f"{self.flag_fields.get(flag, 'the typed speculative fields').strip('`')}",
                    hint=f"remove options.{key}",
                    field=("speculative", "options", key),
                )
            if value is True:
                out.append(flag)
            elif value is not False and value is not None:
                out += [flag, str(value)]
        return out

    def validate_speculative(self, run: RunSpec, spec: SpeculativeSpec) -> None:
        if spec.method == "dflash" and not spec.draft_model:
            self.fail(
                run,
                "DFLASH on SGLang needs a draft model path: set speculative.draft_model",
                field=("speculative", "draft_model"),
            )
        if spec.draft_tensor_parallel is not None:
            self.fail(
                run,
                "speculative.draft_tensor_parallel is a vLLM setting; SGLang runs the "
                "drafter with the target's tp-size",
                hint="remove draft_tensor_parallel",
                field=("speculative", "draft_tensor_parallel"),
            )
        topk = spec.eagle_topk
        if topk is not None and (topk < 1 or spec.method not in CHAIN_METHODS):
            self.fail(
                run,
                f"speculative.eagle_topk ({topk}) must be at least 1 and applies to "
                "methods mtp, eagle and eagle3 only",
                field=("speculative", "eagle_topk"),
            )
