"""`orch logs parse FILE`: a saved engine log through the same parsers `orch run` uses live."""

from __future__ import annotations

from pathlib import Path

from orchestrator.engines.logs import detect_engine, other_engine_events, parse_log
from orchestrator.errors import OrchError
from orchestrator.metrics.logparse import AUTO, ParsedLog


def read_log(path: Path) -> list[str]:
    """The file's lines split on ``\\n`` only, so line numbers match ``grep -n``."""
    if not path.exists():
        raise OrchError(
            f"{path}: no such file",
            hint="give the path of a saved vLLM or SGLang log (a run's log is results/.../server.log)",
        )
    if not path.is_file():
        raise OrchError(f"{path}: not a regular file", hint="give the path of a log file")
    try:
        with path.open(encoding="utf-8", errors="replace", newline="") as fh:
            text = fh.read()
    except OSError as exc:
        raise OrchError(
            f"{path}: cannot read it ({exc.strerror})", hint="check its permissions"
        ) from exc
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def parse_log_file(file: Path, *, engine: str = AUTO) -> ParsedLog:
    """FILE's events and summary; ``auto`` tells the engine from the log itself. An explicit
    engine that finds nothing where the other one's parser does is refused as a wrong guess."""
    lines = read_log(file)
    name = engine
    if engine == AUTO:
        detected = detect_engine(lines)
        if detected is None:
            raise OrchError(
                f"{file}: could not tell which engine wrote this log "
                "(no vLLM or SGLang log prefix or metrics line found)",
                hint="pass --engine vllm or --engine sglang",
            )
        name = detected
    parsed = parse_log(lines, engine=name)
    if not parsed.events and engine != AUTO:
        _refuse_wrong_engine(file, lines, name)
    return parsed


def _refuse_wrong_engine(file: Path, lines: list[str], engine: str) -> None:
    """An explicit ``--engine`` that finds nothing where the other parser finds metrics lines
    is a wrong guess, not an idle server: say so instead of printing 0 events."""
    other = other_engine_events(lines, engine=engine)
    if other is None:
        return
    name, counts = other
    found = ", ".join(f"{kind} {n}" for kind, n in counts.items())
    raise OrchError(
        f"{file}: no {engine} metrics line in this log, but the {name} parser finds "
        f"{sum(counts.values())} event(s) ({found}): it looks like a {name} log",
        hint=f"use --engine {name}, or --engine auto to detect the engine",
    )
