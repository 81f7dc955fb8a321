"""Engine logs parsed with the engines' own line parsers: ``metrics/logparse.py`` bound to them.

The metrics sit below the engines (an engine names its parser, ``Engine.log_parser``), so the
parsing code takes the name -> parser mapping as an argument; this module hands it the engines'
one, under the names callers use (``parse_log``, ``detect_engine``, ``LogFollower`` ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache

from orchestrator.engines import ENGINES
from orchestrator.metrics import logparse
from orchestrator.metrics.logparse import AUTO, Event, LineParser, Malformed, ParsedLog, Parsers


@cache
def parsers() -> Parsers:
    """Engine name (as users type it) -> its line parser, as each engine object says."""
    return {name: engine.log_parser for name, engine in ENGINES.items()}


def parser_for(engine: str) -> LineParser:
    """``engine``'s line parser; OrchError naming the known engines for another name."""
    return logparse.parser_for(parsers(), engine)


def parse_line(engine: str, line: str, *, line_no: int = 0) -> Event | Malformed | None:
    """Event for a metrics line, Malformed for a broken one, None for any other line."""
    return parser_for(engine)(line, line_no=line_no)


def detect_engine(lines: Iterable[str]) -> str | None:
    """The engine most of ``lines`` say wrote them (``logparse.detect_engine``)."""
    return logparse.detect_engine(parsers(), lines)


def parse_log(lines: Iterable[str], *, engine: str = AUTO) -> ParsedLog:
    """A whole log parsed (lines numbered from 1); ``engine="auto"`` detects it."""
    return logparse.parse_log(parsers(), lines, engine=engine)


def other_engine_events(lines: Sequence[str], *, engine: str) -> tuple[str, dict[str, int]] | None:
    """Another engine whose lines these are, when ``engine``'s parser finds none."""
    return logparse.other_engine_events(parsers(), lines, engine=engine)


class LogFollower(logparse.LogFollower):
    """``logparse.LogFollower`` reading with the engines' parsers."""

    def __init__(self, *, engine: str = AUTO, keep_events: bool = True) -> None:
        super().__init__(parsers(), engine=engine, keep_events=keep_events)
