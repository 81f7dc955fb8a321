"""vLLM: ``vllm serve MODEL ... --speculative-config JSON``.

The playbook's ``num_draft_tokens`` (tokens drafted per step) is vLLM's
``num_speculative_tokens`` as is. Method names are vLLM's own (``dflash``, ``mtp``, ``eagle``,
``eagle3``, ``ngram``), and the JSON is compact with keys in the order the reference shows, so
the printed argv is stable and copy-pastable.
"""

from __future__ import annotations

from typing import Any, ClassVar

from orchestrator.engines.base import LOOPBACK, EngineAdapter, compact_json
from orchestrator.engines.flags import VLLM_SERVE, FlagTable


class VllmAdapter(EngineAdapter):
    name = "vllm"
    default_port = 8000
    log_parser = "vllm"
    flags: ClassVar[FlagTable] = VLLM_SERVE
    ready_lines = ("Application startup complete.",)
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
    owned_flags: ClassVar[dict[str, str]] = {"--model": "`model`", "--speculative-config": "`speculative`"}
    refused_flags: ClassVar[dict[str, str]] = {
        "--disable-log-stats": "it turns off the stats lines orch measures speculative decoding from",
    }
    num_tokens_hint = "for vLLM it becomes num_speculative_tokens (DFlash: drafter block_size - 1)"

    def base_argv(self, run: Any, *, port: int) -> list[str]:
        argv = ["vllm", "serve", run.model, "--host", LOOPBACK, "--port", str(port),
                "--tensor-parallel-size", str(run.tensor_parallel or 1)]
        if run.max_model_len is not None:
            argv += ["--max-model-len", str(run.max_model_len)]
        if run.gpu_memory_fraction is not None:
            argv += ["--gpu-memory-utilization", str(run.gpu_memory_fraction)]
        return argv + ["--served-model-name", self.served_name(run)]

    def speculative_config(self, run: Any) -> dict[str, Any] | None:
        spec = run.speculative
        if spec is None or spec.method == "none":
            return None
        config: dict[str, Any] = {"method": spec.method}
        reserved = {"method": "speculative.method",
                    "num_speculative_tokens": "speculative.num_draft_tokens"}
        if spec.draft_model:
            config["model"] = spec.draft_model
            reserved["model"] = "speculative.draft_model"
        config["num_speculative_tokens"] = spec.num_draft_tokens
        draft_tp = getattr(spec, "draft_tensor_parallel", None)
        if draft_tp is not None:
            config["draft_tensor_parallel_size"] = draft_tp
            reserved["draft_tensor_parallel_size"] = "speculative.draft_tensor_parallel"
        for key in ("prompt_lookup_min", "prompt_lookup_max"):
            value = getattr(spec, key, None)
            if value is not None:
                config[key] = value
                reserved[key] = f"speculative.{key}"
        return self.merge_options(run, config, getattr(spec, "options", None), reserved_from=reserved)

    def speculative_argv(self, run: Any) -> list[str]:
        config = self.speculative_config(run)
        return [] if config is None else ["--speculative-config", compact_json(config)]

    def validate_speculative(self, run: Any, spec: Any) -> None:
        if spec.method == "mtp" and spec.draft_model:
            self.fail(run, "speculative method 'mtp' on vllm uses the target model's own MTP head: "
                      "remove speculative.draft_model",
                      hint="for a separate drafter use method eagle, eagle3 or dflash")
        if getattr(spec, "eagle_topk", None) is not None:
            self.fail(run, "speculative.eagle_topk is an SGLang setting; vllm drafts one chain",
                      hint="remove eagle_topk for vllm runs")
        draft_tp = getattr(spec, "draft_tensor_parallel", None)
        if draft_tp is not None and (draft_tp < 1 or spec.method in ("none", "ngram", "mtp")):
            self.fail(run, f"speculative.draft_tensor_parallel ({draft_tp}) needs a positive value "
                      "and a separate draft model (dflash, eagle, eagle3)")
