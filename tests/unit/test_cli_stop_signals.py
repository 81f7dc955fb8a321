"""`orch run`'s stop signals: the first cancels, later ones wait, a stuck clean-up is given up.

The end-to-end behaviour (real signals, real servers) is in
tests/integration/test_run_interrupt.py; these pin the bookkeeping with exact values.
"""

from __future__ import annotations

import io
import signal
import threading

import pytest
from rich.console import Console

from orchestrator.cli import run as cli_run
from orchestrator.cli.common import without_host
from orchestrator.cli.display import Display
from orchestrator.cli.run import STOP_GRACE_ENV, StopSignals, busy_hosts, stop_grace_s
from orchestrator.errors import OrchError
from orchestrator.runner.progress import PhaseChanged, RunAdded, RunPhase


def test_first_signal_cancels_later_ones_start_one_countdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    printed = io.StringIO()
    monkeypatch.setattr(cli_run, "err", Console(file=printed, width=200))
    gave_up: list[signal.Signals] = []
    called = threading.Event()

    def give_up(sig: signal.Signals) -> None:
        gave_up.append(sig)
        called.set()

    cancels: list[str] = []
    stop = StopSignals(grace_s=0.2, give_up=give_up)
    stop.on_signal(signal.SIGTERM, lambda: cancels.append("cancel"))
    assert (cancels, stop.timer, printed.getvalue()) == (["cancel"], None, "")

    stop.on_signal(signal.SIGINT, lambda: cancels.append("cancel"))
    timer = stop.timer
    stop.on_signal(signal.SIGINT, lambda: cancels.append("cancel"))
    assert cancels == ["cancel"]  # the clean-up is never cancelled twice
    assert stop.timer is timer and timer is not None  # one countdown, from the second signal
    assert stop.received == [signal.SIGTERM, signal.SIGINT, signal.SIGINT]
    assert (
        printed.getvalue().splitlines()
        == ["SIGINT: stopping the servers this run started, please wait (giving up in 0 s)"] * 2
    )
    assert called.wait(5)
    assert gave_up == [signal.SIGTERM]  # the exit status follows the first signal


def test_a_clean_up_that_ends_cancels_the_countdown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_run, "err", Console(file=io.StringIO()))
    gave_up: list[signal.Signals] = []
    stop = StopSignals(grace_s=0.2, give_up=gave_up.append)
    stop.on_signal(signal.SIGINT, lambda: None)
    stop.on_signal(signal.SIGINT, lambda: None)
    stop.cancel_timer()
    assert stop.timer is not None
    stop.timer.join(5)
    assert gave_up == []


@pytest.mark.parametrize(("raw", "grace"), [(None, 60.0), ("5", 5.0), ("0.5", 0.5), ("0", 0.0)])
def test_stop_grace(monkeypatch: pytest.MonkeyPatch, raw: str | None, grace: float) -> None:
    if raw is None:
        monkeypatch.delenv(STOP_GRACE_ENV, raising=False)
    else:
        monkeypatch.setenv(STOP_GRACE_ENV, raw)
    assert stop_grace_s() == grace


@pytest.mark.parametrize("raw", ["abc", "-1", "nan", ""])
def test_bad_stop_grace_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(STOP_GRACE_ENV, raw)
    with pytest.raises(OrchError) as caught:
        stop_grace_s()
    assert str(caught.value) == f"ORCH_STOP_GRACE_S={raw!r} is not a number of seconds"


def test_busy_hosts_are_those_with_a_run_under_way() -> None:
    display = Display(Console(file=io.StringIO()), live=False)
    for key, run, host, phase in [
        ("1", "a", "h1", RunPhase.DONE),
        ("2", "b", "h2", RunPhase.MEASURING),
        ("3", "c", "h3", RunPhase.WAITING),
        ("4", "d", "h4", RunPhase.FAILED),
        ("5", "e", "h2", RunPhase.STOPPING),
        ("6", "f", "h5", RunPhase.LOADING),
        ("7", "g", "h6", RunPhase.COLLAPSE),
    ]:
        display.on_event(RunAdded(key, run=run, host=host, total=None))
        display.on_event(PhaseChanged(key, phase, reason="x" if phase is RunPhase.FAILED else None))
    assert busy_hosts(display, []) == ["h2", "h5"]


@pytest.mark.parametrize(
    ("message", "host", "shown"),
    [
        ("dead: connection refused by 127.0.0.1:9", "dead", "connection refused by 127.0.0.1:9"),
        ("connection refused by 127.0.0.1:9", "dead", "connection refused by 127.0.0.1:9"),
        ("dead-2: refused", "dead", "dead-2: refused"),  # another host's name is kept
        ("dead: dead: twice", "dead", "dead: twice"),  # only the one prefix
    ],
)
def test_without_host(message: str, host: str, shown: str) -> None:
    assert without_host(message, host) == shown
