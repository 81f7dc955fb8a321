"""The run result: one typed, versioned tree per run, written as its ``summary.json``.

Everything that reads a run's outcome (summary.csv, the results table, the plot, ``orch report``,
``--json``) reads this model, never the file's keys, so a renamed field is a type error or a
validation error, not a silent "-" in a table. Every model is frozen and rejects unknown keys.

``summary.json`` holds ``RunResult.to_json()``: the tree under ``schema_version`` 4, plus the
request statistics once more at the top level under the key names of ``vllm bench serve``'s
result JSON (``completed``, ``duration``, ``median_ttft_ms``, ``spec_decode_acceptance_length``
...; ``VLLM_BENCH_KEYS``), so tools written for those files read orch's. Those keys are a view
derived from the tree (``vllm_bench``); loading drops and recomputes them. Files written before
schema_version existed (version 1), and those of versions 2 and 3 (a single point per run;
warnings as text), are migrated on load (``orchestrator.results.migrate``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass

from orchestrator.config.hostconfig import Secrets, mask_json
from orchestrator.config.methods import EngineName
from orchestrator.doctor.collapse import Cause, Collapse
from orchestrator.doctor.findings import Finding
from orchestrator.errors import OrchError
from orchestrator.metrics.acceptance import Acceptance, AcceptanceSource
from orchestrator.metrics.energy import Energy
from orchestrator.metrics.prom import SpecDelta
from orchestrator.metrics.roofline import RooflinePoint
from orchestrator.metrics.summary import ClientLag, LagStats, RequestStats, Stats
from orchestrator.remote.wire import LoadgenResult
from orchestrator.results.manifest import MANIFEST_FILE, Manifest, load_manifest
from orchestrator.results.migrate import SCHEMA_VERSION, migrate, schema_version
from orchestrator.results.validity import RunWarning, WarningKind
from orchestrator.results.vllm_bench import VLLM_BENCH_KEYS, VllmBench, vllm_bench

# The persisted records that are domain records as they stand: pydantic validates the
# dataclasses directly (each sets ``__pydantic_config__``: unknown keys rejected), so every
# field is declared once, where the record is made. These names are what the tree calls them.
AcceptanceResult = Acceptance  # metrics/acceptance.py
PrometheusDelta = SpecDelta  # metrics/prom.py
CollapseVerdict = Collapse  # doctor/collapse.py, with its ranked likely_causes
RankedCause = Cause  # doctor/collapse.py
FindingRecord = Finding  # doctor/findings.py

__all__ = [
    "SCHEMA_VERSION",
    "VLLM_BENCH_KEYS",
    "AcceptanceResult",
    "AcceptanceSource",
    "ClientLag",
    "CollapseVerdict",
    "EngineLogFigures",
    "FindingRecord",
    "LoadPoint",
    "LagStats",
    "LoadgenClientLag",
    "LoadgenInfo",
    "ParallelSettings",
    "PrometheusDelta",
    "Provenance",
    "RankedCause",
    "RequestStats",
    "ResultError",
    "RunError",
    "RunIdentity",
    "RunResult",
    "RunSettings",
    "RunTimes",
    "RunWarning",
    "SloCheck",
    "SloResult",
    "SpeculativeSettings",
    "Stats",
    "VllmBench",
    "WarningKind",
    "WorkloadSettings",
]


NOT_RUN = "NotRun"  # RunError.type of a measurement that was never made
# RunSettings.gpu_name of a run on a CPU host (hosts.yaml `gpus: none`): its one device
CPU_DEVICE = "CPU"


class ResultError(OrchError):
    """A summary.json that is not a run result this orch can read."""


def _iso_ms(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds")


# ISO 8601 in UTC with milliseconds ("2026-12-02T10:00:00.750+00:00"), as summary.json had it.
Timestamp = Annotated[datetime, PlainSerializer(_iso_ms, return_type=str)]


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunIdentity(Frozen):
    """Which run this is: names a person reads, and the ids its files and processes carry."""

    name: str  # the playbook's run name (matrix runs carry their values: "a[concurrency=4]")
    key: str  # name@host, unique within a playbook run
    host: str
    folder: str  # the run's folder under the playbook's results folder
    order: int  # position in the playbook's run order
    run_id: str  # the id the host-side server and its processes carry


class SpeculativeSettings(Frozen):
    method: str = "none"  # none, dflash, mtp, eagle, eagle3, ngram ...
    draft_model: str | None = None
    num_draft_tokens: int | None = None

    @property
    def enabled(self) -> bool:
        return self.method != "none"


class WorkloadSettings(Frozen):
    """The load that was measured (the full run spec is in the run's manifest.json)."""

    prompts: str  # builtin:<name>, random, or the prompt file
    # SHA-256 of the prompt file (or built-in set) read: a rewritten file under the same name is
    # another workload; None for random prompts and in results written before it was recorded
    prompts_sha256: str | None = None
    num_prompts: int
    duration_s: float | None = None  # measure for this long instead of num_prompts requests
    concurrency: int | None  # requests in flight at most; None: an open loop without a cap
    request_rate: float | None = None  # open loop (req/s); None: closed loop
    burstiness: float = 1.0
    max_tokens: int
    input_len: int | None = None
    ignore_eos: bool = False
    warmup: int = 0
    api: str = "chat"
    temperature: float = 0.0
    seed: int = 0
    repeat: int = 1  # measurements of each load point
    noisy_ci: float = 0.10  # a figure whose 95% interval's half-width passes this x mean is noisy
    max_failed_fraction: float = 0.0  # failed requests past this share fail the measurement


class ParallelSettings(Frozen):
    """The server's parallel sizes (``engines/parallel.py``); ``RunSettings.gpu_count`` is the
    GPUs they use (tensor x pipeline x data; expert parallelism adds none)."""

    tensor: int
    pipeline: int = 1
    data: int = 1
    expert: int = 1


class RunSettings(Frozen):
    """What the run asked for. ``tensor_parallel`` and ``workload`` are None only in a result
    migrated from version 1 without its manifest.json beside it."""

    # "unknown": `orch loadgen` against a server whose /metrics names no engine orch knows
    engine: EngineName | Literal["unknown"]
    model: str
    speculative: SpeculativeSettings = Field(default_factory=SpeculativeSettings)
    tensor_parallel: int | None = None
    max_model_len: int | None = None
    workload: WorkloadSettings | None = None
    gpu_name: str | None = None  # the host's GPU model, as its driver names it; CPU_DEVICE
    gpu_count: int | None = None  # GPUs the server uses: the product of ``parallelism``
    parallelism: ParallelSettings | None = None  # None in results before schema 4
    gpu_ids: list[int] | None = None  # CUDA_VISIBLE_DEVICES orch gave it on a shared host

    @property
    def configuration(self) -> str:
        """Engine and speculative method ("vllm dflash", "sglang mtp", "vllm"): what the plot
        colours by, so two methods on one engine never look alike."""
        method = self.speculative.method
        return self.engine if method == "none" else f"{self.engine} {method}"


class RunTimes(Frozen):
    """When the run's phases happened (None for a phase it never reached), and their spans (s)."""

    started_at: Timestamp
    ready_at: Timestamp | None = None  # the server answered /health and /v1/models
    measure_started_at: Timestamp | None = None  # first measured request sent
    measure_ended_at: Timestamp | None = None  # last measured response ended
    ended_at: Timestamp
    duration_s: float | None = None
    server_start_s: float | None = None
    measure_s: float | None = None

    @classmethod
    def from_epoch(
        cls,
        *,
        started_at: float,
        ended_at: float,
        ready_at: float | None = None,
        measure_started_at: float | None = None,
        measure_ended_at: float | None = None,
    ) -> RunTimes:
        """From epoch seconds. Spans come from the exact times; the times keep milliseconds,
        as written, so a result and its reloaded file are equal."""

        def ms(ts: float) -> datetime:
            t = datetime.fromtimestamp(ts, timezone.utc)
            return t.replace(microsecond=t.microsecond // 1000 * 1000)

        def at(ts: float | None) -> datetime | None:
            return None if ts is None else ms(ts)

        def span(a: float | None, b: float | None) -> float | None:
            return round(b - a, 3) if a is not None and b is not None else None

        return cls(
            started_at=ms(started_at),
            ready_at=at(ready_at),
            measure_started_at=at(measure_started_at),
            measure_ended_at=at(measure_ended_at),
            ended_at=ms(ended_at),
            duration_s=span(started_at, ended_at),
            server_start_s=span(started_at, ready_at),
            measure_s=span(measure_started_at, measure_ended_at),
        )


class LoadPoint(Frozen):
    """Which load point of the run's sweep, and which repeat of it, a result measured.

    Every measurement of a run shares its server: the points of a sweep are measured in turn
    (``index`` is the point's place in that order; its repeats share it).
    """

    kind: Literal["concurrency", "request_rate"]
    value: float  # requests in flight (a whole number) or requests per second
    repeat: int = 1  # 1-based
    repeats: int = 1
    index: int = 0
    origin: Literal["sweep", "slo_search"] = "sweep"

    @property
    def label(self) -> str:
        """``c=8`` or ``rate=2.5``: how tables and folder names show the point."""
        if self.kind == "concurrency":
            return f"c={self.value:g}"
        return f"rate={self.value:g}"


class SloCheck(Frozen):
    """One service-level target at one measurement."""

    target: str  # normalised: "ttft_ms_p99 <= 2000"
    value: float | None  # the measured figure; None when it was not measured
    met: bool


class SloResult(Frozen):
    """The workload's SLO targets at one measurement, and its goodput: the requests per second
    that met every per-request target (a request's own TTFT, TPOT, ITL, end-to-end latency)."""

    checks: list[SloCheck]
    met: bool
    goodput: float | None = None
    goodput_fraction: float | None = None  # of the measured requests


class RunError(Frozen):
    """Why the run failed. ``cause``, ``exit_code`` and ``log_tail`` come from an engine that
    died or never got ready; ``kind`` from an error the host agent reported."""

    type: str  # the exception's class name: EngineError, HostUnreachable, AgentError ...
    message: str
    hint: str | None = None
    cause: str | None = None
    exit_code: int | None = None
    log_tail: list[str] = Field(default_factory=list)
    kind: str | None = None


class EngineLogFigures(Frozen):
    generation_throughput_mean: float | None = None  # tok/s the engine's own log printed
    log_events: dict[str, int] = Field(default_factory=dict)
    malformed_log_lines: int = 0


class LoadgenClientLag(Frozen):
    """The load generator's own lag figures over the whole run, warm-up included (ms)."""

    send_lag_ms: LagStats | None = None
    loop_delay_ms: LagStats | None = None
    loop_tick_ms: float | None = None  # the period of the ticker whose delay is measured


_RATES = ("achieved_request_rate", "scheduled_request_rate")


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class LoadgenInfo(LoadgenResult):
    """The load generator's account of the measured window: the wire's ``LoadgenResult``
    (declared once, in ``remote/wire.py``) as summary.json keeps it, plus the open-loop rates
    worked out here. Its client lag is the laxer ``LoadgenClientLag`` older agents wrote."""

    client_lag: LoadgenClientLag | None = None  # type: ignore[assignment]
    # raw /metrics text: written as files of its own, never into summary.json
    metrics_before: str | None = Field(default=None, exclude=True)
    metrics_after: str | None = Field(default=None, exclude=True)
    achieved_request_rate: float | None = None  # open loop: as sent
    scheduled_request_rate: float | None = None  # open loop: as due

    @model_serializer(mode="wrap")
    def _in_file_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The rates where summary.json always had them: after ``request_seeds``, in the place
        of the raw /metrics text the wire record holds there."""
        out: dict[str, Any] = handler(self)
        rates = {k: out.pop(k) for k in _RATES if k in out}
        keys = list(out)
        at = keys.index("request_seeds") + 1 if "request_seeds" in keys else len(keys)
        return {**{k: out[k] for k in keys[:at]}, **rates, **{k: out[k] for k in keys[at:]}}

    @classmethod
    def of(
        cls, loadgen: LoadgenResult, *, achieved: float | None, scheduled: float | None
    ) -> LoadgenInfo:
        """The wire record without its raw /metrics text and GPU samples (files of their own:
        metrics_*.txt, telemetry.csv), with the rates."""
        kept = {f.name: getattr(loadgen, f.name) for f in dataclasses.fields(LoadgenResult)}
        lag, telemetry = loadgen.client_lag, loadgen.telemetry
        kept.update(
            client_lag=None if lag is None else dataclasses.asdict(lag),
            metrics_before=None,
            metrics_after=None,
            telemetry=None if telemetry is None else dataclasses.replace(telemetry, samples=[]),
        )
        return cls(**kept, achieved_request_rate=achieved, scheduled_request_rate=scheduled)


class Provenance(Frozen):
    """Where the figures come from: the software, and the server.log lines the log's figures
    (acceptance, generation throughput) were read from, so they can be audited."""

    orch_version: str | None = None
    engine_version: str | None = None
    log_lines: tuple[int, int] | None = None  # first and last server.log line, 1-based
    migrated_from: int | None = None  # the schema_version the file was written with


class RunResult(Frozen):
    """One run's result: what ran, what it asked for, what was measured, what went wrong."""

    schema_version: Literal[5] = SCHEMA_VERSION
    run: RunIdentity
    settings: RunSettings
    times: RunTimes
    point: LoadPoint | None = None  # None only in an old file that did not record its workload
    error: RunError | None = None
    requests: RequestStats | None = None
    acceptance: AcceptanceResult | None = None
    engine_metrics: EngineLogFigures = Field(default_factory=EngineLogFigures)
    loadgen: LoadgenInfo | None = None
    energy: Energy | None = None  # from the GPU samples around the window (schema 5)
    roofline: RooflinePoint | None = None  # decode vs the GPUs' memory bandwidth (schema 5)
    collapse: CollapseVerdict | None = None
    engine_changes: list[FindingRecord] = Field(default_factory=list)  # settings it overrode
    doctor: list[FindingRecord] = Field(default_factory=list)  # errors and warnings only
    warnings: list[RunWarning] = Field(default_factory=list)  # results.validity's kinds
    provenance: Provenance = Field(default_factory=Provenance)
    slo: SloResult | None = None

    @property
    def not_run(self) -> bool:
        """Never measured: its host failed, or its engine died at an earlier load point."""
        return self.error is not None and self.error.type == NOT_RUN

    @property
    def verdict(self) -> Literal["failed", "collapse", "disagree", "ok"]:
        if self.error is not None:
            return "failed"
        if self.collapse is not None:
            return "collapse"
        if self.acceptance is not None and self.acceptance.disagrees:
            return "disagree"
        return "ok"

    def vllm_bench(self) -> VllmBench | None:
        return vllm_bench(self)

    def to_json(self) -> dict[str, JsonValue]:
        """What summary.json holds: the tree, then the vLLM-bench keys (when requests ran)."""
        out: dict[str, JsonValue] = self.model_dump(mode="json")
        bench = self.vllm_bench()
        if bench is not None:
            out.update(bench.model_dump(mode="json"))
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, object], *, manifest: Manifest | None = None) -> RunResult:
        """A result from summary.json's object, of any schema version this orch knows.

        ``manifest``: the run's manifest.json, which fills the settings a version-1 file lacks.
        """
        data = migrate(dict(obj), manifest=manifest)
        for key in VLLM_BENCH_KEYS:
            data.pop(key, None)
        return cls.model_validate(data)

    @classmethod
    def load(cls, path: Path | str) -> RunResult:
        """Read a run's summary.json; one older than the current schema is completed from the
        manifest.json beside it, if there is one (``ManifestError`` if that is no manifest)."""
        path = Path(path)
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            manifest = None
            if schema_version(obj) < SCHEMA_VERSION:
                found = load_manifest(path.with_name(MANIFEST_FILE))
                manifest = found if isinstance(found, Manifest) else None
            return cls.from_json(obj, manifest=manifest)
        except (OSError, ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
            raise ResultError(
                f"{path}: not a run result: {exc}",
                hint="summary.json files are written by `orch run`",
            ) from exc

    def masked(self, secrets: Iterable[str]) -> RunResult:
        """This result with secrets hidden in every string inside it: the run's own, and any
        value printed under a secret-looking name (``api_key='...'``), as ``mask`` does."""
        original = self.model_dump(mode="json")
        masked = cast(JsonValue, mask_json(original, Secrets.of(secrets)))
        # A secret may equal a value of a closed set ("--api-key log" vs acceptance source
        # "log"): such a field holds orch's own vocabulary, never a secret, so it is restored
        # rather than failing the run's result over it.
        for _ in range(_MAX_RESTORES):
            try:
                return RunResult.model_validate(masked)
            except ValidationError as exc:
                locations = [tuple(e["loc"]) for e in exc.errors()]
                if not all(_restore(masked, original, loc) for loc in locations):
                    raise
        return RunResult.model_validate(masked)


_MAX_RESTORES = 8


def _restore(masked: JsonValue, original: JsonValue, loc: tuple[int | str, ...]) -> bool:
    """Put ``original``'s value at ``loc`` back into ``masked``; False if that changes nothing
    (``loc`` is not there, or masking did not touch it: a real validation error)."""
    if not loc:
        return False
    target, source = masked, original
    for step in loc:
        container = target
        in_dict = isinstance(target, dict) and isinstance(source, dict) and step in source
        in_list = isinstance(target, list) and isinstance(source, list) and isinstance(step, int)
        if not (in_dict or in_list):
            return False
        target, source = target[step], source[step]  # type: ignore[index]
    if target == source:
        return False
    container[loc[-1]] = source  # type: ignore[index]
    return True
