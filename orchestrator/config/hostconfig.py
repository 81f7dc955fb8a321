"""The resolved, typed view of one host that the rest of orch works with.

`inventory.py` builds these from hosts.yaml (defaults < groups < host); transport and agent only
ever see a `HostConfig`. Fields the user left unset stay ``None`` so that ``~/.ssh/config`` can
supply them, exactly as OpenSSH would.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.config.yamlload import Mark
from orchestrator.errors import ConfigError

DEFAULT_WORKDIR = "~/.cache/orch"
DEFAULT_PYTHON = "python3"

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SECRET_KEY = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|_KEY$|^KEY$", re.IGNORECASE)


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
    connect_timeout: float = 15.0
    source: str | None = None  # "hosts.yaml:12" where the host was declared, for messages
    # where each env value was written (defaults, a group or the host), for ${VAR} errors
    env_marks: dict[str, Mark] = field(default_factory=dict, compare=False, repr=False)

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


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def mask(text: str, secrets: set[str]) -> str:
    """Replace every secret value in ``text`` by ``***`` (longest first, so overlaps mask whole)."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, "***")
    return text
