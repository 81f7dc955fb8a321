"""Fixtures for the simulator's own tests: one sandbox, and real simulated servers on free ports."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_helpers import FAST, SimProc

from orchestrator.sim.sandbox import Sandbox, prepare_sandbox


@pytest.fixture(scope="session")
def sim_box(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    return prepare_sandbox(tmp_path_factory.mktemp("simbox"), python=sys.executable)


@pytest.fixture
def start_sim(sim_box: Sandbox, tmp_path: Path) -> Iterator:
    started: list[SimProc] = []
    numbers = itertools.count()
    lock = threading.Lock()  # tests may start servers from several threads

    def start(argv: list[str], env: dict[str, str] | None = None) -> SimProc:
        with lock:
            log = tmp_path / f"server-{next(numbers)}.log"
        proc = SimProc(sim_box, argv, {**FAST, **(env or {})}, log)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.proc.poll() is None:
            os.killpg(proc.proc.pid, signal.SIGKILL)
            proc.proc.wait()
