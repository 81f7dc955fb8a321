"""The resolved, typed view of one host that the rest of orch works with.

`inventory.py` builds these from hosts.yaml (defaults < groups < host); transport and agent only
ever see a `HostConfig`. Fields the user left unset stay ``None`` so that ``~/.ssh/config`` can
supply them, exactly as OpenSSH would. A Slurm cluster's resolved view, `ClusterConfig`, lives
here too (``cluster.py`` holds its file model): a cluster is a `HostConfig` (``as_host``) that
carries its cluster, so the two types refer to each other and share one module.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
import string
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from orchestrator.config.yamlload import Mark
from orchestrator.errors import ConfigError

DEFAULT_WORKDIR = "~/.cache/orch"
DEFAULT_PYTHON = "python3"
CPU_GPUS = "none"  # the canonical `gpus:` of a CPU host, as docs and manifests write it

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
    """What the user declared: ``2 x RTX A6000`` -> count=2, model="RTX A6000".

    ``count`` 0 is a CPU host (``gpus: none``): its engine runs on the CPU, so nothing of the
    GPU machinery (driver, GPU checks, ``CUDA_VISIBLE_DEVICES``, GPU memory waits) applies.
    """

    count: int
    model: str | None = None
    bandwidth_gb_s: float | None = None  # per GPU, overriding the roofline's table

    @classmethod
    def none(cls) -> GpuSpec:
        """A CPU host's declaration (``gpus: none``)."""
        return cls(0)

    @property
    def cpu_only(self) -> bool:
        return self.count == 0

    def __str__(self) -> str:
        if self.cpu_only:
            return CPU_GPUS
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
    # the kind of place, the key of its backend (``backends/base.py: REGISTRY``): "ssh" for a
    # host, "slurm" for a cluster's entry (``ClusterConfig.as_host``)
    backend: str = "ssh"
    # a Slurm cluster's runs: reached through its login node, each run in an allocation of its
    # own (``ClusterConfig.as_host``); None for a host. Read by the Slurm backend alone
    cluster: ClusterConfig | None = field(default=None, compare=False, repr=False)

    @property
    def cpu_only(self) -> bool:
        """Declared ``gpus: none``: the engine runs on the CPU (one server at a time)."""
        return self.gpus is not None and self.gpus.cpu_only

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


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    login: HostConfig  # the login node as a host; its workdir is the cluster's workdir
    partition: str
    account: str | None = None
    qos: str | None = None
    gres: str | None = None  # the GPU gres type ("a6000"); None asks for plain gpu:N
    gpus_per_node: int = 1
    time_limit: str | None = None  # a Slurm time ("02:00:00"); None: the partition's default
    sbatch_options: tuple[str, ...] = ()
    python: str = DEFAULT_PYTHON  # the engine's Python on the compute nodes
    workdir: str = DEFAULT_WORKDIR  # shared by login and compute nodes when shared_fs
    shared_fs: bool = True
    env: dict[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    source: str | None = None  # "hosts.yaml:12" where the cluster was declared, for messages
    env_marks: dict[str, Mark] = field(default_factory=dict, compare=False, repr=False)

    @property
    def gres_request(self) -> str:
        """The ``--gres`` value for one node: ``gpu:a6000:2``, or ``gpu:2`` without a type."""
        kind = f"gpu:{self.gres}" if self.gres else "gpu"
        return f"{kind}:{self.gpus_per_node}"

    def as_host(self) -> HostConfig:
        """Where a playbook's runs on this cluster go: the login node's connection, with the
        compute nodes' Python and the engines' environment (each run then asks for an
        allocation of its own; ``backends/clusterrun.py``)."""
        return replace(
            self.login,
            python=self.python,
            workdir=self.workdir,
            env=dict(self.env),
            env_marks=self.env_marks,
            gpus=GpuSpec(self.gpus_per_node),  # the gres type is a site's name, not a model
            tags=self.tags,
            backend="slurm",
            cluster=self,
        )

    def resolved_env(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """Expand ``${VAR}`` from the controller's environment, as for hosts."""
        return expand_env(
            self.env,
            environ=environ,
            owner=f"cluster {self.name!r}",
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


# Where a ``_NAME_SEP`` match with a secret-looking name may be, in lowercased text: every such
# name (ASCII) holds one of these words (``_SECRET_KEY``'s, or a part of them), and each pattern
# goes on from its word to the name's end, the separator (``sep``) and the opening quote or
# ``[``. One pattern per word: each starts with a literal, which the regex engine looks for
# at C speed, where ``_NAME_SEP`` tries its look-behind and a name at every position (the five
# scan vLLM's request lines over ten times faster), and they find few places: most separators
# have no secret-looking name.
_SECRET_WORDS = ("token", "key", "pass", "secret", "credential")
_AFTER_WORD = r"""[a-z0-9_]*['"]?\s*(?P<sep>[:=])\s*[\['"]"""
_SECRET_SEPS = tuple(re.compile(word + _AFTER_WORD) for word in _SECRET_WORDS)
_SECRET_SEPS_ANY_CASE = tuple(re.compile(p.pattern, re.IGNORECASE) for p in _SECRET_SEPS)
_NAME_CHARS = string.ascii_letters + string.digits + "_"
_NAME_WINDOW = 256  # characters looked at before a separator for its name


def mask_lines(lines: Sequence[str], secrets: Iterable[str]) -> list[str]:
    """``[mask(line, secrets) for line in lines]`` for a batch of log lines, at a fraction of
    its cost: only the lines ``mask`` could change go through it. Which ones is found over the
    batch joined into one text, with a few C-speed searches instead of ``mask``'s regexes and
    sort per line: a log's ordinary lines cost next to nothing. The output is the same, line
    for line: each search finds a superset of what ``mask`` changes (see ``_maskable``)."""
    found = Secrets.of(secrets)
    out = list(lines)
    for i in _maskable(lines, found):
        out[i] = mask(lines[i], found)
    return out


def _maskable(lines: Sequence[str], found: Secrets) -> set[int]:
    """The indexes of the lines ``mask`` may change: those that hold a secret of
    ``MIN_TEXT_SECRET`` characters or more, a quoted value under a secret-looking name
    (``_secret_named``), or, when there are standalone secrets, that equal one or start with
    ``-`` (``--flag=<it>``). A search across two lines (the join's newline) only adds a line
    ``mask`` then leaves as it was."""
    text = "\n".join(lines)
    offsets: list[int] = []
    for secret in found:
        if len(secret) >= MIN_TEXT_SECRET:
            at = text.find(secret)
            while at >= 0:
                offsets.append(at)
                at = text.find(secret, at + 1)
    offsets.extend(_secret_named(text))
    marked: set[int] = set()
    if found.standalone:
        if not found.standalone.isdisjoint(lines):
            marked.update(i for i, line in enumerate(lines) if line in found.standalone)
        if text.startswith("-"):
            marked.add(0)
        at = text.find("\n-")
        while at >= 0:
            offsets.append(at + 1)
            at = text.find("\n-", at + 1)
    if offsets:
        ends = list(itertools.accumulate(len(line) + 1 for line in lines))  # just past each "\n"
        marked.update(bisect.bisect_right(ends, at) for at in offsets)
    return marked


def _secret_named(text: str) -> Iterator[int]:
    """Where ``_hide_named`` may hide a value in ``text``: a separator whose name (the word
    before it, then an optional quote and spaces) is secret-looking, followed by a quote, or by
    a ``[`` whose list holds a quote before its ``]`` (``'stop_token_ids': []`` stays as is).
    A name that may begin before the window looked at counts as secret-looking."""
    low = text.lower()  # the same positions unless a character lowercases to several
    if len(low) == len(text):  # each pattern from its word's first place (str.find is faster)
        words = zip(_SECRET_WORDS, _SECRET_SEPS, strict=True)
        scans = [p.finditer(low, first) for w, p in words if (first := low.find(w)) >= 0]
    else:
        scans = [p.finditer(text) for p in _SECRET_SEPS_ANY_CASE]
    seen: set[int] = set()  # "api_key_token": two words, one separator
    for hit in itertools.chain.from_iterable(scans):
        at = hit.start("sep")
        if at not in seen:
            seen.add(at)
            if _may_hide(text, at, hit.end()):
                yield at


def _may_hide(text: str, at: int, value: int) -> bool:
    """Whether ``_hide_named`` may change the value at ``value`` (just past its opener) after
    the separator at ``at``: a quoted string always, a list when it holds a quote before its
    ``]``; and only under a secret-looking name."""
    if text[value - 1] == "[":
        close = text.find("]", value)
        if close < 0:
            return False  # never closed: _hide_named leaves it
        inside = text[value:close]
        if "'" not in inside and '"' not in inside:
            return False
    head = text[max(0, at - _NAME_WINDOW) : at].rstrip()
    if head.endswith(("'", '"')):
        head = head[:-1]
    word = head[len(head.rstrip(_NAME_CHARS)) :]
    if len(word) == len(head) and at > _NAME_WINDOW:
        return True  # the name may begin before the window: taken as secret-looking
    name = word.lstrip(string.digits)
    return bool(name) and _SECRET_KEY.search(name) is not None


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
