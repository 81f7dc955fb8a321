"""Engine logs -> typed events and a summary: the registry, engine detection, aggregation.

The per-engine line parsers live in ``vllm_log`` and ``sglang_log``; which one applies to an
engine is said by its engine object (``Engine.log_parser``): the caller hands the mapping in
(``Parsers``; ``engines/logs.py`` binds the engines' own), since metrics sit below the engines.
This module turns their ``ValueError`` into a counted ``Malformed`` record and aggregates events. Everything here is pure: the same code serves a
saved file (``parse_log``, ``orch logs parse``) and the live tail (``LogFollower``), so the
two can never disagree about a figure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.errors import OrchError
from orchestrator.metrics import sglang_log
from orchestrator.metrics.sglang_log import DecodeBatchEvent, PrefillBatchEvent
from orchestrator.metrics.vllm_log import EngineStatsEvent, SpecDecodeEvent

Event = SpecDecodeEvent | EngineStatsEvent | DecodeBatchEvent | PrefillBatchEvent

AUTO = "auto"


@dataclass(frozen=True)
class Malformed:
    """A line that looks like a metrics line but does not parse (truncated, interleaved, new)."""

    line_no: int
    line: str
    reason: str
    kind: str = field(default="malformed", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "line_no": self.line_no,
            "reason": self.reason,
            "line": self.line,
        }


@dataclass(frozen=True)
class LineParser:
    """One engine's line parser: ``parse`` raises ValueError for a malformed metrics line."""

    engine: str
    kinds: tuple[str, ...]
    parse: Callable[[str, int], Event | None]
    is_signature: Callable[[str], bool]

    def __call__(self, line: str, *, line_no: int = 0) -> Event | Malformed | None:
        text = _last_segment(line)
        try:
            return self.parse(text, line_no)
        except ValueError as exc:
            return Malformed(line_no=line_no, line=text, reason=str(exc))


Parsers = Mapping[str, LineParser]
"""Engine name (as users type it) -> its line parser."""


def _last_segment(line: str) -> str:
    """Progress bars redraw with ``\\r``: what a terminal would show is the last segment."""
    text = line.rstrip("\r\n")
    if "\r" in text:
        text = next((seg for seg in reversed(text.split("\r")) if seg.strip()), "")
    return text


def parser_for(known: Parsers, engine: str) -> LineParser:
    try:
        return known[engine]
    except KeyError:
        raise OrchError(
            f"unknown engine {engine!r}", hint=f"use one of: {', '.join(sorted(known))}"
        ) from None


def _vote(known: Parsers, line: str) -> str | None:
    votes = [name for name, parser in known.items() if parser.is_signature(line)]
    return votes[0] if len(votes) == 1 else None


def detect_engine(known: Parsers, lines: Iterable[str]) -> str | None:
    """The engine whose prefix/markers most lines carry; None when no line (or a tie) decides.

    A majority rather than the first hit, so one quoted line of the other engine's output
    (a pasted error, a prompt) cannot flip the verdict.
    """
    counts = dict.fromkeys(known, 0)
    for line in lines:
        vote = _vote(known, line)
        if vote:
            counts[vote] += 1
    ranked = sorted(counts.items(), key=lambda kv: kv[1], reverse=True)
    if ranked[0][1] == 0 or (len(ranked) > 1 and ranked[1][1] == ranked[0][1]):
        return None
    return ranked[0][0]


# vLLM prints the mean acceptance length with two decimals (and a hair for float rounding)
MEAN_PRINTED_TO = 0.005 + 1e-9


def line_drafts(event: SpecDecodeEvent) -> float | None:
    """How many drafts (verify steps) a SpecDecoding line covers, or None when unknowable.

    A draft proposes at most K tokens (K = the number of per-position rates), so drafted / K is
    only a lower bound: ngram proposes fewer when its n-gram match is short, and dividing by K
    then overstates the acceptance length (a real vLLM 0.32 ngram log: 4.88 where vLLM printed
    4.41). The printed mean (1 + accepted/drafts) says how many drafts there were, to its two
    decimals: drafted / K is used when it lies within that rounding (full drafts: exact), else
    the mean's own count, never below drafted / K nor above drafted (each draft proposes one
    token at least). A line whose mean is 1.00 (nothing accepted) weighs drafted / K.
    """
    if event.accepted_tokens is None or event.drafted_tokens is None:
        return None
    if event.drafted_tokens == 0:
        return 0.0
    k = len(event.per_position_acceptance or ())
    full = event.drafted_tokens / k if k else None
    mean = event.mean_acceptance_length
    if mean is None or mean - MEAN_PRINTED_TO <= 1 or event.accepted_tokens == 0:
        return full  # the mean cannot say (or there is nothing to weigh): full drafts
    low = event.accepted_tokens / (mean - 1 + MEAN_PRINTED_TO)
    high = event.accepted_tokens / (mean - 1 - MEAN_PRINTED_TO)
    if full is not None and low <= full <= high:
        return full
    drafts = event.accepted_tokens / (mean - 1)
    return min(max(drafts, full or 0.0), float(event.drafted_tokens))


