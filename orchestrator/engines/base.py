"""What orch knows about an engine, in one object: a validated run spec in, the exact launch
facts out, and every engine-specific fact the rest of orch reads (flags, endpoints, log parser,
Prometheus delta, start-up failure classifier, stats interval, doctor facts, package name).

An engine object is pure: no host is touched. It turns a typed ``RunSpec`` into the argv the
real engine accepts, the environment it runs with, and where to ask it whether it is ready, so
the dry run can print exactly what would be started and the launch path starts exactly that.

``extra_args`` are read the way the engine's own parser will read them (``flags.py``: argparse
takes any unique prefix of a flag for that flag), then checked; ``flag_value`` is the one
reader every other module uses too, so an abbreviation means the same thing everywhere. Flags
orch sets from typed playbook fields may not be repeated there: argparse keeps the last value,
so a repeat would silently override the field (and ``--port`` or ``--host`` would move the
server to where orch never looks). Such repeats, abbreviated or not, are refused up front, as
are ambiguous abbreviations that might stand for one of them. Every refusal is a SpecError
whose ``field`` names the setting, so the planner points at its line in the playbook.

Secrets are masked by position (``masked_argv``, ``masked_env``): the value after a secret
flag, the whole value of a secret env key or of one holding a ``${VAR}``, whatever its length.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

from orchestrator.config.hostconfig import (
    HostConfig,
    Secrets,
    is_secret_key,
    mask,
    secret_env_keys,
    secret_values,
)
from orchestrator.config.methods import (
    NEEDS_DRAFT_MODEL,
    SPECULATIVE_METHODS,
    EngineName,
    SpeculativeMethod,
)
from orchestrator.config.playbook import RunSpec, SpeculativeSpec
from orchestrator.engines.failures import CAUSES, Cause, classify, describe
from orchestrator.engines.flags import Flag, FlagTable, FlagUse, values_of
from orchestrator.engines.parallel import Parallelism
from orchestrator.engines.reference import DoctorFacts, StatsInterval
from orchestrator.errors import FieldPath, SpecError
from orchestrator.metrics.logparse import LineParser
from orchestrator.metrics.prom import Scrape, SpecDelta

LOOPBACK = "127.0.0.1"
SECRET_FLAGS = frozenset({"--api-key", "--hf-token"})  # their values are masked when shown


def compact_json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


@dataclass(frozen=True)
class CacheReset:
    """The request that empties an engine's prefix cache, sent between a sweep's load points so
    that one point's prompts do not turn the next point's prefills into cache hits."""

    method: str  # "POST" | "GET"
    path: str  # on the server's port; the run's API key goes with it like on every request


class Engine(ABC):
    """One serving engine. Subclasses fill the class attributes; use ``get_engine(name)``."""

    name: ClassVar[EngineName]  # what users write: ``engine: vllm``
    display_name: ClassVar[str]  # what people read: "vLLM"
    package: ClassVar[str]  # the Python distribution the host's probe asks the version of
    default_port: ClassVar[int]
    health_path: ClassVar[str] = "/health"
    models_path: ClassVar[str] = "/v1/models"
    metrics_path: ClassVar[str] = "/metrics"
    server_info_path: ClassVar[str | None] = None
    cache_reset_request: ClassVar[CacheReset | None] = None  # empties its prefix cache
    ready_lines: ClassVar[tuple[str, ...]]  # the log line printed once the server serves
    log_parser: ClassVar[LineParser]  # which of metrics/vllm_log, metrics/sglang_log applies
    stats_interval: ClassVar[StatsInterval]  # how often the parsed stats lines are printed
    failure_causes: ClassVar[tuple[Cause, ...]] = CAUSES
    doctor: ClassVar[DoctorFacts]
    speculative_methods: ClassVar[tuple[SpeculativeMethod, ...]] = SPECULATIVE_METHODS
    # other names people write for a method on this engine -> orch's canonical name
    method_aliases: ClassVar[Mapping[str, str]] = {}
    flags: ClassVar[FlagTable]  # every flag of the real engine's CLI
    # flag orch emits -> the playbook field that sets it (named when extra_args repeats it)
    flag_fields: ClassVar[dict[str, str]] = {}
    # flags extra_args may never set, even in a run where orch does not emit them -> the field
    owned_flags: ClassVar[dict[str, str]] = {}
    refused_flags: ClassVar[dict[str, str]] = {}  # flag -> why orch cannot run with it
    num_tokens_hint: ClassVar[str] = "num_draft_tokens is the number of tokens drafted per step"

    # -- facts other modules read ----------------------------------------------------------
    def flag_value(self, args: Sequence[str], option: str) -> str | None:
        """The value this engine reads for ``option`` in ``args`` (abbreviations included)."""
        return self.flags.value(args, option)

    def run_flag(self, run: RunSpec, option: str) -> str | None:
        """``flag_value`` over the run's ``extra_args`` (the only place a user sets flags)."""
        return self.flag_value([str(a) for a in run.extra_args], option)

    @abstractmethod
    def spec_delta(self, before: Scrape, after: Scrape) -> SpecDelta:
        """Speculative decoding over a window, from the engine's own Prometheus series."""

    def classify_failure(self, log_lines: Sequence[str]) -> str | None:
        """Why the engine died during start-up (a ``failures`` cause name), from its last lines."""
        return classify(log_lines, self.failure_causes)

    @staticmethod
    def describe_failure(cause: str | None) -> tuple[str, str | None]:
        return describe(cause)

    def stats_interval_in_effect(self, *, env: Mapping[str, str], argv: Sequence[str]) -> str:
        """The stats interval the run's server uses (env or argv), else the engine's default."""
        flag = (
            self.flag_value(argv, self.stats_interval.setting)
            if (self.stats_interval.source == "flag")
            else None
        )
        return self.stats_interval.in_effect(env=env, flag_value=flag)

    # -- the launch facts ------------------------------------------------------------------
    def port(self, run: RunSpec) -> int:
        return run.port or self.default_port

    def served_name(self, run: RunSpec) -> str:
        return run.served_name or run.model

    def api_key(self, run: RunSpec) -> str | None:
        """The ``--api-key`` the run gives its server (both engines guard ``/v1/*`` with it)."""
        return self.run_flag(run, "--api-key")

    def gpus_needed(self, run: RunSpec) -> int:
        """GPUs the server uses: the product of its parallel sizes (``parallel.py``)."""
        return self.parallelism(run).gpus

    # -- parallelism: read from the argv the server gets -----------------------------------
    def parallelism(self, run: RunSpec) -> Parallelism:
        """The sizes the server runs with: ``tensor_parallel`` (extra_args may not repeat it),
        pipeline and data parallel from ``extra_args`` as the engine reads them, and the
        engine's own expert-parallel and data-within-tensor rules."""
        tensor = int(run.tensor_parallel or 1)
        data = self.size_flag(run, "--data-parallel-size")
        return Parallelism(
            tensor=tensor,
            pipeline=self.size_flag(run, "--pipeline-parallel-size"),
            data=data,
            expert=self.expert_size(run, tensor=tensor, data=data),
            data_within_tensor=self.data_within_tensor(run),
        )

    def expert_size(self, run: RunSpec, *, tensor: int, data: int) -> int:
        """The expert-parallel size (1: none); it never adds GPUs."""
        return 1

    def data_within_tensor(self, run: RunSpec) -> bool:
        """Whether the data-parallel ranks share the tensor-parallel GPUs."""
        return False

    def size_flag(self, run: RunSpec, option: str) -> int:
        """A parallel size ``extra_args`` sets (1 when it does not); a value the engine would
        refuse, or read as no GPU, is a SpecError at its item."""
        args = [str(a) for a in run.extra_args]
        flag = self.flags.get(option)
        last = None
        for use in self.flag_uses(args):
            if flag is not None and use.flag == flag:
                last = use
        if last is None:
            return 1
        given = values_of(args, last)
        text = given[0] if given else ""
        size = int(text) if text.strip().isdigit() else 0
        if size < 1:
            self.fail(
                run,
                f"extra_args sets {self._shown(last, option)} to {text!r}: a parallel size is "
                "a whole number of at least 1",
                hint=f"give {last.written} a positive integer, e.g. {last.written} 2",
                field=("extra_args", last.index),
            )
        return size

    # -- the prefix cache between load points ------------------------------------------------
    def cache_reset(self, run: RunSpec, env: Mapping[str, str] | None = None) -> CacheReset | None:
        """How to reset this run's server's prefix cache, None when its server has no way.

        ``env`` is the environment the server runs with (``self.env(run, host)``), so that a
        setting on the host counts too; without it, the run's own ``env``.
        """
        return None if self.cache_reset_note(run, env) else self.cache_reset_request

    def cache_reset_note(self, run: RunSpec, env: Mapping[str, str] | None = None) -> str | None:
        """Why ``cache_reset`` is None, in a sentence for the run's warnings; None when it is not."""
        if self.cache_reset_request is None:
            return (
                "prefix cache not reset between load points: "
                f"{self.display_name} has no endpoint for it"
            )
        return None

    def argv(self, run: RunSpec, *, port: int | None = None) -> list[str]:
        """The exact argv: the engine's own flags, the speculative ones, then ``extra_args``."""
        self.validate(run)
        return [
            *self.base_argv(run, port=self.port(run) if port is None else port),
            *self.speculative_argv(run),
            *[str(a) for a in run.extra_args],
        ]

    @abstractmethod
    def base_argv(self, run: RunSpec, *, port: int) -> list[str]: ...

    @abstractmethod
    def speculative_argv(self, run: RunSpec) -> list[str]: ...

    def engine_env(self, run: RunSpec) -> dict[str, str]:
        """Variables the engine object itself adds (none unless an engine needs one)."""
        return {}

    def env(
        self,
        run: RunSpec,
        host: HostConfig | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Host env, then the run's (it wins), ``${VAR}`` expanded from the controller's env."""
        given = dict(environ) if environ is not None else None
        merged: dict[str, str] = dict(self.engine_env(run))
        if host is not None:
            merged.update(host.resolved_env(given))
        merged.update(run.resolved_env(given))  # errors point at the playbook line
        return merged

    def secrets(
        self,
        run: RunSpec,
        host: HostConfig | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> Secrets:
        """Every value to show as ``***``: expanded ``${VAR}``s, secret-named keys' values,
        what secret flags (--api-key, --hf-token, abbreviated or not) are given; and where."""
        given = dict(environ) if environ is not None else None
        raw_env = {**(host.env if host is not None else {}), **run.env}
        found = secret_values(dict(run.env), environ=given)
        if host is not None:
            found |= host.secret_values(given)
        args = [str(a) for a in run.extra_args]
        flagged = [
            v
            for use in self.flag_uses(args)
            if self._is_secret_use(use)
            for v in values_of(args, use)
        ]
        return Secrets(found, standalone=flagged, env_keys=secret_env_keys(raw_env))

    def masked_env(self, env: Mapping[str, str], secrets: Iterable[str]) -> dict[str, str]:
        """A secret-looking key's value, or one that held a ``${VAR}``, is ``***`` as a whole."""
        found = Secrets.of(secrets)
        in_text = Secrets(found)  # positions are known here: no whole-item matching
        return {
            k: ("***" if v and (is_secret_key(k) or k in found.env_keys) else mask(v, in_text))
            for k, v in env.items()
        }

    def masked_argv(self, argv: Sequence[str], secrets: Iterable[str]) -> list[str]:
        """The value(s) of a secret flag become ``***`` whatever they are; other items only lose
        the long secrets they contain (``mask``), so ``--port 8001`` survives a secret "1"."""
        in_text = Secrets(secrets)  # positions are known here: no whole-item matching
        out = [mask(str(item), in_text) for item in argv]
        for use in self.flag_uses([str(a) for a in argv]):
            if not self._is_secret_use(use):
                continue
            if use.inline is not None:
                out[use.index] = f"{use.written}=***"
            else:
                for i in range(len(values_of(argv, use))):
                    out[use.index + 1 + i] = "***"
        return out

    def flag_uses(self, args: Sequence[str]) -> list[FlagUse]:
        return self.flags.uses(args)

    def _is_secret_use(self, use: FlagUse) -> bool:
        """A secret flag, or an ambiguous abbreviation that may be one (validation refuses it,
        but what is printed must not show its value either)."""
        return any(flag.name in SECRET_FLAGS for flag in use.candidates)

    # -- validation ------------------------------------------------------------------------
    def validate(self, run: RunSpec) -> None:
        """Refuse, before any host is touched, a run this engine cannot start as asked."""
        spec = run.speculative
        if not isinstance(run.tensor_parallel, int) or run.tensor_parallel < 1:
            self.fail(
                run,
                f"tensor_parallel must be a positive integer, got {run.tensor_parallel}",
                field=("tensor_parallel",),
            )
        if spec.method not in self.speculative_methods:
            self.fail(
                run,
                f"speculative method {spec.method!r} is not supported by {self.name} "
                f"(supported: {', '.join(self.speculative_methods)})",
                field=("speculative", "method"),
            )
        self.validate_speculative(run, spec)  # engine-specific messages first
        self.validate_common_speculative(run, spec)
        self.speculative_argv(run)  # refuses options that clash with typed fields
        self.validate_extra_args(run)
        self.parallelism(run)  # refuses a parallel size that is not a positive integer

    def validate_common_speculative(self, run: RunSpec, spec: SpeculativeSpec) -> None:
        method = spec.method
        if method == "none":
            for name, value in (
                ("draft_model", spec.draft_model),
                ("num_draft_tokens", spec.num_draft_tokens),
            ):
                if value is not None:
                    self.fail(
                        run,
                        f"speculative.{name} is set but speculative.method is 'none'",
                        hint=f"set a method ({self._methods_listed()}) or remove "
                        f"speculative.{name}",
                        field=("speculative", name),
                    )
            return
        tokens = spec.num_draft_tokens
        if tokens is None or tokens <= 0:
            self.fail(
                run,
                f"speculative.num_draft_tokens must be a positive integer for method "
                f"{method!r} on {self.name}, got {tokens}",
                hint=self.num_tokens_hint,
                field=("speculative", "num_draft_tokens"),
            )
        if method in NEEDS_DRAFT_MODEL and not spec.draft_model:
            self.fail(
                run,
                f"speculative method {method!r} needs speculative.draft_model "
                "(the drafter's model id or path)",
                field=("speculative", "method"),
            )
        if method == "ngram" and spec.draft_model:
            self.fail(
                run,
                "speculative method 'ngram' drafts from the prompt: remove speculative.draft_model",
                field=("speculative", "draft_model"),
            )
        self._validate_lookup(run, spec)

    def _methods_listed(self) -> str:
        return ", ".join(m for m in self.speculative_methods if m != "none")

    def _validate_lookup(self, run: RunSpec, spec: SpeculativeSpec) -> None:
        low, high = spec.prompt_lookup_min, spec.prompt_lookup_max
        if (low is not None or high is not None) and spec.method != "ngram":
            given = "prompt_lookup_min" if low is not None else "prompt_lookup_max"
            self.fail(
                run,
                f"prompt_lookup_min/max apply to method 'ngram', not {spec.method!r}",
                field=("speculative", given),
            )
        for label, value in (("prompt_lookup_min", low), ("prompt_lookup_max", high)):
            if value is not None and value < 1:
                self.fail(
                    run,
                    f"speculative.{label} must be at least 1, got {value}",
                    field=("speculative", label),
                )
        if low is not None and high is not None and low > high:
            self.fail(
                run,
                f"speculative.prompt_lookup_min ({low}) is larger than prompt_lookup_max ({high})",
                field=("speculative", "prompt_lookup_min"),
            )

    @abstractmethod
    def validate_speculative(self, run: RunSpec, spec: SpeculativeSpec) -> None: ...

    def validate_extra_args(self, run: RunSpec) -> None:
        args = [str(a) for a in run.extra_args]
        owned = self.owned(run)
        protected = {
            *owned,
            *self._flags(self.refused_flags),
            *self._flags(SECRET_FLAGS),
            self.flags["--host"],
        }
        for use in self.flag_uses(args):
            if use.flag is None and protected.intersection(use.candidates):
                self._refuse_ambiguous(run, use, protected)
            at: FieldPath = ("extra_args", use.index)
            flag = use.flag or Flag((use.written,))  # not in the table: compared as written
            if flag.name == "--host":
                self._check_host(run, use, args)
            elif flag.name in self.refused_flags:
                self.fail(
                    run,
                    f"extra_args has {self._shown(use, flag.name)}: "
                    f"{self.refused_flags[flag.name]}",
                    hint=f"remove {use.written} from extra_args",
                    field=at,
                )
            elif flag in owned:
                spelling, field = owned[flag]
                self.fail(
                    run,
                    f"extra_args sets {self._shown(use, spelling)}, which orch sets from {field}",
                    hint=f"set {field} in the run instead of passing {use.written} in extra_args",
                    field=at,
                )

    def _check_host(self, run: RunSpec, use: FlagUse, args: list[str]) -> None:
        given = values_of(args, use)
        value = given[0] if given else None
        if value != LOOPBACK:
            self.fail(
                run,
                f"extra_args sets {self._shown(use, '--host')} {value}: engines always "
                f"bind {LOOPBACK} (orch reaches them through the host's loopback)",
                hint="remove --host from extra_args; the benchmark client runs on the host",
                field=("extra_args", use.index),
            )

    @staticmethod
    def _shown(use: FlagUse, spelling: str) -> str:
        """``--por`` -> ``--por (read as --port)``: say what an abbreviation stands for."""
        return (
            use.written if use.exact or use.flag is None else f"{use.written} (read as {spelling})"
        )

    def owned(self, run: RunSpec) -> dict[Flag, tuple[str, str]]:
        """Flags extra_args may not set in this run -> (orch's spelling, the playbook field)."""
        owned: dict[Flag, tuple[str, str]] = {}
        for use in self.flag_uses(
            self.base_argv(run, port=self.port(run)) + self.speculative_argv(run)
        ):
            if use.flag is not None:
                flag = use.flag
            elif use.written.startswith("--"):
                flag = Flag((use.written,))  # an option orch passes that the table does not know
            else:
                continue  # python's -m
            owned.setdefault(
                flag, (use.written, self.flag_fields.get(use.written, "the run's typed fields"))
            )
        for spelling, field in self.owned_flags.items():
            owned.setdefault(self.flags[spelling], (spelling, field))
        owned.pop(self.flags["--host"], None)  # checked by its value instead
        return owned

    def _flags(self, names: Iterable[str]) -> set[Flag]:
        return {flag for flag in map(self.flags.get, names) if flag is not None}

    def _refuse_ambiguous(self, run: RunSpec, use: FlagUse, protected: set[Flag]) -> None:
        """An abbreviation of several flags, one of which orch sets or checks: argparse refuses
        it, as far as this table knows; a real engine whose flags differ may not."""
        mine = [flag.name for flag in use.candidates if flag in protected]
        others = [flag.name for flag in use.candidates if flag not in protected]
        listed = mine + (others if len(others) <= 3 else [f"{len(others)} other flags"])
        self.fail(
            run,
            f"extra_args has {use.written}, an abbreviation of {', '.join(listed)}: "
            f"orch cannot tell which one {self.name} will read",
            hint=f"write the flag in full ({' or '.join(mine)} cannot be abbreviated)",
            field=("extra_args", use.index),
        )

    def fail(
        self, run: RunSpec, message: str, *, field: FieldPath, hint: str | None = None
    ) -> NoReturn:
        """Refuse ``run``; ``field`` is the setting at fault (the planner shows its line)."""
        raise SpecError(message, run=run.name, hint=hint, field=field)

    def merge_options(
        self,
        run: RunSpec,
        base: dict[str, Any],
        options: Mapping[str, Any],
        *,
        reserved_from: Mapping[str, str],
    ) -> dict[str, Any]:
        """``base`` plus the user's method-specific ``options``, refusing ones orch sets itself."""
        merged = dict(base)
        for key, value in options.items():
            if key in merged or key in reserved_from:
                field = reserved_from.get(key, "the typed speculative fields")
                self.fail(
                    run,
                    f"speculative.options.{key} is set by orch from {field}",
                    hint=f"set {field} instead of options.{key}",
                    field=("speculative", "options", key),
                )
            merged[key] = value
        return merged
