"""The directory tree and environment a simulated host's commands run in.

Embedded hosts (and the OpenSSH test hosts) have no GPU and no engine: their commands must find
the simulator and a fake ``nvidia-smi`` on their own PATH, never on the user's. The simulator
package (``orchestrator.sim.sandbox``) knows how to lay that out; this module is the one place
the transport asks for it, so the embedded server and the sshd fixture build hosts the same way.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path
from typing import Protocol

from orchestrator.sim.sandbox import prepare_sandbox

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


class Sandbox(Protocol):
    """What the transport needs from ``orchestrator.sim.sandbox.Sandbox``."""

    @property
    def home(self) -> Path: ...

    def env(self) -> dict[str, str]: ...


def prepare_host_sandbox(root: Path, *, python: str) -> Sandbox:
    """Populate ``root`` (idempotent: an agent pushed there once is reused next run)."""
    return prepare_sandbox(Path(root), python=python)


def session_env(sandbox: Sandbox) -> dict[str, str]:
    """The environment of a command on a simulated host: clean, like a fresh SSH login.

    Nothing leaks in from the controller's own environment (its virtualenv, its HF_TOKEN ...):
    a test that passes here must also pass against a real host.
    """
    user = _user()
    env = {
        "PATH": SYSTEM_PATH,
        "HOME": str(sandbox.home),
        "USER": user,
        "LOGNAME": user,
        "SHELL": "/bin/sh",
        "LANG": "C.UTF-8",
    }
    env.update(sandbox.env())
    env["HOME"] = str(sandbox.home)
    return env


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
