"""`orch loadgen URL --model M [...]` on the command line: orch's load generator on its own,
against any OpenAI-compatible server (like `vllm bench serve`), writing a run's files."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from orchestrator.cli.common import EXIT_FAILURE, JsonOpt, err, out, print_json

if TYPE_CHECKING:
    from orchestrator.commands.loadgen import LoadgenOutcome
    from orchestrator.loadgen.records import RequestRecord
    from orchestrator.remote.wire import PhaseEvent, ProgressEvent


class Api(str, Enum):
    chat = "chat"
    completions = "completions"


class Progress:
    """Prints the load generator's phases and its periodic progress on stderr, one line each
    (a log, not a live display: it reads the same in a terminal, a CI log and `| tee`)."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet
        self.done = self.failed = 0

    def __call__(self, event: PhaseEvent | ProgressEvent | RequestRecord) -> None:
        from orchestrator.remote.wire import PhaseEvent, ProgressEvent

        if self.quiet:
            return
        if isinstance(event, PhaseEvent):
            err.print(f"[bold]{event.phase}[/]")
        elif isinstance(event, ProgressEvent):
            err.print(
                f"  {event.elapsed_s:7.1f} s  {event.phase:7}  done {event.done:>6}  "
                f"failed {event.failed:>4}  in flight {event.in_flight:>5}  "
                f"{event.tok_s:>9,.0f} tok/s"
            )


def _figure(value: float | None, unit: str = "") -> str:
    return "–" if value is None else f"{value:,.1f}{unit}"


def render(done: LoadgenOutcome) -> None:
    """The measurement in a few lines: throughput, latencies, the client's lag, the verdict."""
    result = done.result
    stats, info = result.requests, result.loadgen
    if stats is not None and info is not None:
        out.print(
            f"requests: {stats.completed} completed, {stats.failed} failed in "
            f"{stats.duration_s:.2f} s ({info.mode} loop"
            + (f", c={info.concurrency}" if info.concurrency else "")
            + (f", rate={info.request_rate:g}/s" if info.request_rate else "")
            + ")"
        )
        out.print(
            f"output:   {_figure(stats.output_throughput)} tok/s, "
            f"{_figure(stats.request_throughput)} req/s, {stats.total_output_tokens:,} tokens "
            f"(counted by {stats.token_count_method or '–'}; {info.reconciled} of "
            f"{stats.completed} reconciled with the server's usage, "
            f"{info.token_count_mismatches} token count mismatches)"
        )
        for name, s in (("TTFT", stats.ttft_ms), ("TPOT", stats.tpot_ms)):
            out.print(
                f"{name}:     mean {_figure(s.mean)}  median {_figure(s.median)}  "
                f"p99 {_figure(s.p99)} ms"
            )
        out.print(
            f"ITL:      per token {_figure(stats.itl_token_ms.mean)} ms, per chunk "
            f"{_figure(stats.itl_chunk_ms.mean)} ms, {_figure(stats.tokens_per_chunk)} "
            "tokens per chunk"
        )
        lag = stats.client_lag
        loop = lag.loop_delay_ms.p99 if lag.loop_delay_ms else None
        out.print(
            f"client:   send lag p99 {_figure(lag.send_lag_ms.p99)} ms, event-loop delay "
            f"p99 {_figure(loop)} ms"
        )
    for warning in result.warnings:
        if warning.message not in done.failures:  # those are told as the failure, below
            err.print(f"[yellow]warning:[/] {escape(warning.message)}")
    out.print(f"results:  {done.folder}")
    if done.ok:
        out.print("[green]ok[/]")
        return
    err.print("[bold red]measurement failed:[/]")
    for reason in done.failures:
        err.print(f"  - {escape(reason)}")


