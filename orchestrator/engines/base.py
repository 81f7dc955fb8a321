"""What every engine adapter offers: a validated run spec in, the exact launch facts out.

An adapter is pure: no host is touched. It turns a typed ``RunSpec`` into the argv the real
engine accepts, the environment it runs with, and where to ask it whether it is ready, so the
dry run can print exactly what would be started and the launch path starts exactly that.

Flags orch sets from typed playbook fields may not be repeated in ``extra_args``: argparse
keeps the last value, so a repeat would silently override the field (and ``--port`` or
``--host`` would move the server to where orch never looks). Such repeats are refused up front.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from orchestrator.config.hostconfig import (
    HostConfig,
    expand_env,
    is_secret_key,
    mask,
    secret_values,
)
from orchestrator.errors import SpecError

LOOPBACK = "127.0.0.1"
SPECULATIVE_METHODS = ("none", "dflash", "mtp", "eagle", "eagle3", "ngram")
NEEDS_DRAFT_MODEL = frozenset({"dflash", "eagle", "eagle3"})
SECRET_FLAGS = frozenset({"--api-key", "--hf-token"})  # their values are masked when shown


def compact_json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def flag_name(item: str) -> str | None:
    """``--tp-size=2`` -> ``--tp-size``; a value (not starting with '-') -> None."""
    if not item.startswith("-") or item == "-" or _is_number(item):
        return None
    return item.split("=", 1)[0]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def flag_values(args: list[str], names: frozenset[str] | set[str]) -> list[tuple[str, str | None]]:
    """(flag, value) for every item of ``args`` naming one of ``names`` (either spelling)."""
    found: list[tuple[str, str | None]] = []
    for i, item in enumerate(args):
        name = flag_name(item)
        if name is None or name not in names:
            continue
        if "=" in item:
            found.append((name, item.split("=", 1)[1]))
        else:
            found.append((name, args[i + 1] if i + 1 < len(args) else None))
    return found


class EngineAdapter(ABC):
    name: ClassVar[str]
    default_port: ClassVar[int]
    health_path: ClassVar[str] = "/health"
    models_path: ClassVar[str] = "/v1/models"
    metrics_path: ClassVar[str] = "/metrics"
    server_info_path: ClassVar[str | None] = None
    log_parser: ClassVar[str]
    ready_lines: ClassVar[tuple[str, ...]]
    methods: ClassVar[tuple[str, ...]] = SPECULATIVE_METHODS
    # flag orch emits -> the playbook field that sets it (named when extra_args repeats it)
    flag_fields: ClassVar[dict[str, str]] = {}
    aliases: ClassVar[dict[str, str]] = {}  # short or alternative spelling -> canonical flag
    refused_flags: ClassVar[dict[str, str]] = {}  # flag -> why orch cannot run with it

    # -- the launch facts ------------------------------------------------------------------
    def port(self, run: Any) -> int:
        return run.port or self.default_port

    def served_name(self, run: Any) -> str:
        return run.served_name or run.model

    def api_key(self, run: Any) -> str | None:
        """The ``--api-key`` the run gives its server (both engines guard ``/v1/*`` with it)."""
        found = flag_values([str(a) for a in run.extra_args], {"--api-key"})
        return found[-1][1] if found else None

    def gpus_needed(self, run: Any) -> int:
        return int(run.tensor_parallel or 1)

    def argv(self, run: Any, *, port: int | None = None) -> list[str]:
        """The exact argv: the engine's own flags, the speculative ones, then ``extra_args``."""
        self.validate(run)
        return [*self.base_argv(run, port=self.port(run) if port is None else port),
                *self.speculative_argv(run), *[str(a) for a in (run.extra_args or [])]]

    @abstractmethod
    def base_argv(self, run: Any, *, port: int) -> list[str]: ...

    @abstractmethod
    def speculative_argv(self, run: Any) -> list[str]: ...

    def engine_env(self, run: Any) -> dict[str, str]:
        """Variables the adapter itself adds (none unless an engine needs one)."""
        return {}

    def env(self, run: Any, host: HostConfig | None = None, *,
            environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Host env, then the run's (it wins), ``${VAR}`` expanded from the controller's env."""
        environ = dict(environ) if environ is not None else None
        merged: dict[str, str] = dict(self.engine_env(run))
        if host is not None:
            merged.update(host.resolved_env(environ))
        if hasattr(run, "resolved_env"):  # RunSpec: errors point at the playbook line
            merged.update(run.resolved_env(environ))
        else:
            merged.update(expand_env(dict(run.env or {}), environ=environ, owner=f"run {run.name!r}"))
        return merged

    def secrets(self, run: Any, host: HostConfig | None = None, *,
                environ: Mapping[str, str] | None = None) -> set[str]:
        """Every value to show as ``***``: expanded ``${VAR}``s, secret-named keys, --api-key."""
        environ = dict(environ) if environ is not None else None
        found = secret_values(dict(run.env or {}), environ=environ)
        if host is not None:
            found |= host.secret_values(environ)
        found |= {v for _, v in flag_values([str(a) for a in run.extra_args or []], SECRET_FLAGS) if v}
        return found

    def masked_env(self, env: Mapping[str, str], secrets: set[str]) -> dict[str, str]:
        return {k: ("***" if is_secret_key(k) and v else mask(v, secrets)) for k, v in env.items()}

    def masked_argv(self, argv: list[str], secrets: set[str]) -> list[str]:
        return [mask(item, secrets) for item in argv]

    # -- validation ------------------------------------------------------------------------
    def validate(self, run: Any) -> None:
        """Refuse, before any host is touched, a run this engine cannot start as asked."""
        spec = run.speculative
        method = spec.method if spec is not None else "none"
        if not isinstance(run.tensor_parallel, int) or run.tensor_parallel < 1:
            self.fail(run, f"tensor_parallel must be a positive integer, got {run.tensor_parallel}")
        if method not in self.methods:
            self.fail(run, f"speculative method {method!r} is not supported by {self.name} "
                      f"(supported: {', '.join(self.methods)})")
        if spec is not None:
            self.validate_speculative(run, spec)  # engine-specific messages first
            self.validate_common_speculative(run, spec)
            self.speculative_argv(run)  # refuses options that clash with typed fields
        self.validate_extra_args(run)

    def validate_common_speculative(self, run: Any, spec: Any) -> None:
        method = spec.method
        if method == "none":
            for field in ("draft_model", "num_draft_tokens"):
                if getattr(spec, field, None) is not None:
                    self.fail(run, f"speculative.{field} is set but speculative.method is 'none'",
                              hint="set a method (dflash, mtp, eagle, eagle3, ngram) or remove "
                              f"speculative.{field}")
            return
        tokens = spec.num_draft_tokens
        if tokens is None or tokens <= 0:
            self.fail(run, f"speculative.num_draft_tokens must be a positive integer for method "
                      f"{method!r} on {self.name}, got {tokens}",
                      hint=self.num_tokens_hint)
        if method in NEEDS_DRAFT_MODEL and not spec.draft_model:
            self.fail(run, f"speculative method {method!r} needs speculative.draft_model "
                      "(the drafter's model id or path)")
        if method == "ngram" and spec.draft_model:
            self.fail(run, "speculative method 'ngram' drafts from the prompt: remove "
                      "speculative.draft_model")
        low = getattr(spec, "prompt_lookup_min", None)
        high = getattr(spec, "prompt_lookup_max", None)
        if (low is not None or high is not None) and method != "ngram":
            self.fail(run, f"prompt_lookup_min/max apply to method 'ngram', not {method!r}")
        for label, value in (("prompt_lookup_min", low), ("prompt_lookup_max", high)):
            if value is not None and value < 1:
                self.fail(run, f"speculative.{label} must be at least 1, got {value}")
        if low is not None and high is not None and low > high:
            self.fail(run, f"speculative.prompt_lookup_min ({low}) is larger than "
                      f"prompt_lookup_max ({high})")

    num_tokens_hint: ClassVar[str] = "num_draft_tokens is the number of tokens drafted per step"

    @abstractmethod
    def validate_speculative(self, run: Any, spec: Any) -> None: ...

    def validate_extra_args(self, run: Any) -> None:
        args = [str(a) for a in run.extra_args or []]
        for _, value in flag_values(args, {"--host"}):
            if value != LOOPBACK:
                self.fail(run, f"extra_args sets --host {value}: engines always bind {LOOPBACK} "
                          "(orch reaches them through the host's loopback)",
                          hint="remove --host from extra_args; the benchmark client runs on the host")
        for flag, reason in self.refused_flags.items():
            if flag_values(args, {flag}):
                self.fail(run, f"extra_args has {flag}: {reason}", hint=f"remove {flag} from extra_args")
        emitted = {flag_name(item) for item in
                   self.base_argv(run, port=self.port(run)) + self.speculative_argv(run)}
        given = {flag_name(item) for item in args} - {None, "--host"}
        for flag in sorted(f for f in given if f is not None):
            canonical = self.canonical_flag(flag)
            if canonical in emitted:
                field = self.flag_fields.get(canonical, "the run's typed fields")
                self.fail(run, f"extra_args sets {flag}, which orch sets from {field}",
                          hint=f"set {field} in the run instead of passing {flag} in extra_args")

    def canonical_flag(self, flag: str) -> str:
        """``--tp_size`` / ``--speculative-config.method`` / ``-tp`` -> the flag orch emits."""
        if flag.startswith("--"):
            flag = "--" + flag[2:].split(".", 1)[0].replace("_", "-")
        return self.aliases.get(flag, flag)

    def fail(self, run: Any, message: str, *, hint: str | None = None) -> None:
        raise SpecError(message, run=run.name, hint=hint)

    def merge_options(self, run: Any, base: dict[str, Any], options: Mapping[str, Any] | None,
                      *, reserved_from: Mapping[str, str]) -> dict[str, Any]:
        """``base`` plus the user's method-specific ``options``, refusing ones orch sets itself."""
        merged = dict(base)
        for key, value in (options or {}).items():
            if key in merged or key in reserved_from:
                field = reserved_from.get(key, "the typed speculative fields")
                self.fail(run, f"speculative.options.{key} is set by orch from {field}",
                          hint=f"set {field} instead of options.{key}")
            merged[key] = value
        return merged
