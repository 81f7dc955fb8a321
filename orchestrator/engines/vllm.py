"""vLLM: ``vllm serve MODEL ... --speculative-config JSON``.

The playbook's ``num_draft_tokens`` (tokens drafted per step) is vLLM's
``num_speculative_tokens`` as is. Method names are vLLM's own (``dflash``, ``mtp``, ``eagle``,
``eagle3``, ``ngram``), and the JSON is compact with keys in the order the reference shows, so
the printed argv is stable and copy-pastable. The rest of what orch knows of vLLM (its log
parser, Prometheus delta, stats interval, doctor facts) is on ``VllmEngine`` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from orchestrator.config.methods import KNOWN_METHODS, EngineName
from orchestrator.config.playbook import RunSpec, SpeculativeSpec
from orchestrator.engines.base import LOOPBACK, CacheReset, Engine, compact_json
from orchestrator.engines.flags import VLLM_SERVE, FlagTable, values_of
from orchestrator.engines.reference import (
    DflashBlock,
    DflashLaunch,
    DoctorFacts,
    MethodSupport,
    StatsInterval,
)
from orchestrator.metrics import vllm_log
from orchestrator.metrics.logparse import LineParser
from orchestrator.metrics.prom import Scrape, SpecDelta, vllm_spec_delta

_LISTED = "docs/ENGINES.md (vLLM 0.33 method list)"
# methods the real vLLM 0.32.0 (its CPU build) served in tests/real_engine/: known to work there
_RAN_ON_0_32 = frozenset({"ngram", "draft_model", "eagle3"})
_RAN = "served by the real vLLM 0.32.0 CPU build (tests/real_engine/)"
API_KEY_FLAG = "--api-key"
API_KEY_ENV = "VLLM_API_KEY"  # vLLM's own fallback for --api-key
# vLLM serves its development endpoints (/reset_prefix_cache among them) only with this set
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"


def dev_mode(value: str | None) -> bool:
    """Whether vLLM reads ``VLLM_SERVER_DEV_MODE=value`` as on: ``bool(int(value))`` (envs.py);
    a value ``int`` refuses is not on (vLLM itself would fail to start with it)."""
    try:
        return value is not None and int(value) != 0
    except ValueError:
        return False


# vLLM 0.33.0 is the release the engine reference (docs/) was read from.
DOCTOR = DoctorFacts(
    layer_shift=1,  # the hidden state after layer i is at index i + 1 (0: the embeddings)
    default_memory_fraction=0.9,  # --gpu-memory-utilization's default
    method_support={
        "dflash": MethodSupport(
            "0.20.0", "0.33.0", "vLLM has served method 'dflash' since 0.20 (NeMo Automodel #2913)"
        ),
        **{
            method: MethodSupport(None, "0.33.0", _LISTED)
            for method in KNOWN_METHODS
            if method != "dflash"
        },
        **{method: MethodSupport(None, "0.32.0", _RAN) for method in _RAN_ON_0_32},
    },
    # DFlash2DraftModel is served by vLLM's "dflash" method from 0.28 on.
    drafter_architectures={"dflash": frozenset({"DFlashDraftModel", "DFlash2DraftModel"})},
    dflash_block=DflashBlock(exact=False, setting="vLLM's num_speculative_tokens"),
    attention_fix="for vLLM DFlash pass --attention-backend flash_attn (extra_args)",
    dflash_launch=DflashLaunch(
        attention_flag="--attention-backend",
        attention_env="VLLM_ATTENTION_BACKEND",  # older releases' spelling of the same choice
        backend="flash_attn",
        runner_env="VLLM_USE_V2_MODEL_RUNNER",
    ),
)


class VllmEngine(Engine):
    name: ClassVar[EngineName] = "vllm"
    display_name = "vLLM"
    package = "vllm"
    default_port = 8000
    log_parser = LineParser(vllm_log.ENGINE, vllm_log.KINDS, vllm_log.parse, vllm_log.is_signature)
    stats_interval = StatsInterval(
        "VLLM_LOG_STATS_INTERVAL", 10.0, "s", "env", line="SpecDecoding metrics line"
    )
    doctor = DOCTOR
    # vLLM's deprecated per-family MTP names, and its GPU n-gram drafter
    method_aliases: ClassVar[dict[str, str]] = {
        "qwen3_next_mtp": "mtp",
        "qwen3_5_mtp": "mtp",
        "deepseek_mtp": "mtp",
        "ngram_gpu": "ngram",
    }
    flags: ClassVar[FlagTable] = VLLM_SERVE
    ready_lines = ("Application startup complete.",)
    # {"success": false} while running requests hold blocks: the load generator asks again
    cache_reset_request = CacheReset("POST", "/reset_prefix_cache")
    flag_fields: ClassVar[dict[str, str]] = {
        "--port": "`port`",
        "--tensor-parallel-size": "`tensor_parallel`",
        "--max-model-len": "`max_model_len`",
        "--gpu-memory-utilization": "`gpu_memory_fraction`",
        "--served-model-name": "`served_name`",
        "--speculative-config": "`speculative`",
    }
    # the positional MODEL wins over --model, and a --speculative-config of a run without
    # `speculative` would measure a drafter the summary does not know about
    owned_flags: ClassVar[dict[str, str]] = {
        "--model": "`model`",
        "--speculative-config": "`speculative`",
    }
    refused_flags: ClassVar[dict[str, str]] = {
        "--disable-log-stats": "it turns off the stats lines orch measures speculative decoding from",
    }
    num_tokens_hint: ClassVar[str] = (
        "for vLLM it becomes num_speculative_tokens (DFlash: drafter block_size - 1)"
    )

    def spec_delta(self, before: Scrape, after: Scrape) -> SpecDelta:
        return vllm_spec_delta(before, after)

    def expert_size(self, run: RunSpec, *, tensor: int, data: int) -> int:
        """``--enable-expert-parallel`` shards the experts over the tensor x data GPUs."""
        on = self.flags.switch([str(a) for a in run.extra_args], "--enable-expert-parallel")
        return tensor * data if on else 1

    def cache_reset_note(self, run: RunSpec, env: Mapping[str, str] | None = None) -> str | None:
        """/reset_prefix_cache is a development endpoint: absent (404) without dev mode."""
        value = (env if env is not None else run.env).get(DEV_MODE_ENV)
        if dev_mode(value):
            return None
        return (
            "prefix cache not reset between load points: vLLM exposes /reset_prefix_cache "
            f"only with {DEV_MODE_ENV}=1 (add it to the run's env to reset it)"
        )

    # -- the API key travels in the environment: argv is world-readable (ps, /proc) ----------
    def _api_key_uses(self, run: RunSpec) -> tuple[list[str], list[str]]:
        """(extra_args without their --api-key uses, the keys those uses gave)."""
        args = [str(a) for a in run.extra_args]
        drop: set[int] = set()
        keys: list[str] = []
        for use in self.flag_uses(args):
            if use.flag is not None and use.flag.name == API_KEY_FLAG:
                values = values_of(args, use)
                keys += values
                drop.add(use.index)
                if use.inline is None:
                    drop.update(range(use.index + 1, use.index + 1 + len(values)))
        return [a for i, a in enumerate(args) if i not in drop], keys

    def argv(self, run: RunSpec, *, port: int | None = None) -> list[str]:
        """The argv without ``--api-key``: vLLM reads the key from ``VLLM_API_KEY`` (see
        ``engine_env``), where other users of the host cannot read it in ``ps``. Several keys
        (vLLM's --api-key takes a list; the variable holds one) stay in argv, masked."""
        argv = super().argv(run, port=port)
        rest, keys = self._api_key_uses(run)
        if len(keys) != 1:
            return argv
        extra = len(run.extra_args)
        return argv[: len(argv) - extra] + rest

    def engine_env(self, run: RunSpec) -> dict[str, str]:
        _rest, keys = self._api_key_uses(run)
        return {API_KEY_ENV: keys[0]} if len(keys) == 1 else {}

    def base_argv(self, run: RunSpec, *, port: int) -> list[str]:
        argv = [
            "vllm",
            "serve",
            run.model,
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--tensor-parallel-size",
            str(run.tensor_parallel or 1),
        ]
        if run.max_model_len is not None:
            argv += ["--max-model-len", str(run.max_model_len)]
        if run.gpu_memory_fraction is not None:
            argv += ["--gpu-memory-utilization", str(run.gpu_memory_fraction)]
        return argv + ["--served-model-name", self.served_name(run)]

    def speculative_config(self, run: RunSpec) -> dict[str, Any] | None:
        spec = run.speculative
        if spec.method == "none":
            return None
        config: dict[str, Any] = {"method": spec.method}
        reserved = {
            "method": "speculative.method",
            "num_speculative_tokens": "speculative.num_draft_tokens",
        }
        if spec.draft_model:
            config["model"] = spec.draft_model
            reserved["model"] = "speculative.draft_model"
        config["num_speculative_tokens"] = spec.num_draft_tokens
        if spec.draft_tensor_parallel is not None:
            config["draft_tensor_parallel_size"] = spec.draft_tensor_parallel
            reserved["draft_tensor_parallel_size"] = "speculative.draft_tensor_parallel"
        for key, value in (
            ("prompt_lookup_min", spec.prompt_lookup_min),
            ("prompt_lookup_max", spec.prompt_lookup_max),
        ):
            if value is not None:
                config[key] = value
                reserved[key] = f"speculative.{key}"
        return self.merge_options(run, config, spec.options, reserved_from=reserved)

    def speculative_argv(self, run: RunSpec) -> list[str]:
        config = self.speculative_config(run)
        return [] if config is None else ["--speculative-config", compact_json(config)]

    def validate_speculative(self, run: RunSpec, spec: SpeculativeSpec) -> None:
        if spec.method == "mtp" and spec.draft_model:
            self.fail(
                run,
                "speculative method 'mtp' on vllm uses the target model's own MTP head: "
                "remove speculative.draft_model",
                hint="for a separate drafter use method eagle, eagle3 or dflash",
                field=("speculative", "draft_model"),
            )
        if spec.eagle_topk is not None:
            self.fail(
                run,
                "speculative.eagle_topk is an SGLang setting; vllm drafts one chain",
                hint="remove eagle_topk for vllm runs",
                field=("speculative", "eagle_topk"),
            )
        draft_tp = spec.draft_tensor_parallel
        if draft_tp is not None and (draft_tp < 1 or spec.method in ("none", "ngram", "mtp")):
            self.fail(
                run,
                f"speculative.draft_tensor_parallel ({draft_tp}) needs a positive value "
                "and a separate draft model (dflash, eagle, eagle3)",
                field=("speculative", "draft_tensor_parallel"),
            )
