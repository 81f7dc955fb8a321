"""The resolved, typed view of one host that the rest of orch works with.

`inventory.py` builds these from hosts.yaml (defaults < groups < host); transport and agent only
ever see a `HostConfig`. Fields the user left unset stay ``None`` so that ``~/.ssh/config`` can
supply them, exactly as OpenSSH would.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.config.yamlload import Mark
from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    from orchestrator.config.cluster import ClusterConfig

DEFAULT_WORKDIR = "~/.cache/orch"
DEFAULT_PYTHON = "python3"

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# A secret-looking env key: TOKEN, KEY, PASS... as a whole word part (HF_TOKEN, OPENAI_API_KEY,
# DB_PASS) or SECRET / PASSWORD anywhere; not TOKENIZERS_PARALLELISM, MAX_TOKENS, KEYBOARD.
_SECRET_KEY = re.compile(
    r"(?:^|_)(?:TOKEN|KEY|APIKEY|PASS|PASSPHRASE|CREDENTIALS?)(?:_|$)|SECRET|PASSWORD|PASSWD",
    re.IGNORECASE,
)
MIN_TEXT_SECRET = 8  # shorter secrets are masked only where they stand whole (see ``mask``)


@dataclass(frozen=True)
class GpuSpec:
    """What the user declared: ``2 x RTX A6000`` -> count=2, model="RTX A6000"."""

    count: int
    model: str | None = None

    def __str__(self) -> str:
        return f"{self.count} x {self.model}" if self.model else str(self.count)


@dataclass(frozen=True)
class HostConfig:
    name: str
    address: str | None = None
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    proxy_jump: str | None = None
    python: str = DEFAULT_PYTHON
    workdir: str = DEFAULT_WORKDIR
    env: dict[str, str] = field(default_factory=dict)
    gpus: GpuSpec | None = None
    tags: tuple[str, ...] = ()
    transport: str = "ssh"
    connect_timeout: float | None = None  # None: the connection pool's default applies
    agent_timeout_s: float | None = None  # None: each agent call's own default deadline
    source: str | None = None  # "hosts.yaml:12" where the host was declared, for messages
    # where each env value was written (defaults, a group or the host), for ${VAR} errors
    env_marks: dict[str, Mark] = field(default_factory=dict, compare=False, repr=False)
    # a Slurm cluster's runs: reached through its login node, each run in an allocation of its
    # own (``ClusterConfig.as_host``); None for a host
    cluster: ClusterConfig | None = field(default=None, compare=False, repr=False)

    @property
    def target(self) -> str:
        """What to hand to SSH: the address, or the name itself (an ~/.ssh/config alias)."""
        return self.address or self.name

    def resolved_env(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """Expand ``${VAR}`` from the controller's environment; secrets never sit in the file."""
        return expand_env(
            self.env,
            environ=environ,
            owner=f"host {self.name!r}",
            source=self.source,
            marks=self.env_marks,
        )

    def secret_values(self, environ: dict[str, str] | None = None) -> set[str]:
        return secret_values(self.env, environ=environ)


def expand_env(
    env: dict[str, str],
    *,
    environ: dict[str, str] | None = None,
    owner: str,
    source: str | None = None,
    marks: Mapping[str, Mark] | None = None,
) -> dict[str, str]:
    """``marks`` (where each value was written) make an unset variable's error exact."""
    environ = dict(os.environ) if environ is None else environ
    out: dict[str, str] = {}
    for key, value in env.items():

        def sub(match: re.Match[str], key: str = key) -> str:
            var = match.group(1)
            if var not in environ:
                message = (
                    f"env {key} of {owner} references ${{{var}}}, which is not set in this shell"
                )
                hint = f"export {var}=... before running orch (the value is never written to disk)"
                mark = (marks or {}).get(key)
                if mark is not None:
                    raise mark.error(message, hint=hint)
                raise ConfigError(message, file=source, path=f"env.{key}", hint=hint)
            return environ[var]

        out[key] = _VAR.sub(sub, value)
    return out


def secret_values(env: dict[str, str], *, environ: dict[str, str] | None = None) -> set[str]:
    """Values to mask: anything expanded from ``${VAR}`` and values of secret-looking keys."""
    environ = dict(os.environ) if environ is None else environ
    found: set[str] = set()
    for key, value in env.items():
        for var in _VAR.findall(value):
            if environ.get(var):
                found.add(environ[var])
        if _SECRET_KEY.search(key):
            expanded = _VAR.sub(lambda m: environ.get(m.group(1), ""), value)
            if expanded:
                found.add(expanded)
    return found