@dataclass(frozen=True)
class LogSummary:
    """Whole-log figures.

    ``acceptance_length``: vLLM 1 + Σaccepted/Σdrafts over the SpecDecoding lines whose drafts
    are known (``line_drafts``), i.e. weighted by drafts, not a mean of means; SGLang the mean
    of the decode lines' ``accept len``. ``per_position_acceptance`` (vLLM only):
    Σ(rate_i x drafts)/Σdrafts per position. ``mean_generation_throughput``: mean over the
    lines that print one (per engine with several ``Engine NNN`` lines, not their total).
    """

    events: dict[str, int]
    acceptance_length: float | None = None
    per_position_acceptance: list[float] | None = None
    mean_generation_throughput: float | None = None
    accepted_tokens: int | None = None  # vLLM: Σ accepted over the lines counted above
    drafts: float | None = None  # vLLM: Σ drafts over the same lines
    malformed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ParsedLog:
    engine: str
    events: list[Event]
    malformed: list[Malformed]
    summary: LogSummary

    def to_json(self) -> dict[str, Any]:
        """The ``orch logs parse --json`` object: ``{"engine", "events", "summary"}``."""
        summary = self.summary.to_dict()
        summary["malformed_lines"] = [m.to_dict() for m in self.malformed]
        return {
            "engine": self.engine,
            "events": [e.to_dict() for e in self.events],
            "summary": summary,
        }


