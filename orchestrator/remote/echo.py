"""``echo``: hand back exactly what arrived, so tests can prove no shell touched the values.

Besides the spec's ``payload`` and the agent's argv, it can start one child process with extra argv
items and environment values (``child``), the same way ``launch`` starts an engine: the child
reports what it received, which proves those values also reach a process uninterpreted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List

from .protocol import AgentFailure, Emit, parse_spec
from .wire import EchoChild, EchoChildResult, EchoResult, EchoSpec, ErrorKind

# The child prints its argv and the environment values it was asked about, as one JSON object.
_CHILD = (
    "import json, os, sys\n"
    "keys = json.loads(sys.argv[1])\n"
    "out = {'argv': sys.argv[2:], 'env': {k: os.environ.get(k) for k in keys}}\n"
    "sys.stdout.buffer.write(json.dumps(out).encode('ascii'))\n"
)


def run(raw: Dict[str, Any], emit: Emit) -> EchoResult:
    spec = parse_spec(EchoSpec, raw)
    return EchoResult(
        payload=spec.payload,
        argv=list(sys.argv),
        env={key: os.environ.get(key) for key in spec.env_keys},
        child=_run_child(spec.child) if spec.child is not None else None,
    )


def _run_child(child: EchoChild) -> EchoChildResult:
    env = dict(os.environ)
    env.update(child.env)
    keys: List[str] = sorted(child.env)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(keys), *child.args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise AgentFailure(
            ErrorKind.CHILD_FAILED,
            f"echo: child exited with status {proc.returncode}",
            {"stderr": proc.stderr.decode("utf-8", errors="replace")[-2000:]},
        )
    return EchoChildResult.from_json(json.loads(proc.stdout.decode("ascii")))