def secret_env_keys(env: Mapping[str, str]) -> set[str]:
    """Keys whose whole value is shown as ``***``: secret-looking ones and those with a ``${VAR}``."""
    return {key for key, value in env.items() if _SECRET_KEY.search(key) or _VAR.search(value)}


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


class Secrets(frozenset[str]):
    """Every secret value of a run (a frozenset of them, whatever their length), and where each
    one sits, so that it can be masked by position rather than by matching text.

    ``standalone``: values that are secrets wherever a whole item equals them (what followed
    ``--api-key``); ``env_keys``: env keys whose whole value is secret.
    """

    standalone: frozenset[str]
    env_keys: frozenset[str]

    def __new__(
        cls,
        values: Iterable[str] = (),
        *,
        standalone: Iterable[str] = (),
        env_keys: Iterable[str] = (),
    ) -> Secrets:
        alone = frozenset(v for v in standalone if v)
        self = super().__new__(cls, {v for v in values if v} | alone)
        self.standalone = alone
        self.env_keys = frozenset(env_keys)
        return self

    @classmethod
    def of(cls, secrets: Iterable[str]) -> Secrets:
        return secrets if isinstance(secrets, Secrets) else cls(secrets)


# A value printed under a secret-looking name: vLLM's ``'api_key': ['sk-..']``, SGLang's
# ``api_key='sk-..'``, JSON's ``"hf_token": "hf_.."``. Only quoted values: ``api_key=None`` stays.
# The name is matched from the start of its word only (leading digits, which cannot start a name,
# are kept aside), and the value is found by ``_hide_named`` with str.find: a regex that retries
# every position of a long word, or rescans an unclosed ``[`` from every ``k=[``, is quadratic.
_NAME_SEP = re.compile(
    r"""(?<![A-Za-z0-9_])(?P<digits>[0-9]*)(?P<name>[A-Za-z_][A-Za-z0-9_]*)"""
    r"""(?P<sep>['"]?\s*[:=]\s*)(?=[\['"])"""
)
_CLOSER = {"[": "]", "'": "'", '"': '"'}
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _hide_named(text: str) -> str:
    """Replace quoted values under secret-looking names with ``***`` (in linear time)."""
    out: list[str] = []
    done = 0  # text[:done] is settled (copied to out, or consumed by a value)
    unclosed: dict[str, int] = {}  # closing char -> a position after which it never occurs
    for match in _NAME_SEP.finditer(text):
        if match.start() < done:
            continue  # inside a value already taken whole
        opener = text[match.end()]
        closer = _CLOSER[opener]
        start = match.end() + 1
        if start >= unclosed.get(closer, len(text) + 1):
            continue
        end = text.find(closer, start)
        if end < 0:
            unclosed[closer] = start
            continue
        value = text[match.end() : end + 1]
        out.append(text[done : match.start()])
        if _SECRET_KEY.search(match["name"]):
            value = _QUOTED.sub(lambda q: q[0][0] + "***" + q[0][0], value)
        out.append(match["digits"] + match["name"] + match["sep"] + value)
        done = end + 1
    out.append(text[done:])
    return "".join(out)


def mask(text: str, secrets: Iterable[str]) -> str:
    """Hide secrets in free text: a log line, an error message, one argv item.

    - a text equal to a standalone secret (an ``--api-key`` value) is ``***``, and so is the
      value of ``--flag=<it>``;
    - a quoted value under a secret-looking name (``api_key='...'``) is ``***`` whatever it is;
    - elsewhere only secrets of ``MIN_TEXT_SECRET`` characters or more are replaced (longest
      first, so overlaps mask whole): a short one ("1", "false", "8192", from a ``${VAR}``) would
      corrupt every number and word that happens to contain it. Short secrets are masked by
      position instead: whole env values, the item after a secret flag.
    """
    found = Secrets.of(secrets)
    if text in found.standalone:
        return "***"
    head, eq, value = text.partition("=")
    if eq and head.startswith("-") and value in found.standalone:
        return head + "=***"
    text = _hide_named(text)
    for secret in sorted(found, key=len, reverse=True):
        if len(secret) >= MIN_TEXT_SECRET:
            text = text.replace(secret, "***")
    return text


def mask_json(value: object, secrets: Iterable[str]) -> object:
    """``value`` (JSON-shaped: a record, a result, a manifest) with ``mask`` applied to every
    string inside it; keys are orch's own and are kept."""
    if isinstance(value, str):
        return mask(value, secrets)
    if isinstance(value, list | tuple):
        return [mask_json(v, secrets) for v in value]
    if isinstance(value, dict):
        return {k: mask_json(v, secrets) for k, v in value.items()}
    return value
