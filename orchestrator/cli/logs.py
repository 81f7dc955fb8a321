"""`orch logs parse FILE`: a saved engine log through the same parsers `orch run` uses live."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from orchestrator.cli.common import JsonOpt, out, print_json
from orchestrator.errors import OrchError
from orchestrator.metrics.logparse import (
    Event,
    ParsedLog,
    detect_engine,
    other_engine_events,
    parse_log,
)

app = typer.Typer(
    help="Parse saved engine logs (vLLM, SGLang) into metric events and a summary.",
    no_args_is_help=True,
)


class EngineChoice(str, Enum):
    auto = "auto"
    vllm = "vllm"
    sglang = "sglang"


@app.callback()
def _group() -> None:
    """Parse saved engine logs (vLLM, SGLang) into metric events and a summary."""


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


@app.command("parse")
def parse(
    file: Annotated[Path, typer.Argument(help="Saved engine log.", show_default=False)],
    engine: Annotated[
        EngineChoice, typer.Option("--engine", "-e", help="Which engine wrote it.")
    ] = EngineChoice.auto,
    as_json: JsonOpt = False,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=0, help="Table: show only the last N events.")
    ] = 30,
) -> None:
    """Parse FILE into events (vLLM engine/SpecDecoding lines, SGLang decode/prefill batches).

    --json prints {"engine", "events", "summary"}; otherwise a table and a summary panel.
    """
    lines = read_log(file)
    name = engine.value
    if name == EngineChoice.auto.value:
        detected = detect_engine(lines)
        if detected is None:
            raise OrchError(
                f"{file}: could not tell which engine wrote this log "
                "(no vLLM or SGLang log prefix or metrics line found)",
                hint="pass --engine vllm or --engine sglang",
            )
        name = detected
    parsed = parse_log(lines, engine=name)
    if not parsed.events and engine != EngineChoice.auto:
        _refuse_wrong_engine(file, lines, name)
    if as_json:
        print_json(parsed.to_json())
        return
    out.print(render_events(parsed, limit=limit))
    out.print(render_summary(parsed, file=file))


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


def _fmt(value: float | int | None, spec: str = "", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def key_figures(event: Event) -> str:
    """The few numbers someone scanning a log wants per line."""
    e = event.to_dict()
    if e["kind"] == "spec_decode":
        return (
            f"accept len {_fmt(e['mean_acceptance_length'], '.2f')}, "
            f"accepted {_fmt(e['accepted_tokens'])}/{_fmt(e['drafted_tokens'])} tok, "
            f"rate {_fmt(e['draft_acceptance_rate'], '.1f', '%')}"
        )
    if e["kind"] == "engine_stats":
        return (
            f"gen {_fmt(e['generation_throughput'], '.1f')} tok/s, "
            f"prompt {_fmt(e['prompt_throughput'], '.1f')} tok/s, "
            f"running {_fmt(e['running_reqs'])}, waiting {_fmt(e['waiting_reqs'])}, "
            f"KV {_fmt(e['kv_cache_usage'], '.1f', '%')}"
        )
    if e["kind"] == "decode_batch":
        return (
            f"gen {_fmt(e['gen_throughput'], '.2f')} tok/s, accept len {_fmt(e['accept_length'], '.2f')}, "
            f"running {_fmt(e['running_reqs'])}, queue {_fmt(e['queue_reqs'])}, "
            f"token usage {_fmt(e['token_usage'], '.2f')}"
        )
    return (
        f"new {_fmt(e['new_seq'])} seq / {_fmt(e['new_tokens'])} tok, "
        f"cached {_fmt(e['cached_tokens'])}, in {_fmt(e['input_throughput'], '.2f')} tok/s, "
        f"running {_fmt(e['running_reqs'])}, queue {_fmt(e['queue_reqs'])}"
    )


def render_events(parsed: ParsedLog, *, limit: int) -> Table:
    shown = parsed.events[-limit:] if limit else []
    title = f"{parsed.engine} log: last {len(shown)} of {len(parsed.events)} events"
    table = Table(title=title, title_justify="left")
    table.add_column("line", justify="right")
    table.add_column("time")
    table.add_column("kind")
    table.add_column("key figures")
    for event in shown:
        table.add_row(str(event.line_no), event.time or "", event.kind, escape(key_figures(event)))
    return table


def render_summary(parsed: ParsedLog, *, file: Path) -> Panel:
    s = parsed.summary
    counts = ", ".join(f"{kind} {n}" for kind, n in s.events.items())
    rows = [
        f"[bold]events[/]: {counts}",
        f"[bold]acceptance length[/]: {_fmt(s.acceptance_length, '.3f')}",
        f"[bold]mean generation throughput[/]: {_fmt(s.mean_generation_throughput, '.2f', ' tok/s')}",
    ]
    if s.per_position_acceptance:
        rates = ", ".join(f"{r:.3f}" for r in s.per_position_acceptance)
        rows.append(f"[bold]per-position acceptance[/]: {rates}")
    rows.append(f"[bold]malformed metrics lines[/]: {s.malformed}")
    for m in parsed.malformed[:5]:
        rows.append(f"  line {m.line_no}: {escape(m.reason)}")
    if len(parsed.malformed) > 5:
        rows.append(f"  ... and {len(parsed.malformed) - 5} more (see --json)")
    return Panel(Group(*rows), title=escape(f"{file} ({parsed.engine})"), title_align="left")


def main() -> int:
    """``python -m orchestrator.cli.logs``: the same command outside ``orch``."""
    from orchestrator.cli.common import report_error

    try:
        app(prog_name="orch logs")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except OrchError as exc:
        return report_error(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
