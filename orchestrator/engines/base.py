"""What every engine adapter offers: a validated run spec in, the exact launch facts out.

An adapter is pure: no host is touched. It turns a typed ``RunSpec`` into the argv the real
engine accepts, the environment it runs with, and where to ask it whether it is ready, so the
dry run can print exactly what would be started and the launch path starts exactly that.

``extra_args`` are read the way the engine's own parser will read them (``flags.py``: argparse
takes any unique prefix of a flag for that flag), then checked. Flags orch sets from typed
playbook fields may not be repeated there: argparse keeps the last value, so a repeat would
silently override the field (and ``--port`` or ``--host`` would move the server to where orch
never looks). Such repeats, abbreviated or not, are refused up front, as are ambiguous
abbreviations that might stand for one of them.

Secrets are masked by position (``masked_argv``, ``masked_env``): the value after a secret
flag, the whole value of a secret env key or of one holding a ``${VAR}``, whatever its length.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from orchestrator.config.hostconfig import (
    HostConfig,
    Secrets,
    expand_env,
    is_secret_key,
    mask,
    secret_env_keys,
    secret_values,
)
from orchestrator.engines.flags import Flag, FlagTable, FlagUse, values_of
from orchestrator.errors import SpecError

LOOPBACK = "127.0.0.1"
SPECULATIVE_METHODS = ("none", "dflash", "mtp", "eagle", "eagle3", "ngram")
NEEDS_DRAFT_MODEL = frozenset({"dflash", "eagle", "eagle3"})
SECRET_FLAGS = frozenset({"--api-key", "--hf-token"})  # their values are masked when shown


def compact_json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


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
    flags: ClassVar[FlagTable]  # every flag of the real engine's CLI
    # flag orch emits -> the playbook field that sets it (named when extra_args repeats it)
    flag_fields: ClassVar[dict[str, str]] = {}
    # flags extra_args may never set, even in a run where orch does not emit them -> the field
    owned_flags: ClassVar[dict[str, str]] = {}
    refused_flags: ClassVar[dict[str, str]] = {}  # flag -> why orch cannot run with it

    # -- the launch facts ------------------------------------------------------------------
    def port(self, run: Any) -> int:
        return run.port or self.default_port

    def served_name(self, run: Any) -> str:
        return run.served_name or run.model

    def api_key(self, run: Any) -> str | None:
        """The ``--api-key`` the run gives its server (both engines guard ``/v1/*`` with it)."""
        args = [str(a) for a in run.extra_args or []]
        given = [values_of(args, use) for use in self.flag_uses(args)
                 if use.flag is not None and use.flag.name == "--api-key"]
        return given[-1][0] if given and given[-1] else None  # argparse: the last one wins

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
                environ: Mapping[str, str] | None = None) -> Secrets:
        """Every value to show as ``***``: expanded ``${VAR}``s, secret-named keys' values,
        what secret flags (--api-key, --hf-token, abbreviated or not) are given; and where."""
        environ = dict(environ) if environ is not None else None
        raw_env = {**(host.env if host is not None else {}), **dict(run.env or {})}
        found = secret_values(dict(run.env or {}), environ=environ)
        if host is not None:
            found |= host.secret_values(environ)
        args = [str(a) for a in run.extra_args or []]
        flagged = [v for use in self.flag_uses(args) if self._is_secret_use(use)
                   for v in values_of(args, use)]
        return Secrets(found, standalone=flagged, env_keys=secret_env_keys(raw_env))

    def masked_env(self, env: Mapping[str, str], secrets: Iterable[str]) -> dict[str, str]:
        """A secret-looking key's value, or one that held a ``${VAR}``, is ``***`` as a whole."""
        found = Secrets.of(secrets)
        in_text = Secrets(found)  # positions are known here: no whole-item matching
        return {k: ("***" if v and (is_secret_key(k) or k in found.env_keys) else mask(v, in_text))
                for k, v in env.items()}

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
        owned = self.owned(run)
        protected = {*owned, *self._flags(self.refused_flags), *self._flags(SECRET_FLAGS),
                     self.flags["--host"]}
        for use in self.flag_uses(args):
            if use.flag is None and protected.intersection(use.candidates):
                self._refuse_ambiguous(run, use, protected)
            at = f"extra_args.{use.index}"
            flag = use.flag or Flag((use.written,))  # not in the table: compared as written
            if flag.name == "--host":
                self._check_host(run, use, args)
            elif flag.name in self.refused_flags:
                self.fail(run, f"extra_args has {self._shown(use, flag.name)}: "
                          f"{self.refused_flags[flag.name]}",
                          hint=f"remove {use.written} from extra_args", field=at)
            elif flag in owned:
                spelling, field = owned[flag]
                self.fail(run, f"extra_args sets {self._shown(use, spelling)}, which orch sets "
                          f"from {field}",
                          hint=f"set {field} in the run instead of passing {use.written} in "
                          "extra_args", field=at)

    def _check_host(self, run: Any, use: FlagUse, args: list[str]) -> None:
        value = (values_of(args, use) or [None])[0]
        if value != LOOPBACK:
            self.fail(run, f"extra_args sets {self._shown(use, '--host')} {value}: engines always "
                      f"bind {LOOPBACK} (orch reaches them through the host's loopback)",
                      hint="remove --host from extra_args; the benchmark client runs on the host",
                      field=f"extra_args.{use.index}")

    @staticmethod
    def _shown(use: FlagUse, spelling: str) -> str:
        """``--por`` -> ``--por (read as --port)``: say what an abbreviation stands for."""
        return use.written if use.exact or use.flag is None else f"{use.written} (read as {spelling})"

    def owned(self, run: Any) -> dict[Flag, tuple[str, str]]:
        """Flags extra_args may not set in this run -> (orch's spelling, the playbook field)."""
        owned: dict[Flag, tuple[str, str]] = {}
        for use in self.flag_uses(self.base_argv(run, port=self.port(run)) + self.speculative_argv(run)):
            if use.flag is not None:
                flag = use.flag
            elif use.written.startswith("--"):
                flag = Flag((use.written,))  # an option orch passes that the table does not know
            else:
                continue  # python's -m
            owned.setdefault(flag, (use.written, self.flag_fields.get(use.written,
                                                                      "the run's typed fields")))
        for spelling, field in self.owned_flags.items():
            owned.setdefault(self.flags[spelling], (spelling, field))
        owned.pop(self.flags["--host"], None)  # checked by its value instead
        return owned

    def _flags(self, names: Iterable[str]) -> set[Flag]:
        return {flag for flag in map(self.flags.get, names) if flag is not None}

    def _refuse_ambiguous(self, run: Any, use: FlagUse, protected: set[Flag]) -> None:
        """An abbreviation of several flags, one of which orch sets or checks: argparse refuses
        it, as far as this table knows; a real engine whose flags differ may not."""
        mine = [flag.name for flag in use.candidates if flag in protected]
        others = [flag.name for flag in use.candidates if flag not in protected]
        listed = mine + (others if len(others) <= 3 else [f"{len(others)} other flags"])
        self.fail(run, f"extra_args has {use.written}, an abbreviation of {', '.join(listed)}: "
                  f"orch cannot tell which one {self.name} will read",
                  hint=f"write the flag in full ({' or '.join(mine)} cannot be abbreviated)",
                  field=f"extra_args.{use.index}")

    def fail(self, run: Any, message: str, *, hint: str | None = None,
             field: str | None = None) -> None:
        raise SpecError(message, run=run.name, hint=hint, field=field)

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
