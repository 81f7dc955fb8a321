"""``echo``: hand back exactly what arrived, so tests can prove no shell touched the values.

Besides the spec itself and the agent's argv, it can start one child process with extra argv
items and environment values (``child``), the same way ``launch`` starts an engine: the child
reports what it received, which proves those values also reach a process uninterpreted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List

from .protocol import AgentFailure, Emit
from .util import is_str_list, is_str_map

# The child prints its argv and the environment values it was asked about, as one JSON object.
_CHILD = (
    "import json, os, sys\n"
    "keys = json.loads(sys.argv[1])\n"
    "out = {'argv': sys.argv[2:], 'env': {k: os.environ.get(k) for k in keys}}\n"
    "sys.stdout.buffer.write(json.dumps(out).encode('ascii'))\n"
)


def run(spec: Dict[str, Any], emit: Emit) -> Dict[str, Any]:
    keys = spec.get("env_keys", [])
    if not is_str_list(keys):
        raise AgentFailure("bad_spec", "echo: 'env_keys' must be a list of strings")
    result: Dict[str, Any] = {
        "spec": spec,
        "argv": list(sys.argv),
        "env": {key: os.environ.get(key) for key in keys},
    }
    child = spec.get("child")
    if child is not None:
        result["child"] = _run_child(child)
    return result


def _run_child(child: Any) -> Dict[str, Any]:
    if not isinstance(child, dict):
        raise AgentFailure("bad_spec", "echo: 'child' must be an object with 'args' and 'env'")
    args = child.get("args", [])
    env_extra = child.get("env", {})
    if not is_str_list(args):
        raise AgentFailure("bad_spec", "echo: 'child.args' must be a list of strings")
    if not is_str_map(env_extra):
        raise AgentFailure("bad_spec", "echo: 'child.env' must map strings to strings")
    env = dict(os.environ)
    env.update(env_extra)
    keys: List[str] = sorted(env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(keys), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise AgentFailure(
            "child_failed",
            f"echo: child exited with status {proc.returncode}",
            {"stderr": proc.stderr.decode("utf-8", errors="replace")[-2000:]},
        )
    return json.loads(proc.stdout.decode("ascii"))
