"""The console off a terminal (`make demo | tee`, CI): phase lines, and while measuring a
progress line at most every 5 s per run."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.cli.display import Display, short_reason
from orchestrator.runner.progress import (
    LatestAcceptance,
    LiveThroughput,
    PhaseChanged,
    RequestsDone,
    RunAdded,
    RunPhase,
)


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
    display.on_event(RunAdded("a", run="vllm-dflash[concurrency=1]", host="sim-1", total=64))
    display.on_event(RunAdded("b", run="sglang-mtp", host="sim-2", total=None))
    with display:
        display.on_event(PhaseChanged("a", RunPhase.WARM_UP))
        clock.now += 6
        display.on_event(RequestsDone("a", done=0, failed=0))  # warm-up: no progress line
        display.on_event(LiveThroughput("a", 50.0))
        display.on_event(PhaseChanged("a", RunPhase.MEASURING))
        display.on_event(PhaseChanged("b", RunPhase.MEASURING))
        display.on_event(LiveThroughput("b", 80.0))  # at once: too early
        clock.now += 2
        display.on_event(LiveThroughput("a", 71.25))  # 2 s into measuring: too early
        display.on_event(RequestsDone("a", done=3, failed=0))
        clock.now += 3
        display.on_event(LatestAcceptance("a", 2.956))  # 5 s: a line
        display.on_event(RequestsDone("a", done=4, failed=0))  # right after: none
        display.on_event(RequestsDone("b", done=10, failed=1))  # the other run has its own clock
        clock.now += 4.9
        display.on_event(RequestsDone("a", done=9, failed=0))
        clock.now += 0.1
        display.on_event(RequestsDone("a", done=10, failed=0))
        display.on_event(PhaseChanged("a", RunPhase.STOPPING))
        clock.now += 10
        display.on_event(LiveThroughput("a", 1.0))  # no longer measuring
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
    display.on_event(RunAdded("a", run="r", host="h", total=4))
    display.on_event(PhaseChanged("a", RunPhase.MEASURING))
    clock.now += 30
    display.on_event(RequestsDone("a", done=2, failed=0))
    display.on_event(LiveThroughput("a", 10.0))
    assert buf.getvalue() == ""  # the (here not started) live table carries it instead
    table = display.table()
    assert [c.header for c in table.columns] == [
        "host",
        "run",
        "phase",
        "requests",
        "tok/s",
        "accept len",
    ]


def test_phase_lines_say_why_a_run_failed_and_name_a_collapse() -> None:
    display, buf, _clock = plain_display()
    display.on_event(RunAdded("a", run="r", host="h", total=4))
    display.on_event(RunAdded("b", run="s", host="h", total=4))
    display.on_event(PhaseChanged("a", RunPhase.LOADING))
    display.on_event(PhaseChanged("a", RunPhase.LOADING, reason="loading (health 503)"))
    display.on_event(PhaseChanged("a", RunPhase.LOADING, reason="loading (health 503)"))  # same
    display.on_event(PhaseChanged("a", RunPhase.FAILED, reason="x" * 70 + " [/]"))
    display.on_event(PhaseChanged("b", RunPhase.COLLAPSE))
    assert buf.getvalue().splitlines() == [
        "h r: loading model",
        "h r: loading (health 503)",
        "h r: failed: " + "x" * 60 + "…",  # a word longer than the room: cut, and marked
        "h s: done: COLLAPSE",
    ]
    assert [row.phase.under_way for row in display.rows.values()] == [False, False]


def test_a_queued_run_shows_its_jobs_queue_state() -> None:
    display, buf, _clock = plain_display()
    display.on_event(RunAdded("a", run="r", host="hpc", total=4))
    display.on_event(PhaseChanged("a", RunPhase.QUEUED, reason="submitting"))
    display.on_event(PhaseChanged("a", RunPhase.QUEUED, reason="job 12 PENDING (Priority)"))
    display.on_event(PhaseChanged("a", RunPhase.QUEUED, reason="job 12 PENDING (Resources)"))
    display.on_event(PhaseChanged("a", RunPhase.QUEUED))
    assert buf.getvalue().splitlines() == [
        "hpc r: queued: submitting",
        "hpc r: queued: job 12 PENDING (Priority)",
        "hpc r: queued: job 12 PENDING (Resources)",
        "hpc r: queued",
    ]


def test_a_failure_never_cuts_a_pid_short() -> None:
    """The newcomer's `pid 332` for 3322: a number in the reason is printed whole wherever
    the room runs out; prose after it is dropped instead, and the run's name (the row shows
    it) is not repeated."""
    display, buf, _clock = plain_display()
    for key, pid in (("a", 3322), ("b", 3322111)):
        display.on_event(RunAdded(key, run=f"r-{key}", host="h", total=4))
        display.on_event(
            PhaseChanged(
                key,
                RunPhase.FAILED,
                reason=f"sglang server of run 'r-{key}' port 38252 on 127.0.0.1 is already "
                f"in use by pid {pid} (user bench: /root/.pyenv/versions/3.11.9/bin/python3 -)",
            )
        )
    assert buf.getvalue().splitlines() == [
        "h r-a: failed: port 38252 on 127.0.0.1 is already in use by pid 3322 (user …",
        "h r-b: failed: port 38252 on 127.0.0.1 is already in use by pid 3322111 …",
    ]
    # wherever the limit falls, the pid is whole or absent, never cut
    reason = "port 38252 on 127.0.0.1 is already in use by pid 3322111 (python3 -)"
    for limit in range(1, len(reason) + 1):
        shown = short_reason(reason, limit)
        assert "3322111" in shown or "pid 3" not in shown, (limit, shown)
        assert "3825" not in shown or "38252" in shown, (limit, shown)


def test_the_gpus_newest_read_joins_the_progress_line_and_the_table() -> None:
    display, buf, clock = plain_display()
    display.on_event(RunAdded("a", run="plain", host="sim-1", total=8))
    with display:
        display.on_event(PhaseChanged("a", RunPhase.MEASURING))
        clock.now += 5
        display.on_event(LiveThroughput("a", 40.0, gpu_power_w=412.4, gpu_sm_mhz=1740))
    assert buf.getvalue().splitlines()[-1] == (
        "sim-1 plain: measuring: 0/8 requests, 40.0 tok/s, accept len -, GPUs 412 W 1740 MHz"
    )
    table = io.StringIO()
    Console(file=table, width=200).print(display.table())
    assert "GPUs" in table.getvalue() and "412 W 1740 MHz" in table.getvalue()
