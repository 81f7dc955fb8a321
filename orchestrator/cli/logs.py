"""`orch logs parse FILE` on the command line: the events table and summary panel, or JSON (the
parsing is ``commands/logs.py``, through the same parsers `orch run` uses live)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from orchestrator.cli.choices import engine_metavar, engine_parser
from orchestrator.cli.common import JsonOpt, out, print_json
from orchestrator.commands.logs import parse_log_file
from orchestrator.errors import OrchError
from orchestrator.metrics.logparse import Event, ParsedLog
from orchestrator.metrics.sglang_log import DecodeBatchEvent
from orchestrator.metrics.vllm_log import EngineStatsEvent, SpecDecodeEvent

app = typer.Typer(
    help="Parse saved engine logs (vLLM, SGLang) into metric events and a summary.",
    no_args_is_help=True,
)


@app.callback()
def _group() -> None:
    """Parse saved engine logs (vLLM, SGLang) into metric events and a summary."""


@app.command("parse")
def parse(
    file: Annotated[Path, typer.Argument(help="Saved engine log.", show_default=False)],
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            "-e",
            help="Which engine wrote it.",
            parser=engine_parser("auto"),
            metavar=engine_metavar("auto"),
        ),
    ] = "auto",
    as_json: JsonOpt = False,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=0, help="Table: show only the last N events.")
    ] = 30,
) -> None:
    """Parse FILE into events (vLLM engine/SpecDecoding lines, SGLang decode/prefill batches).

    --json prints {"engine", "events", "summary"}; otherwise a table and a summary panel.
    """
    parsed = parse_log_file(file, engine=engine)
    if as_json:
        print_json(parsed.to_json())
        return
    out.print(render_events(parsed, limit=limit))
    out.print(render_summary(parsed, file=file))


def _fmt(value: float | int | None, spec: str = "", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def key_figures(event: Event) -> str:
    """The few numbers someone scanning a log wants per line."""
    if isinstance(event, SpecDecodeEvent):
        return (
            f"accept len {_fmt(event.mean_acceptance_length, '.2f')}, "
            f"accepted {_fmt(event.accepted_tokens)}/{_fmt(event.drafted_tokens)} tok, "
            f"rate {_fmt(event.draft_acceptance_rate, '.1f', '%')}"
        )
    if isinstance(event, EngineStatsEvent):
        return (
            f"gen {_fmt(event.generation_throughput, '.1f')} tok/s, "
            f"prompt {_fmt(event.prompt_throughput, '.1f')} tok/s, "
            f"running {_fmt(event.running_reqs)}, waiting {_fmt(event.waiting_reqs)}, "
            f"KV {_fmt(event.kv_cache_usage, '.1f', '%')}"
        )
    if isinstance(event, DecodeBatchEvent):
        return (
            f"gen {_fmt(event.gen_throughput, '.2f')} tok/s, "
            f"accept len {_fmt(event.accept_length, '.2f')}, "
            f"running {_fmt(event.running_reqs)}, queue {_fmt(event.queue_reqs)}, "
            f"token usage {_fmt(event.token_usage, '.2f')}"
        )
    return (
        f"new {_fmt(event.new_seq)} seq / {_fmt(event.new_tokens)} tok, "
        f"cached {_fmt(event.cached_tokens)}, in {_fmt(event.input_throughput, '.2f')} tok/s, "
        f"running {_fmt(event.running_reqs)}, queue {_fmt(event.queue_reqs)}"
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
