"""SGLang: ``python -m sglang.launch_server --model-path MODEL ...``.

The playbook's ``num_draft_tokens`` N (tokens drafted per step) maps to SGLang's flags as:
EAGLE / EAGLE3 / NEXTN (= mtp) ``--speculative-num-steps N --speculative-eagle-topk K
--speculative-num-draft-tokens N+1`` (a chain when K is 1, the verified token included);
DFLASH ``--speculative-num-draft-tokens N+1`` (the drafter's block size, anchor included);
NGRAM ``--speculative-num-draft-tokens N+1`` as well (SGLang counts the last verified token in
the draft, like EAGLE). ``options`` become ``--speculative-<key>`` flags (``True`` alone,
``False``/``None`` omitted), so any knob SGLang adds later is reachable without a code change.
``python`` is resolved on the host to the interpreter the agent runs in (the engine's venv).
"""

from __future__ import annotations

from typing import Any, ClassVar

from orchestrator.engines.base import LOOPBACK, EngineAdapter
from orchestrator.engines.flags import SGLANG_LAUNCH_SERVER, FlagTable

ALGORITHMS = {"mtp": "NEXTN", "eagle": "EAGLE", "eagle3": "EAGLE3", "dflash": "DFLASH", "ngram": "NGRAM"}
DECODE_LOG_INTERVAL = 40


class SglangAdapter(EngineAdapter):
    name = "sglang"
    default_port = 30000
    server_info_path = "/server_info"
    log_parser = "sglang"
    flags: ClassVar[FlagTable] = SGLANG_LAUNCH_SERVER
    ready_lines = ("The server is fired up and ready to roll!",)
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
    num_tokens_hint = ("for SGLang it becomes --speculative-num-steps N and "
                       "--speculative-num-draft-tokens N+1")

    def base_argv(self, run: Any, *, port: int) -> list[str]:
        argv = ["python", "-m", "sglang.launch_server", "--model-path", run.model,
                "--host", LOOPBACK, "--port", str(port), "--tp-size", str(run.tensor_parallel or 1)]
        if run.gpu_memory_fraction is not None:
            argv += ["--mem-fraction-static", str(run.gpu_memory_fraction)]
        if run.max_model_len is not None:
            argv += ["--context-length", str(run.max_model_len)]
        return argv + ["--enable-metrics", "--decode-log-interval", str(DECODE_LOG_INTERVAL),
                       "--served-model-name", self.served_name(run)]

    def speculative_argv(self, run: Any) -> list[str]:
        spec = run.speculative
        if spec is None or spec.method == "none":
            return []
        n = spec.num_draft_tokens
        argv = ["--speculative-algorithm", ALGORITHMS[spec.method]]
        if spec.draft_model:
            argv += ["--speculative-draft-model-path", spec.draft_model]
        if spec.method in ("mtp", "eagle", "eagle3"):
            topk = getattr(spec, "eagle_topk", None) or 1
            argv += ["--speculative-num-steps", str(n), "--speculative-eagle-topk", str(topk)]
        argv += ["--speculative-num-draft-tokens", str(n + 1)]
        for key, flag in (("prompt_lookup_min", "--speculative-ngram-min-match-window-size"),
                          ("prompt_lookup_max", "--speculative-ngram-max-match-window-size")):
            value = getattr(spec, key, None)
            if value is not None:
                argv += [flag, str(value)]
        return argv + self.option_flags(run, argv)

    def option_flags(self, run: Any, emitted: list[str]) -> list[str]:
        out: list[str] = []
        for key, value in (getattr(run.speculative, "options", None) or {}).items():
            flag = "--" + (key if key.startswith("speculative") else "speculative-" + key).replace("_", "-")
            if flag in emitted:
                self.fail(run, f"speculative.options.{key} is set by orch from "
                          f"{self.flag_fields.get(flag, 'the typed speculative fields').strip('`')}",
                          hint=f"remove options.{key}")
            if value is True:
                out.append(flag)
            elif value is not False and value is not None:
                out += [flag, str(value)]
        return out

    def validate_speculative(self, run: Any, spec: Any) -> None:
        if spec.method == "dflash" and not spec.draft_model:
            self.fail(run, "DFLASH on SGLang needs a draft model path: set speculative.draft_model")
        if getattr(spec, "draft_tensor_parallel", None) is not None:
            self.fail(run, "speculative.draft_tensor_parallel is a vLLM setting; SGLang runs the "
                      "drafter with the target's tp-size", hint="remove draft_tensor_parallel")
        topk = getattr(spec, "eagle_topk", None)
        if topk is not None and (topk < 1 or spec.method not in ("mtp", "eagle", "eagle3")):
            self.fail(run, f"speculative.eagle_topk ({topk}) must be at least 1 and applies to "
                      "methods mtp, eagle and eagle3 only")