class LogFollower:
    """Incremental parser for a live log: feed chunks as they arrive, read running figures.

    ``engine="auto"`` fixes the engine at the first line that only one engine could have
    written. Lines are numbered from 1 in the order fed, split on ``\\n`` only (like grep -n).
    For the console: ``latest_acceptance_length`` (last SpecDecoding mean / decode ``accept
    len``; a line with nothing drafted keeps the previous figure) and ``latest_gen_throughput`` (last
    engine line / decode line; with several vLLM engines, that engine's own figure).
    """

    def __init__(self, known: Parsers, *, engine: str = AUTO, keep_events: bool = True) -> None:
        self.known = known
        self.engine: str | None = None if engine == AUTO else parser_for(known, engine).engine
        self.keep_events = keep_events
        self.events: list[Event] = []
        self.malformed: list[Malformed] = []
        self.line_no = 0
        self.latest_acceptance_length: float | None = None
        self.latest_gen_throughput: float | None = None
        self._buffer = ""
        self._counts: dict[str, int] = {}
        self._spec_lines = 0  # SpecDecoding lines whose drafts are known
        self._accepted = 0
        self._drafts = 0.0
        self._pos_num: list[float] = []
        self._pos_den: list[float] = []
        self._accept_len_sum = 0.0
        self._accept_len_n = 0
        self._gen_sum = 0.0
        self._gen_n = 0

    def feed(self, chunk: str) -> list[Event | Malformed]:
        """Parse every complete line in ``chunk`` (a partial last line waits for the next)."""
        lines = (self._buffer + chunk).split("\n")
        self._buffer = lines.pop()
        return self.feed_lines(lines)

    def close(self) -> list[Event | Malformed]:
        """End of stream: parse a last line that had no newline."""
        rest, self._buffer = self._buffer, ""
        record = self.feed_line(rest) if rest else None
        return [record] if record is not None else []

    def feed_line(self, line: str) -> Event | Malformed | None:
        self.line_no += 1
        if self.engine is None:
            self.engine = _vote(self.known, line)
            if self.engine is None:
                return None
        return self._record(parser_for(self.known, self.engine)(line, line_no=self.line_no))

    def feed_lines(self, lines: Iterable[str]) -> list[Event | Malformed]:
        """``feed_line`` for each of ``lines``, in order: what the live tail gives, a batch at a
        time. The parser is looked up once per batch; most lines of a log are not metrics lines
        and cost the parser's substring test alone."""
        records: list[Event | Malformed] = []
        parse = parser_for(self.known, self.engine) if self.engine is not None else None
        for line in lines:
            if parse is None:
                record = self.feed_line(line)
                parse = parser_for(self.known, self.engine) if self.engine is not None else None
            else:
                self.line_no += 1
                record = self._record(parse(line, line_no=self.line_no))
            if record is not None:
                records.append(record)
        return records

    def _record(self, record: Event | Malformed | None) -> Event | Malformed | None:
        """Count what the parser made of a line: a malformed line apart, an event into the
        running figures."""
        if isinstance(record, Malformed):
            self.malformed.append(record)
        elif record is not None:
            self._add(record)
        return record

    def _add(self, event: Event) -> None:
        if self.keep_events:
            self.events.append(event)
        self._counts[event.kind] = self._counts.get(event.kind, 0) + 1
        if isinstance(event, SpecDecodeEvent):
            self._add_spec(event)
        elif isinstance(event, EngineStatsEvent):
            self._add_gen(event.generation_throughput)
        elif isinstance(event, DecodeBatchEvent):
            self._add_gen(event.gen_throughput)
            if event.accept_length is not None:
                self._accept_len_sum += event.accept_length
                self._accept_len_n += 1
                self.latest_acceptance_length = event.accept_length

    def _add_gen(self, value: float | None) -> None:
        if value is not None:
            self._gen_sum += value
            self._gen_n += 1
            self.latest_gen_throughput = value

    def _add_spec(self, event: SpecDecodeEvent) -> None:
        drafts = line_drafts(event)
        if drafts is None or event.accepted_tokens is None:
            return
        self._spec_lines += 1
        self._accepted += event.accepted_tokens
        self._drafts += drafts
        for i, rate in enumerate(event.per_position_acceptance or ()):
            if i == len(self._pos_num):
                self._pos_num.append(0.0)
                self._pos_den.append(0.0)
            if rate is not None:
                self._pos_num[i] += rate * drafts
                self._pos_den[i] += drafts
        if drafts > 0:  # an idle interval says nothing about acceptance
            mean = event.mean_acceptance_length
            self.latest_acceptance_length = (
                mean if mean is not None else 1 + event.accepted_tokens / drafts
            )

    def summary(self) -> LogSummary:
        kinds = parser_for(self.known, self.engine).kinds if self.engine else ()
        counts = {kind: self._counts.get(kind, 0) for kind in kinds}
        gen = self._gen_sum / self._gen_n if self._gen_n else None
        if self.engine == sglang_log.ENGINE:
            accept = self._accept_len_sum / self._accept_len_n if self._accept_len_n else None
            return LogSummary(counts, accept, None, gen, malformed=len(self.malformed))
        accept = 1 + self._accepted / self._drafts if self._drafts > 0 else None
        positions: list[float] = []
        for num, den in zip(self._pos_num, self._pos_den, strict=True):
            if den <= 0:  # later positions cannot have more drafts than earlier ones
                break
            positions.append(num / den)
        spec_seen = self._spec_lines > 0
        return LogSummary(
            counts,
            accept,
            positions or None,
            gen,
            accepted_tokens=self._accepted if spec_seen else None,
            drafts=self._drafts if spec_seen else None,
            malformed=len(self.malformed),
        )

    def result(self) -> ParsedLog:
        if self.engine is None:
            raise _undetected()
        return ParsedLog(self.engine, list(self.events), list(self.malformed), self.summary())


def _undetected() -> OrchError:
    return OrchError(
        "could not tell which engine wrote this log: no vLLM or SGLang line found",
        hint="name the engine explicitly (vllm or sglang)",
    )


def parse_log(known: Parsers, lines: Iterable[str], *, engine: str = AUTO) -> ParsedLog:
    """Parse a whole log (lines numbered from 1); ``engine="auto"`` uses ``detect_engine``."""
    if engine == AUTO:
        lines = list(lines)
        detected = detect_engine(known, lines)
        if detected is None:
            raise _undetected()
        engine = detected
    follower = LogFollower(known, engine=engine)
    follower.feed_lines(lines)
    return follower.result()


def other_engine_events(
    known: Parsers, lines: Sequence[str], *, engine: str
) -> tuple[str, dict[str, int]] | None:
    """When ``engine``'s parser finds no metrics line in ``lines`` but another engine's does:
    that engine and its event counts (kinds with none left out); else None.

    Forcing the wrong parser is not an error to it (every line is simply "not mine"), so a
    caller that took the engine from the user asks this to avoid a silent "0 events".
    """
    if parse_log(known, lines, engine=engine).events:
        return None
    best: tuple[str, dict[str, int]] | None = None
    for name in known:
        if name == parser_for(known, engine).engine:
            continue
        counts = {k: n for k, n in parse_log(known, lines, engine=name).summary.events.items() if n}
        if counts and (best is None or sum(counts.values()) > sum(best[1].values())):
            best = (name, counts)
    return best
