"""`orch loadgen URL`: the load generator on its own, against any OpenAI-compatible server.

No playbook, no host, no SSH: the load generator (``orchestrator/remote/loadgen.py``, whose
docstring is the spec) runs in this process, driving the URL it is given, and writes what a
run's measurement writes, in the same format: ``requests.jsonl`` (one record per request, as it
arrives), ``summary.json`` (a ``RunResult``, with the vLLM-bench keys), the two /metrics scrapes,
and a ``manifest.json`` saying what was asked. The spec is built by the same function a run
uses (``build_loadgen_spec``), the statistics by the same code (``metrics/summary.py``,
``runner/summarize.py``), so a figure means the same thing here and in ``orch run``.

Every invocation writes a new folder, ``OUT/<UTC time>-<name>/<name>/`` (the layout of a
playbook's results, so ``orch report`` and ``orch compare`` read it), never over another.

A measurement is right or marked failed: failed requests, a client that could not keep up (the
run's "client saturated" warnings) or a records file that lost lines make the result's
``error`` say so, and the command exit 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

from pydantic import ValidationError

from orchestrator import __version__
from orchestrator.config.hostconfig import Secrets, mask, mask_json
from orchestrator.config.playbook import WorkloadSpec
from orchestrator.engines.failures import REQUESTS_FAILED, describe
from orchestrator.errors import ConfigError, OrchError, ResultsWriteError
from orchestrator.loadgen.prompts import PromptSet, build_loadgen_spec, load_prompts
from orchestrator.loadgen.records import LoadgenResult, RequestRecord
from orchestrator.metrics.acceptance import combine_acceptance
from orchestrator.metrics.prom import SpecDelta
from orchestrator.metrics.summary import request_stats
from orchestrator.remote.protocol import AgentFailure
from orchestrator.remote.wire import ErrorKind, LoadgenSpec, PhaseEvent, ProgressEvent
from orchestrator.results.model import (
    LoadPoint,
    Provenance,
    RunError,
    RunIdentity,
    RunResult,
    RunSettings,
    RunTimes,
    SpeculativeSettings,
)
from orchestrator.results.store import (
    AppendLog,
    make_dir,
    new_results_dir,
    safe_name,
    write_json,
    write_text,
)
from orchestrator.runner.summarize import (
    acceptance_result,
    client_warnings,
    lag_stats,
    loadgen_info,
    prometheus_delta,
    send_rates,
    workload_settings,
)

WHERE = "orch loadgen"  # ConfigError's "file": the command line
ENGINES = ("vllm", "sglang")  # engines whose /metrics orch reads
SATURATED = "client saturated"  # how client_warnings begins each of its warnings


@dataclass(frozen=True)
class LoadgenOptions:
    """The command line, as given (None: the workload's default, as in a playbook)."""

    url: str
    model: str
    out: Path = Path("results")
    name: str = "loadgen"
    api: str = "chat"
    prompts: str = "builtin:chat"
    num_prompts: int | None = None
    duration_s: float | None = None
    concurrency: int | None = None
    request_rate: float | None = None
    burstiness: float | None = None
    ramp_s: float | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    ignore_eos: bool = False
    warmup: int | None = None
    seed: int | None = None
    tokenizer: str | None = None
    api_key_env: str | None = None
    metrics_path: str | None = "/metrics"
    timeout_s: float = 600.0
    argv: tuple[str, ...] = ()  # the command line, for the manifest


@dataclass(frozen=True)
class LoadgenOutcome:
    """Where the measurement went and what it found; ``failures`` empty when it is right."""

    folder: Path
    result: RunResult
    failures: list[str]

    @property
    def ok(self) -> bool:
        return not self.failures


Listener = Callable[[PhaseEvent | ProgressEvent | RequestRecord], None]


# ---------------------------------------------------------------- input (pure)


def base_url(url: str) -> str:
    """The server's root: ``http(s)://host[:port][/prefix]``; an OpenAI-style ``.../v1`` base
    URL is accepted too (the load generator adds ``/v1/...`` itself)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{url!r} is not an http(s) URL",
            file=WHERE,
            path="URL",
            hint="give the server's address, e.g. http://127.0.0.1:8000",
        )
    if parts.query or parts.fragment:
        raise ConfigError(f"{url!r}: a server URL has no query or fragment", file=WHERE, path="URL")
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}"


def workload_of(opts: LoadgenOptions) -> WorkloadSpec:
    """The options as a playbook's workload, validated by the same model (so the same limits
    and the same defaults); a bad value is one ConfigError naming the option."""
    if opts.num_prompts is not None and opts.duration_s is not None:
        raise ConfigError(
            "give --num-prompts or --duration, not both",
            file=WHERE,
            path="--duration",
            hint="--duration S measures for S seconds, --num-prompts N measures N requests",
        )
    fields: dict[str, object] = {"api": opts.api, "ignore_eos": opts.ignore_eos}
    prompts = opts.prompts
    if prompts.startswith("random:"):
        length = prompts.split(":", 1)[1]
        if not length.isdigit() or int(length) < 1:
            raise ConfigError(
                f"{prompts!r}: random prompts need a length in tokens",
                file=WHERE,
                path="--prompts",
                hint="write random:IN_LEN, e.g. random:512",
            )
        fields |= {"prompts": "random", "input_len": int(length)}
    else:
        fields["prompts"] = prompts
    optional = {
        "num_prompts": opts.num_prompts,
        "duration_s": opts.duration_s,
        "concurrency": opts.concurrency,  # only when given: with a rate it is then a cap
        "request_rate": opts.request_rate,
        "burstiness": opts.burstiness,
        "ramp_s": opts.ramp_s,
        "max_tokens": opts.max_tokens,
        "temperature": opts.temperature,
        "warmup": opts.warmup,
        "seed": opts.seed,
    }
    fields |= {key: value for key, value in optional.items() if value is not None}
    try:
        return WorkloadSpec.model_validate(fields, context={"base_dir": str(Path.cwd())})
    except ValidationError as exc:
        first = exc.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else ""
        option = "--prompts" if key in ("prompts", "input_len") else "--" + key.replace("_", "-")
        option = {"--duration-s": "--duration"}.get(option, option)
        raise ConfigError(first["msg"], file=WHERE, path=option if key else None) from exc


def api_key_of(env_var: str | None, environ: dict[str, str]) -> str | None:
    """The API key, read from the environment variable named (never from the command line,
    where ``ps`` and the shell's history would show it)."""
    if not env_var:
        return None
    key = environ.get(env_var)
    if not key:
        raise ConfigError(
            f"the environment variable {env_var} is not set (or empty)",
            file=WHERE,
            path="--api-key-env",
            hint=f"export {env_var}=... first",
        )
    return key


def loadgen_spec(
    opts: LoadgenOptions, workload: WorkloadSpec, prompts: PromptSet, api_key: str | None
) -> LoadgenSpec:
    """The spec a run would send to its host's load generator, aimed at ``opts.url``."""
    spec = build_loadgen_spec(
        workload,
        prompts,
        port=0,  # replaced: the URL says where
        served_name=opts.model,
        tokenizer=opts.tokenizer,
        api_key=api_key,
        timeout_s=opts.timeout_s,
        metrics_path=opts.metrics_path or None,
    )
    return dataclasses.replace(spec, base_url=base_url(opts.url))


def check_tokenizer(name: str | None) -> None:
    """A tokenizer asked for must load: the load generator would otherwise fall back to words
    (random prompts) or whole chunks (token counts) and only say so in the result."""
    if not name:
        return
    from orchestrator.remote.tokens import load_tokenizer

    if load_tokenizer(name) is None:
        raise ConfigError(
            f"cannot load the tokenizer {name!r} from local files",
            file=WHERE,
            path="--tokenizer",
            hint="give a local folder (or a cached model id) with tokenizer files, in a Python "
            "that has `transformers` installed",
        )


# ---------------------------------------------------------------- the measurement (I/O)


def measure(
    opts: LoadgenOptions,
    *,
    environ: dict[str, str],
    listener: Listener | None = None,
) -> LoadgenOutcome:
    """Check the options, drive the server, write the folder; the outcome says whether the
    measurement is right (``failures`` empty) and where its files are."""
    workload = workload_of(opts)
    prompts = load_prompts(workload, base_dir=Path.cwd())
    api_key = api_key_of(opts.api_key_env, environ)
    spec = loadgen_spec(opts, workload, prompts, api_key)
    check_tokenizer(opts.tokenizer)
    secrets = Secrets([api_key] if api_key else [], standalone=[api_key] if api_key else [])
    top = new_results_dir(opts.out, opts.name)
    folder = make_dir(top / safe_name(opts.name))
    write_json(folder / "manifest.json", manifest(opts, spec, prompts))
    started = time.time()
    records: list[RequestRecord] = []
    log = AppendLog(folder / "requests.jsonl")
    try:
        result = _drive(spec, records, log, secrets, listener)
    finally:
        log.close()
    summary = summarize(
        opts,
        workload,
        folder=folder.name,
        run_id=top.name,
        loadgen=result,
        records=records,
        times=RunTimes.from_epoch(
            started_at=started,
            ended_at=time.time(),
            measure_started_at=result.started_at,
            measure_ended_at=result.ended_at,
        ),
        lost=log.error,
    )
    failures = [mask(f.text, secrets) for f in failures_of(summary, records, log.error)]
    summary = summary.masked(secrets) if secrets else summary
    for name, text in (
        ("metrics_before.txt", result.metrics_before),
        ("metrics_after.txt", result.metrics_after),
    ):
        if text is not None:
            write_text(folder / name, mask(text, secrets) if secrets else text)
    write_json(folder / "summary.json", summary.to_json())
    return LoadgenOutcome(folder=folder, result=summary, failures=failures)


def _drive(
    spec: LoadgenSpec,
    records: list[RequestRecord],
    log: AppendLog,
    secrets: Secrets,
    listener: Listener | None,
) -> LoadgenResult:
    """Run the load generator here; each record is written the moment it arrives."""
    from orchestrator.remote import loadgen  # its HTTP client: imported by this command only

    def emit(event: object) -> None:
        if isinstance(event, RequestRecord):
            records.append(event)
            line = event.to_json()
            # a failed write is kept in log.error: the measurement is marked failed at its end
            with contextlib.suppress(ResultsWriteError):
                log.write_json(mask_json(line, secrets) if secrets else line)
        if listener is not None and isinstance(event, PhaseEvent | ProgressEvent | RequestRecord):
            listener(event)

    try:
        return loadgen.run(spec.to_json(), emit)
    except AgentFailure as exc:
        if exc.kind == ErrorKind.BAD_SPEC:
            raise ConfigError(exc.message.removeprefix("loadgen: "), file=WHERE) from exc
        raise OrchError(exc.message) from exc


def manifest(opts: LoadgenOptions, spec: LoadgenSpec, prompts: PromptSet) -> dict[str, object]:
    """What was asked, written before the first request: the command line, the spec the load
    generator ran (its prompts counted, not copied; the API key never written)."""
    raw = spec.to_json()
    raw["api_key"] = "***" if spec.api_key else None
    items = raw.get("prompts")
    if isinstance(items, dict) and "items" in items:
        items = {**items, "items": f"{len(spec.prompts.items)} prompts"}
        raw["prompts"] = items
    return {
        "command": shlex.join(["orch", "loadgen", *opts.argv]) if opts.argv else None,
        "url": spec.base_url,
        "model": opts.model,
        "loadgen_spec": raw,
        "prompts": {
            "source": prompts.source,
            "count": len(prompts.items),
            "skipped": prompts.skipped,
            "input_len": prompts.input_len,
        },
        "orch_version": __version__,
        "python": sys.version.split()[0],
    }


# ---------------------------------------------------------------- the result (pure)


def engine_of(scrape: str | None) -> str | None:
    """vllm or sglang, from the metric names its /metrics serves (None: neither, or no scrape)."""
    if not scrape:
        return None
    return next((e for e in ENGINES if f"\n{e}:" in "\n" + scrape), None)


def summarize(
    opts: LoadgenOptions,
    workload: WorkloadSpec,
    *,
    folder: str,
    run_id: str,
    loadgen: LoadgenResult,
    records: list[RequestRecord],
    times: RunTimes,
    lost: OrchError | None = None,
) -> RunResult:
    """The measurement's ``RunResult``, from the same statistics and warnings as a run's.

    ``folder`` is relative to the invocation's folder (as a run's is to its playbook's
    results folder); ``run_id`` names the invocation."""
    lag = loadgen.client_lag
    stats = None
    if records:
        loop = lag_stats(lag.loop_delay_ms) if lag else None
        stats = request_stats(records, window_s=loadgen.duration_s, loop_delay_ms=loop)
    achieved, scheduled = send_rates(records) if loadgen.mode == "open" else (None, None)
    warnings = client_warnings(
        client_lag=stats.client_lag if stats else None,
        request_rate=loadgen.request_rate,
        achieved_rate=achieved,
        scheduled_rate=scheduled,
    )
    if loadgen.failed:
        warnings.append(
            f"{loadgen.failed} of {loadgen.requests} measured requests failed: the figures "
            "cover only the ones that completed (requests.jsonl holds each error)"
        )
    engine = engine_of(loadgen.metrics_before)
    prom: SpecDelta | None = None
    notes: list[str] = []
    if engine is not None:
        prom, note = prometheus_delta(engine, loadgen)
        notes += [note] if note else []
    speculative = bool(prom is not None and prom.drafts)
    acc = combine_acceptance(
        prometheus=prom.acceptance_length if prom else None,
        log=None,
        client=stats.tokens_per_chunk if stats else None,
        per_position_prometheus=(prom.per_position or None) if prom else None,
        speculative=speculative,
        notes=notes,
    )
    open_loop = loadgen.mode == "open"
    value = loadgen.request_rate if open_loop else loadgen.concurrency
    result = RunResult(
        run=RunIdentity(
            name=opts.name,
            key=f"{opts.name}@{urlsplit(opts.url).netloc}",
            host=urlsplit(opts.url).netloc,
            folder=folder,
            order=0,
            run_id=run_id,
        ),
        settings=RunSettings(
            engine=engine or "unknown",
            model=opts.model,
            speculative=SpeculativeSettings(method="unknown" if speculative else "none"),
            workload=workload_settings(workload),
        ),
        times=times,
        point=LoadPoint(
            kind="request_rate" if open_loop else "concurrency", value=float(value or 0)
        ),
        requests=stats,
        acceptance=acceptance_result(acc, prom),
        loadgen=loadgen_info(loadgen, achieved=achieved, scheduled=scheduled),
        warnings=warnings,
        provenance=Provenance(orch_version=__version__),
    )
    failures = failures_of(result, records, lost)
    error = measurement_error(failures, none_completed=loadgen.completed == 0)
    return result.model_copy(update={"error": error}) if error else result


class Failure(NamedTuple):
    """One reason a measurement is not right: its kind (the result's ``error.type``) and text."""

    kind: str
    text: str


def failures_of(
    result: RunResult, records: list[RequestRecord], lost: OrchError | None
) -> list[Failure]:
    """Why this measurement is not right (empty: it is): requests failed, the client set the
    pace (a run's "client saturated" warnings), or the records file lost lines."""
    loadgen = result.loadgen
    assert loadgen is not None
    out: list[Failure] = []
    if loadgen.failed or loadgen.completed == 0:
        measured = [r for r in records if not r.warmup]
        errors = Counter(r.error or f"HTTP {r.status}" for r in measured if not r.ok)
        common = "; ".join(f"{n} x {text}" for text, n in errors.most_common(3))
        title = describe(REQUESTS_FAILED)[0] if loadgen.completed == 0 else "requests failed"
        out.append(
            Failure(
                "RequestsFailed",
                f"{title} ({loadgen.failed} of {loadgen.requests})"
                + (f": {common}" if common else ""),
            )
        )
    out += [Failure("ClientSaturated", w) for w in result.warnings if w.startswith(SATURATED)]
    if lost is not None:
        out.append(Failure(type(lost).__name__, lost.message))
    return out


def measurement_error(failures: list[Failure], *, none_completed: bool) -> RunError | None:
    """The result's ``error`` for these failures (None: the measurement is right)."""
    if not failures:
        return None
    if none_completed:
        hint = describe(REQUESTS_FAILED)[1]
    else:
        hint = (
            "a failed measurement's figures are not to be trusted: requests.jsonl holds each "
            "request's error, the result's loadgen.client_lag how far the client fell behind"
        )
    return RunError(
        type=failures[0].kind,
        message=" | ".join(f.text for f in failures),
        hint=hint,
        cause=REQUESTS_FAILED if none_completed else None,
    )