def loadgen_command(
    url: Annotated[
        str,
        typer.Argument(
            help="The server's base URL, e.g. http://127.0.0.1:8000 (a .../v1 URL works too).",
            show_default=False,
            metavar="URL",
        ),
    ],
    model: Annotated[
        str,
        typer.Option("--model", "-m", help="Served model name sent in every request."),
    ],
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out", help="Results root: each invocation writes a new folder, STAMP-NAME/NAME."
        ),
    ] = Path("results"),
    api: Annotated[Api, typer.Option("--api", help="OpenAI endpoint.")] = Api.chat,
    prompts: Annotated[
        str,
        typer.Option(
            "--prompts",
            help="builtin:chat|code|math|mixed, a .jsonl/.json file, or random:IN_LEN "
            "(random prompts of IN_LEN tokens).",
        ),
    ] = "builtin:chat",
    num_prompts: Annotated[
        int | None,
        typer.Option("--num-prompts", "-n", help="Measured requests [default: 64].", min=1),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option("--duration", help="Measure for this many seconds instead.", min=0),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            "-c",
            help="Requests in flight (closed loop) [default: 1]; with --request-rate a cap.",
            min=1,
        ),
    ] = None,
    request_rate: Annotated[
        float | None,
        typer.Option("--request-rate", help="Open loop: requests per second (gamma arrivals)."),
    ] = None,
    burstiness: Annotated[
        float | None,
        typer.Option("--burstiness", help="Gamma shape of arrivals: 1 Poisson [default: 1]."),
    ] = None,
    ramp_s: Annotated[
        float | None,
        typer.Option(
            "--ramp",
            help="Closed loop: send the first wave over this many seconds "
            "[default: concurrency / 500]; 0: one burst.",
            min=0,
        ),
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", help="Output tokens per request [default: 256].")
    ] = None,
    temperature: Annotated[
        float | None, typer.Option("--temperature", help="Sampling temperature [default: 0].")
    ] = None,
    ignore_eos: Annotated[
        bool, typer.Option("--ignore-eos", help="Generate exactly --max-tokens.")
    ] = False,
    warmup: Annotated[
        int | None,
        typer.Option("--warmup", help="Warm-up requests, sent first, not measured [default: 2]."),
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed of prompts, arrivals, sampling [default: 0].")
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            help="Local tokenizer (folder or cached id): exact random prompt lengths, and token "
            "counts when the server sends no per-chunk usage.",
        ),
    ] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option("--api-key-env", help="Environment variable holding the API key."),
    ] = None,
    metrics_path: Annotated[
        str,
        typer.Option("--metrics-path", help="Scraped before and after the window; '' for none."),
    ] = "/metrics",
    name: Annotated[
        str, typer.Option("--name", help="Names the measurement and its folder.")
    ] = "loadgen",
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds per request, whole stream.", min=0.001)
    ] = 600.0,
    max_failed_fraction: Annotated[
        float | None,
        typer.Option(
            "--max-failed-fraction",
            help="Failed requests (a fraction of those measured) past which the measurement "
            "fails, as a playbook's workload.max_failed_fraction [default: 0: any].",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Drive an OpenAI-compatible server with orch's load generator, from this machine (no
    playbook, no SSH), and write a run's files: requests.jsonl, summary.json, manifest.json.
    Exits 1 when the measurement failed, by the policy `orch run` uses: failed requests past
    --max-failed-fraction, a client that fell behind, lost records, contradicted token counts."""
    from orchestrator.commands.loadgen import LoadgenOptions, measure

    options = LoadgenOptions(
        url=url,
        model=model,
        out=out_dir,
        name=name,
        api=api.value,
        prompts=prompts,
        num_prompts=num_prompts,
        duration_s=duration,
        concurrency=concurrency,
        request_rate=request_rate,
        burstiness=burstiness,
        ramp_s=ramp_s,
        max_tokens=max_tokens,
        temperature=temperature,
        ignore_eos=ignore_eos,
        warmup=warmup,
        seed=seed,
        tokenizer=tokenizer,
        api_key_env=api_key_env,
        metrics_path=metrics_path or None,
        timeout_s=timeout,
        max_failed_fraction=max_failed_fraction,
        argv=tuple(sys.argv[2:]) if sys.argv[1:2] == ["loadgen"] else (),
    )
    done = measure(options, environ=dict(os.environ), listener=Progress(quiet=as_json))
    if as_json:
        print_json(
            {
                "folder": str(done.folder),
                "ok": done.ok,
                "failures": done.failures,
                "summary": done.result.to_json(),
            }
        )
    else:
        render(done)
    if not done.ok:
        raise typer.Exit(EXIT_FAILURE)
