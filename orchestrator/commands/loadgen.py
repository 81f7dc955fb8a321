"""`orch loadgen URL`: the load generator on its own, against any OpenAI-compatible server.

No playbook, no host, no SSH: the load generator (``orchestrator/remote/loadgen.py``, whose
docstring is the spec) runs in this process, driving the URL it is given, and writes what a
run's measurement writes, in the same format: ``requests.jsonl`` (one record per request, as it
arrives), ``summary.json`` (a ``RunResult``, with the vLLM-bench keys), the two /metrics scrapes,
and a ``manifest.json`` saying what was asked. The spec is built by the same function a run
uses (``build_loadgen_spec``), the result by the same assembler (``runner/assemble.py``), so a
figure, a warning and a verdict mean the same thing here and in ``orch run``.

Every invocation writes a new folder, ``OUT/<UTC time>-<name>/<name>/`` (the layout of a
playbook's results, so ``orch report`` and ``orch compare`` read it), never over another.

A measurement is right or marked failed, by the one policy every command uses
(``results.validity.assess``): failed requests past ``--max-failed-fraction`` (default 0), a
client that could not keep up, a records file that lost lines or a token count the server
contradicted make the result's ``error`` say so, and the command exit 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from pydantic import ValidationError

from orchestrator import __version__
from orchestrator.config.hostconfig import Secrets, mask, mask_json
from orchestrator.config.playbook import WorkloadSpec
from orchestrator.engines import engine_serving
from orchestrator.errors import ConfigError, OrchError, ResultsWriteError
from orchestrator.loadgen.prompts import PromptSet, build_loadgen_spec, load_prompts
from orchestrator.loadgen.records import LoadgenResult, RequestRecord
from orchestrator.remote.protocol import AgentFailure
from orchestrator.remote.wire import ErrorKind, LoadgenSpec, PhaseEvent, ProgressEvent
from orchestrator.results.manifest import LoadgenManifest, PromptsRead
from orchestrator.results.model import (
    LoadPoint,
    Provenance,
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
from orchestrator.runner.assemble import Measured, assemble
from orchestrator.runner.summarize import prometheus_delta, workload_settings

WHERE = "orch loadgen"  # ConfigError's "file": the command line
UNKNOWN: Final = "unknown"  # the engine (or speculative method) of a server that does not say


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
    max_failed_fraction: float | None = None
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
        "max_failed_fraction": opts.max_failed_fraction,
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
    summary, reasons = summarize(
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
        prompts_sha256=prompts.sha256,
    )
    failures = [mask(text, secrets) for text in reasons]
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
    from orchestrator.remote import loadrunner  # its HTTP client: imported by this command only

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
        return loadrunner.run(spec.to_json(), emit)
    except AgentFailure as exc:
        if exc.kind == ErrorKind.BAD_SPEC:
            raise ConfigError(exc.message.removeprefix("loadgen: "), file=WHERE) from exc
        raise OrchError(exc.message) from exc


def manifest(opts: LoadgenOptions, spec: LoadgenSpec, prompts: PromptSet) -> dict[str, object]:
    """What was asked, written before the first request (``results.manifest.LoadgenManifest``):
    the command line, the spec the load generator ran (its prompts counted, not copied; the
    API key never written)."""
    raw = spec.to_json()
    raw["api_key"] = "***" if spec.api_key else None
    items = raw.get("prompts")
    if isinstance(items, dict) and "items" in items:
        items = {**items, "items": f"{len(spec.prompts.items)} prompts"}
        raw["prompts"] = items
    record = LoadgenManifest(
        command=shlex.join(["orch", "loadgen", *opts.argv]) if opts.argv else None,
        url=spec.base_url,
        model=opts.model,
        loadgen_spec=raw,
        prompts=PromptsRead(
            source=prompts.source,
            count=len(prompts.items),
            skipped=prompts.skipped,
            input_len=prompts.input_len,
            sha256=prompts.sha256,
        ),
        orch_version=__version__,
        python=sys.version.split()[0],
    )
    return dict(record.to_json())


# ---------------------------------------------------------------- the result (pure)


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
    prompts_sha256: str | None = None,
) -> tuple[RunResult, list[str]]:
    """The measurement's ``RunResult``, assembled as a run's is, and why the verdict policy
    failed it (empty: its figures stand).

    ``folder`` is relative to the invocation's folder (as a run's is to its playbook's
    results folder); ``run_id`` names the invocation; ``prompts_sha256`` the content of the
    prompts read (none for random ones), so a compare tells rewritten prompts apart. The engine is the one whose metrics the
    server serves (unknown when it serves none orch reads); its speculative method is unknown,
    but whether it drafted at all its counters say."""
    engine = engine_serving(loadgen.metrics_before)
    prom = prometheus_delta(engine, loadgen)[0] if engine else None
    speculative = bool(prom is not None and prom.drafts)
    open_loop = loadgen.mode == "open"
    value = loadgen.request_rate if open_loop else loadgen.concurrency
    where = urlsplit(opts.url).netloc
    assembled = assemble(
        Measured(
            run=RunIdentity(
                name=opts.name,
                key=f"{opts.name}@{where}",
                host=where,
                folder=folder,
                order=0,
                run_id=run_id,
            ),
            settings=RunSettings(
                engine=engine or UNKNOWN,
                model=opts.model,
                speculative=SpeculativeSettings(method=UNKNOWN if speculative else "none"),
                workload=workload_settings(workload, prompts_sha256),
            ),
            times=times,
            point=LoadPoint(
                kind="request_rate" if open_loop else "concurrency", value=float(value or 0)
            ),
            records=records,
            loadgen=loadgen,
            slo=workload.slo,
            lost=lost,
            provenance=Provenance(orch_version=__version__),
        )
    )
    reasons = assembled.assessment.reasons if assembled.assessment else ()
    return assembled.result, [r.message for r in reasons]
