"""The directory tree and environment a simulated host's commands run in.

Embedded hosts (and the OpenSSH test hosts) have no GPU and no engine: their commands must find
the simulator and a fake ``nvidia-smi`` on their own PATH, never on the user's. ``sandbox.py``
knows how to lay that out; this module decides what a host fakes and the login environment it
gets, so the embedded server and the sshd fixture build hosts the same way.

A host fakes only what it lacks. Its engines are simulated when its ``python`` is orch's own
interpreter (an embedded host's default): any other interpreter is a real engine's venv, whose
``vllm`` the simulator's packages would shadow. Its GPUs are simulated only alongside the
simulated engines and never on a host declared ``gpus: none``: a real engine sees this
machine's own ``nvidia-smi`` (if any), a CPU host none.
"""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path

from orchestrator.sim.sandbox import Sandbox, prepare_sandbox

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def prepare_host_sandbox(root: Path, *, python: str, gpus: bool = True) -> Sandbox:
    """Populate ``root`` (idempotent: an agent pushed there once is reused next run).

    ``python`` is the host's interpreter; ``gpus`` False for a host declared ``gpus: none``."""
    simulated = simulates_engines(python)
    return prepare_sandbox(
        Path(root), python=python, engines=simulated, nvidia_smi=simulated and gpus
    )


def simulates_engines(python: str) -> bool:
    """Whether a host with this ``python`` gets the engine simulator: only orch's own
    interpreter has the simulator's dependencies, and any other one is a real engine's venv.

    Compared as written (``~`` expanded), not through symlinks: a venv's python links to the
    system one, which has neither orch's dependencies nor the venv's engine."""
    written = os.path.expanduser(python)
    if not os.path.isabs(written):
        return False
    return os.path.normpath(written) == os.path.normpath(sys.executable)


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
