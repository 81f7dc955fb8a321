"""The console off a terminal (`make demo | tee`, CI): phase lines, and while measuring a
progress line at most every 5 s per run."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.runner.display import Display


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def plain_display() -> tuple[Display, io.StringIO, Clock]:
    buf = io.StringIO()
    clock = Clock()
    console = Console(file=buf, force_terminal=False, width=200, highlight=False)
    display = Display(console, clock=clock)
    assert not display.live_enabled  # not a terminal: plain lines
    return display, buf, clock


def test_progress_lines_every_5_s_per_run_while_measuring() -> None:
    display, buf, clock = plain_display()
    display.add("a", run="vllm-dflash[concurrency=1]", host="sim-1", total=64)
    display.add("b", run="sglang-mtp", host="sim-2", total=None)
    with display:
        display.update("a", phase="warm-up")
        clock.now += 6
        display.update("a", done=0, tok_s=50.0)  # warm-up: no progress line
        display.update("a", phase="measuring")
        display.update("b", phase="measuring")
        clock.now += 2
        display.update("a", done=3, tok_s=71.25)  # 2 s into measuring: too early
        clock.now += 3
        display.update("a", acceptance=2.956)  # 5 s: a line
        display.update("a", done=4)  # right after: none
        display.update("b", done=10, failed=1, tok_s=80.0)  # the other run has its own clock
        clock.now += 4.9
        display.update("a", done=9)
        clock.now += 0.1
        display.update("a", done=10)
        display.update("a", phase="stopping")
        clock.now += 10
        display.update("a", tok_s=1.0)  # no longer measuring
    assert buf.getvalue().splitlines() == [
        "sim-1 vllm-dflash[concurrency=1]: warm-up",
        "sim-1 vllm-dflash[concurrency=1]: measuring",
        "sim-2 sglang-mtp: measuring",
        "sim-1 vllm-dflash[concurrency=1]: measuring: 3/64 requests, 71.2 tok/s, accept len 2.96",
        "sim-2 sglang-mtp: measuring: 10/? requests (1 failed), 80.0 tok/s, accept len -",
        "sim-1 vllm-dflash[concurrency=1]: measuring: 10/64 requests, 71.2 tok/s, accept len 2.96",
        "sim-1 vllm-dflash[concurrency=1]: stopping",
    ]


def test_live_display_prints_no_plain_lines() -> None:
    buf = io.StringIO()
    clock = Clock()
    display = Display(Console(file=buf, force_terminal=False, width=200), live=True, clock=clock)
    display.add("a", run="r", host="h", total=4)
    display.update("a", phase="measuring")
    clock.now += 30
    display.update("a", done=2, tok_s=10.0)
    assert buf.getvalue() == ""  # the (here not started) live table carries it instead
    table = display.table()
    assert [c.header for c in table.columns] == ["host", "run", "phase", "requests", "tok/s", "accept len"]
