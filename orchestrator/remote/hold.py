"""``hold``: the batch step of a Slurm job that serves one run.

Why the engine starts here and not from an ``srun`` step: a step's processes are ended with
the step (proctrack/cgroup kills the step's cgroup; linuxproc its process tree), so an engine
launched from a short ``srun`` call would die with the call. The job's batch step lives as long
as the allocation, so it is the one place the engine may live.

The job is submitted before the engine's launch spec exists (the run's node is probed and the
doctor looks again from it before the launch): ``hold`` waits for the controller to write that spec (``launch_spec``), reads
it like any spec (deleted once read: it may hold secrets), launches the engine exactly as
``launch`` does (supervisor, server.json, port lock, GPU check against the job's
``CUDA_VISIBLE_DEVICES``), prints ``launched`` with the launch's answer on its stdout (the job's
output file, which the controller reads), then waits for the engine to exit.

A SIGTERM (``scancel``, the job's time limit) stops the engine's process group before ``hold``
returns, so no engine outlives its allocation whatever the cluster's process tracking. With no
launch spec after ``wait_s`` (the controller died) ``hold`` ends and the job gives its GPUs back.

Once the engine has exited, ``hold`` stays until the controller cancels the job (or ``linger_s``
passes): the job's end would kill its steps, among them the controller's ``stop``, still
waiting for the GPUs to be released, and the ``tail`` reading the engine's last log lines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any, Dict, Optional

from .lifecycle import EXIT_JSON, SERVER_JSON, launch, read_exit, read_json, run_dir, stop_one
from .procs import group_members, same_process
from .protocol import Emit, parse_spec
from .wire import HoldLaunched, HoldResult, HoldSpec, LaunchSpec

POLL_S = 0.2
ENGINE_POLL_S = 0.5
STOP_TIMEOUT_S = 20.0  # within Slurm's default KillWait (30 s) before it sends SIGKILL


class _Signalled(Exception):
    pass


class _Term:
    """SIGTERM: raised at once, except while the engine is being launched (a supervisor just
    started, no server.json yet, would escape the stop): then noted, and raised right after."""

    def __init__(self) -> None:
        self.seen = False
        self.deferred = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.seen = True
        if not self.deferred:
            raise _Signalled

    def launching(self) -> None:
        self.deferred = True

    def launched(self) -> None:
        self.deferred = False
        if self.seen:
            raise _Signalled


def run(raw: Dict[str, Any], emit: Emit) -> HoldResult:
    spec = parse_spec(HoldSpec, raw)
    term = _Term()
    previous = signal.signal(signal.SIGTERM, term)
    directory: Optional[str] = None
    try:
        launch_raw = _wait_for_spec(spec)
        if launch_raw is None:
            return HoldResult(launched=False, reason="no launch spec")
        launch_spec = parse_spec(LaunchSpec, launch_raw)
        directory = run_dir(launch_spec.workdir, launch_spec.run_id)
        term.launching()
        try:
            launched = launch(launch_raw, emit)
        finally:
            term.launched()
        emit(HoldLaunched(launch=launched))
        _sync_output()
        while not os.path.exists(os.path.join(directory, EXIT_JSON)) and _engine_alive(directory):
            time.sleep(ENGINE_POLL_S)
        time.sleep(spec.linger_s)  # for the controller's last steps; its scancel ends this
        return HoldResult(launched=True, reason="engine exited", exit=read_exit(directory))
    except _Signalled:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop, however many signals come
        if directory is not None:
            _stop(directory)
        return HoldResult(
            launched=directory is not None,
            reason="signalled",
            exit=read_exit(directory) if directory else None,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)


def _sync_output() -> None:
    """Push the job's output file (our stdout's file, which fd 2 shares under Slurm) to the
    server now: the controller reads it from the login node, through a network filesystem."""
    with contextlib.suppress(OSError):
        os.fsync(2)


def _wait_for_spec(spec: HoldSpec) -> Optional[Dict[str, Any]]:
    """The launch spec once the controller has written it (whole: it is put atomically), read
    and deleted as any spec is; None when it did not come within ``wait_s``."""
    from .main import load_spec  # main imports the verbs' modules: import it only when run

    deadline = time.monotonic() + spec.wait_s
    while not os.path.exists(spec.launch_spec):
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_S)
    return load_spec(spec.launch_spec)


def _engine_alive(directory: str) -> bool:
    record = read_json(os.path.join(directory, SERVER_JSON))
    return record is not None and (same_process(record) or bool(group_members(record)))


def _stop(directory: str) -> None:
    record = read_json(os.path.join(directory, SERVER_JSON))
    if record is not None:
        stop_one(directory, record, timeout=STOP_TIMEOUT_S, gpu_timeout=0.0)
