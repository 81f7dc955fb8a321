"""The agent's wire contract: every verb's spec, result and streamed events, defined once.

The agent (this package, shipped as ``orch_remote``) and the controller (which imports it as
``orchestrator.remote.wire``) build and read the very same dataclasses, so neither side can
drift from the other; ``tests/golden/wire/`` pins the JSON of each verb and both sides are
tested against it.

Envelope: the agent writes one JSON object per line on stdout, each carrying ``"v":
CONTRACT_VERSION`` and an ``"event"`` name. Streamed events put their fields beside those two
keys (``{"v": 1, "event": "heartbeat", "offset": 12}``); the last line is
either ``{"v": 1, "event": "result", "data": {...}}`` or ``{"v": 1, "event": "error", "kind",
"message", "details"}``. The spec file the controller pushes is the spec's JSON plus ``"v"``
(and ``"keep_spec": true`` when the file must survive, for tests). Bump ``CONTRACT_VERSION``
with any change an older peer would misread; a controller meeting another version says so.

Standard library only, Python 3.9+ (see ``codec``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, NamedTuple, Optional, Tuple, Type, Union

from .codec import Wire as Wire
from .codec import WireError as WireError

CONTRACT_VERSION = 1
ENVELOPE_KEYS = ("v", "event")
DEFAULT_PACKAGES = ("vllm", "sglang", "torch", "transformers", "aiohttp")
DEFAULT_MODULES: Tuple[str, ...] = ()


class ErrorKind(str, enum.Enum):
    """Why a verb failed: the controller branches on these, never on message text."""

    BAD_SPEC = "bad_spec"
    BAD_USAGE = "bad_usage"
    UNKNOWN_VERB = "unknown_verb"
    INTERNAL = "internal"
    PYTHON_TOO_OLD = "python_too_old"
    CONTRACT_MISMATCH = "contract_mismatch"
    PORT_IN_USE = "port_in_use"
    GPU_BUSY = "gpu_busy"
    NOT_ENOUGH_GPUS = "not_enough_gpus"
    ALREADY_RUNNING = "already_running"
    ENGINE_NOT_FOUND = "engine_not_found"
    LAUNCH_FAILED = "launch_failed"
    NOT_FOUND = "not_found"
    BAD_OFFSET = "bad_offset"
    STOP_FAILED = "stop_failed"
    CHILD_FAILED = "child_failed"
    MISSING_DEPENDENCY = "missing_dependency"

    def __str__(self) -> str:
        return str(self.value)


class ContractMismatch(WireError):
    """A line (or spec) of another contract version than this side speaks."""

    def __init__(self, theirs: Any) -> None:
        self.theirs = theirs
        said = "no contract version" if theirs is None else f"contract v{theirs}"
        super().__init__(f"speaks {said}, this side speaks v{CONTRACT_VERSION}")


@dataclass(frozen=True)
class ErrorEvent(Wire):
    EVENT: ClassVar[str] = "error"
    kind: ErrorKind
    message: str
    details: Dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------- echo


@dataclass(frozen=True)
class EchoChild(Wire):
    """A child process to start with these argv items and environment values."""

    args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EchoSpec(Wire):
    payload: Any = None  # any JSON value, handed back as it arrived
    env_keys: List[str] = field(default_factory=list)
    child: Optional[EchoChild] = None


@dataclass(frozen=True)
class EchoChildResult(Wire):
    argv: List[str]
    env: Dict[str, Optional[str]]


@dataclass(frozen=True)
class EchoResult(Wire):
    payload: Any
    argv: List[str]
    env: Dict[str, Optional[str]]
    child: Optional[EchoChildResult] = None


# ---------------------------------------------------------------------------------- probe


@dataclass(frozen=True)
class ProbeSpec(Wire):
    workdir: str = "~"
    packages: List[str] = field(default_factory=lambda: list(DEFAULT_PACKAGES))
    ports: List[int] = field(default_factory=list)
    bind_host: str = "127.0.0.1"
    # modules a run imports in this interpreter (the engines):
    # found on its path or not, without importing them
    modules: List[str] = field(default_factory=lambda: list(DEFAULT_MODULES))


@dataclass(frozen=True)
class PythonInfo(Wire):
    version: str
    executable: str
    implementation: str


@dataclass(frozen=True)
class OsInfo(Wire):
    system: str
    kernel: str
    machine: str
    platform: str
    distro: Optional[str]
    distro_id: Optional[str]
    distro_version: Optional[str]


@dataclass(frozen=True)
class MemoryInfo(Wire):
    total_mib: Optional[int]
    available_mib: Optional[int]


@dataclass(frozen=True)
class DiskInfo(Wire):
    path: str
    free_gib: Optional[float]
    total_gib: Optional[float]
    error: Optional[str]


@dataclass(frozen=True)
class GpuProcess(Wire):
    pid: int
    process_name: Optional[str]
    used_memory_mib: Optional[int]


@dataclass(frozen=True)
class GpuInfo(Wire):
    index: int
    name: Optional[str]
    memory_total_mib: Optional[int]
    memory_used_mib: Optional[int]
    utilization_pct: Optional[int]
    uuid: Optional[str] = None
    driver_version: Optional[str] = None
    processes: List[GpuProcess] = field(default_factory=list)

    @property
    def free_mib(self) -> Optional[int]:
        if self.memory_total_mib is None or self.memory_used_mib is None:
            return None
        return self.memory_total_mib - self.memory_used_mib


@dataclass(frozen=True)
class NvidiaSmiStatus(Wire):
    available: bool
    error: Optional[str]
    warnings: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class PortsInfo(Wire):
    checked: List[int]
    free: List[int]
    bind_host: str
    holders: List["PortHolder"] = field(default_factory=list)  # who listens on a taken port


@dataclass(frozen=True)
class ProbeResult(Wire):
    python: PythonInfo
    os: OsInfo
    hostname: str
    cpu_count: Optional[int]
    memory: MemoryInfo
    disk: DiskInfo
    gpus: List[GpuInfo]
    driver_version: Optional[str]
    nvidia_smi: NvidiaSmiStatus
    packages: Dict[str, Optional[str]]
    ports: PortsInfo
    modules: Dict[str, bool] = field(default_factory=dict)  # importable by this interpreter
    machine_id: Optional[str] = None  # /etc/machine-id: two host entries, one machine
    workdir: Optional[str] = None  # the workdir's real path (symlinks and ~ resolved)


# ---------------------------------------------------------------------------- lifecycle


@dataclass(frozen=True)
class ExitRecord(Wire):
    """exit.json: how the engine ended, written by its supervisor."""

    pid: int
    returncode: int
    signal: Optional[str]
    ended_at: float


@dataclass(frozen=True)
class GpuCheck(Wire):
    checked: bool
    reason: Optional[str] = None  # why not, when not checked
    gpus: List[int] = field(default_factory=list)


@dataclass(frozen=True)
class LaunchSpec(Wire):
    run_id: str
    workdir: str
    argv: List[str]
    port: int
    env: Dict[str, str] = field(default_factory=dict)
    gpus_needed: int = 0
    gpu_busy_threshold_mib: int = 1024
    cwd: Optional[str] = None
    # the GPUs (nvidia-smi indices) orch gives the run on a shared host: the agent sets
    # CUDA_VISIBLE_DEVICES to them and checks only them; None: the first gpus_needed
    gpu_ids: Optional[List[int]] = None


@dataclass(frozen=True)
class ServerRecord(Wire):
    """server.json: the engine's identity (pid + start ticks + boot id) and where it logs."""

    run_id: str
    pid: int
    pgid: int
    supervisor_pid: int
    argv: List[str]
    requested_argv: List[str]
    env_keys: List[str]
    port: int
    cwd: str
    log: str
    started_at: float
    start_ticks: Optional[int]
    boot_id: Optional[str]


@dataclass(frozen=True)
class LaunchResult(ServerRecord):
    log_offset: int  # where this launch's output starts in server.log
    gpu_check: GpuCheck


@dataclass(frozen=True)
class HoldSpec(Wire):
    """``hold``: the batch step of a Slurm job. It waits for the launch spec the controller
    writes at ``launch_spec`` once the job runs, launches the engine from it (as ``launch``
    does), and stays until the engine exits, so the engine lives in the job's own step."""

    launch_spec: str
    wait_s: float = 600.0  # no launch spec by then: the controller is gone, give the GPUs back
    # after the engine exits the job stays (its steps would be killed with it: the controller's
    # stop, the tail reading the last log lines) until the controller cancels it, or this long
    linger_s: float = 300.0


@dataclass(frozen=True)
class HoldLaunched(Wire):
    """The engine is up: what ``launch`` would have answered."""

    EVENT: ClassVar[str] = "launched"
    launch: LaunchResult


@dataclass(frozen=True)
class HoldResult(Wire):
    """How the hold ended: the engine's exit (``exit``), or why it never launched one."""

    launched: bool
    reason: str  # "engine exited" | "no launch spec" | "signalled"
    exit: Optional[ExitRecord] = None


@dataclass(frozen=True)
class PortHolder(Wire):
    """A process listening on the server's port (its command line's secret values masked)."""

    pid: int
    cmdline: str
    launched: bool  # in the launched engine's session, process group or process tree
    port: Optional[int] = None  # which port (a probe asks about several)
    user: Optional[str] = None  # the process's owner, so a person knows whom to ask
    run_id: Optional[str] = None  # set when the process is an orch server: that run's id


@dataclass(frozen=True)
class ServerState(ServerRecord):
    alive: bool
    group_pids: List[int]
    exit: Optional[ExitRecord]
    returncode: Optional[int]
    log_size: Optional[int]
    uptime_s: Optional[float]
    # Who answers 127.0.0.1:<port>: "launched" (the engine this record describes), "foreign"
    # (another process listens there), "none" (nobody yet), "unknown" (no /proc to tell);
    # None when not checked (a server long gone, in a listing of every run).
    port_owner: Optional[str] = None
    port_holders: List[PortHolder] = field(default_factory=list)
    stop: Optional["StopRecord"] = None  # someone stopped it on purpose (`orch stop`)


@dataclass(frozen=True)
class StatusSpec(Wire):
    workdir: str
    run_id: Optional[str] = None
    all: bool = False


@dataclass(frozen=True)
class StatusResult(Wire):
    servers: List[ServerState]
    machine_id: Optional[str] = None  # as in ProbeResult: which host entries share a workdir
    workdir: Optional[str] = None


@dataclass(frozen=True)
class TailSpec(Wire):
    workdir: str
    run_id: str
    offset: int = 0
    follow: bool = False
    until_exit: bool = False
    idle_timeout_s: Optional[float] = None
    poll_interval_s: float = 0.1


@dataclass(frozen=True)
class TailLines(Wire):
    """Consecutive complete lines of server.log, as many as one read of the log gave: one event
    per read, not per line, so a burst of thousands of lines costs a few events on each side."""

    EVENT: ClassVar[str] = "lines"
    offset: int  # byte offset of the first line's start in server.log
    next: int  # just past the last one: where a resumed tail starts
    lines: List[str]  # without their line ends, undecodable bytes as U+FFFD


@dataclass(frozen=True)
class TailHeartbeat(Wire):
    EVENT: ClassVar[str] = "heartbeat"
    offset: int


@dataclass(frozen=True)
class TailResult(Wire):
    offset: int
    reason: str  # "eof" | "exited" | "idle_timeout" | "orphaned"
    exit: Optional[ExitRecord]


@dataclass(frozen=True)
class StopSpec(Wire):
    """``timeout_s``: the grace between SIGTERM and SIGKILL. ``linger_s``: once the engine's
    port has closed, the longest wait for its processes to exit (an engine hung on an open
    stream after closing its listener); ``timeout_s`` caps it. ``requested_by``: who asked
    (``orch stop``: "user@controller"), recorded in ``stop.json`` before the SIGTERM so the
    interrupted run can say why its server died; None when a run stops its own server.
    ``wait_gpus``: wait (up to ``gpu_timeout_s``) for the engine's GPU memory to be freed;
    False on a CPU host (``gpus: none``), whose engines hold none."""

    workdir: str
    run_id: Optional[str] = None
    all: bool = False
    timeout_s: float = 30.0
    gpu_timeout_s: float = 60.0
    linger_s: float = 5.0
    requested_by: Optional[str] = None
    wait_gpus: bool = True


@dataclass(frozen=True)
class StopRecord(Wire):
    """stop.json: a server stopped on purpose (``orch stop``), written before its SIGTERM."""

    by: str
    at: float
    grace_s: float


@dataclass(frozen=True)
class StopOutcome(Wire):
    run_id: Optional[str]
    pid: Optional[int]
    was_running: bool
    signals: List[str]
    killed_pids: List[int]
    remaining_pids: List[int]
    gpu_pids: List[int]
    gpu_released: Optional[bool]  # None: not asked (no nvidia-smi, or a CPU host)
    exit: Optional[ExitRecord]
    waited_s: float


@dataclass(frozen=True)
class StopResult(Wire):
    stopped: List[StopOutcome]


# --------------------------------------------------------------------------------- prune


@dataclass(frozen=True)
class PruneSpec(Wire):
    """Remove finished runs' folders (``runs/<id>/``) from the workdir; a live server's never.

    ``older_than_s``: only runs that ended at least that long ago; ``keep``: spare the ``keep``
    most recently ended finished runs; neither: every finished run. Spec files left in
    ``specs/`` longer than ``stale_spec_s`` (an agent that never ran to read them) go too.

    ``jobs``: the workdir is a Slurm cluster's, seen from its login node: runs are its job
    folders (``jobs/<id>/``), whose engines ran on other machines, so no process says whether
    one is live: those in ``live`` (the jobs still in Slurm's queue) are, and a folder without
    a server record yet that changed lately (a job just submitted).
    """

    workdir: str
    older_than_s: Optional[float] = None
    keep: Optional[int] = None
    dry_run: bool = False
    stale_spec_s: float = 86400.0
    jobs: bool = False
    live: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class PrunedRun(Wire):
    run_id: str
    ended_at: Optional[float]  # epoch s; None when nothing says
    bytes: int
    removed: bool  # False in a dry run, or when removing failed (``error``)
    error: Optional[str] = None


@dataclass(frozen=True)
class PruneResult(Wire):
    pruned: List[PrunedRun]  # what was (or, dry run, would be) removed
    kept: List[str]  # finished runs spared by ``older_than_s`` / ``keep``
    live: List[str]  # runs whose server is running (or starting): never touched
    specs_removed: List[str]
    dry_run: bool
    machine_id: Optional[str] = None
    workdir: Optional[str] = None


# ---------------------------------------------------------------------------------- http


@dataclass(frozen=True)
class HttpSpec(Wire):
    port: int
    path: str
    method: str = "GET"
    headers: Dict[str, str] = field(default_factory=dict)
    body: Any = None  # a string, or a JSON object/array sent as application/json
    timeout_s: float = 10.0


@dataclass(frozen=True)
class HttpResult(Wire):
    status: Optional[int]  # None when no HTTP answer came (then ``error`` says why)
    headers: Dict[str, str]
    body: str
    error: Optional[str]


# ------------------------------------------------------------------------------- loadgen


@dataclass(frozen=True)
class PromptSource(Wire):
    kind: str  # "list" | "random"
    items: List[Any] = field(default_factory=list)  # str or {"messages": [...]}
    input_len: Optional[int] = None
    num: Optional[int] = None
    tokenizer: Optional[str] = None
    range_ratio: float = 0.0


@dataclass(frozen=True)
class CacheResetSpec(Wire):
    """Empty the engine's prefix cache before the first request (vLLM ``POST
    /reset_prefix_cache``, SGLang ``/flush_cache``). Asked again every ``retry_interval_s`` while
    the engine refuses (HTTP 400, or 200 with ``{"success": false}``), for ``timeout_s`` at most."""

    path: str
    method: str = "POST"
    timeout_s: float = 30.0
    retry_interval_s: float = 0.2


class GpuSample(NamedTuple):
    """One GPU at one moment (``telemetry``); on the wire a list in this order (a window holds
    thousands).

    ``t`` is epoch seconds (the load generator's window is too); ``energy_mj`` the driver's
    counter (mJ, monotonic; None without one); ``reasons`` the clock-event bits
    (``telemetry.REASONS``). A field the GPU or driver does not offer is None."""

    t: float
    gpu: int
    energy_mj: Optional[int]
    power_w: Optional[float]
    sm_mhz: Optional[int]
    mem_mhz: Optional[int]
    mem_used_mib: Optional[int]
    util_pct: Optional[int]
    temp_c: Optional[int]
    reasons: Optional[int]


@dataclass(frozen=True)
class TelemetrySpec(Wire):
    """Sample these GPUs (nvidia-smi's indices) while ``loadgen`` runs."""

    gpus: List[int]
    interval_s: float = 0.1
    library: Optional[str] = None  # the NVML library; None: libnvidia-ml.so.1
    # the engine's process group: any other process computing on these GPUs is named (its
    # energy is in the window's); None: not looked for
    engine_pgid: Optional[int] = None


@dataclass(frozen=True)
class TelemetryResult(Wire):
    """The samples from the verb's start to its end; ``source`` None (and ``error`` why) when
    neither NVML nor nvidia-smi could be read. ``thin`` > 1: only every thin-th read was kept
    (a long run), so the samples stay bounded."""

    source: Optional[str]  # "nvml" | "nvidia-smi"
    interval_s: float
    samples: List[GpuSample] = field(default_factory=list)
    power_limit_w: Dict[str, float] = field(default_factory=dict)  # GPU index -> W
    error: Optional[str] = None
    read_errors: List[str] = field(default_factory=list)
    cpu_s: float = 0.0  # the sampler thread's own CPU time
    thin: int = 1
    # processes outside the engine's process group computing on the sampled GPUs at the
    # window's start or end, "GPU index" -> pids; None: not looked for (no engine_pgid, or
    # nvidia-smi, which cannot tell them cheaply)
    foreign_pids: Optional[Dict[str, List[int]]] = None


@dataclass(frozen=True)
class LoadgenSpec(Wire):
    """See ``loadgen`` for what each setting does."""

    model: str
    prompts: PromptSource
    base_url: Optional[str] = None
    port: Optional[int] = None
    api: str = "chat"
    num_prompts: Optional[int] = None
    duration_s: Optional[float] = None
    concurrency: Optional[int] = None
    request_rate: Optional[float] = None
    burstiness: float = 1.0
    ramp_s: Optional[float] = None  # closed loop: first wave spread over this; None: default
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    ignore_eos: bool = False
    chat_template_kwargs: Optional[Dict[str, Any]] = None
    warmup: int = 0
    seed: Optional[int] = 0
    timeout_s: float = 600.0
    api_key: Optional[str] = None
    tokenizer: Optional[str] = None
    continuous_usage_stats: bool = True
    metrics_path: Optional[str] = None
    progress_interval_s: float = 2.0
    cache_reset: Optional[CacheResetSpec] = None
    telemetry: Optional[TelemetrySpec] = None


@dataclass(frozen=True)
class PhaseEvent(Wire):
    EVENT: ClassVar[str] = "phase"
    phase: str  # "warmup" | "measure"


@dataclass(frozen=True)
class ProgressEvent(Wire):
    EVENT: ClassVar[str] = "progress"
    phase: str
    done: int
    failed: int
    in_flight: int
    tok_s: float  # tokens streamed over the last interval, per second
    elapsed_s: float
    # the GPUs' latest read (telemetry), None when they are not sampled: board power of all the
    # run's GPUs together, and their mean SM clock
    gpu_power_w: Optional[float] = None
    gpu_sm_mhz: Optional[float] = None


class Chunk(NamedTuple):
    """One SSE chunk that carried output tokens: arrival (s after the request was sent), tokens.

    On the wire a ``[t, tokens]`` pair: a record holds hundreds of them.
    """

    t: float
    tokens: int


class RequestFailure(str, enum.Enum):
    """Why a request did not complete: the verdict and the summaries count these kinds.

    A request is completed only when the engine said so (``finish_reason`` stop/length or the
    engine's equivalent, and under ``ignore_eos`` with the tokens it was asked for) and its
    token counts agree; anything else is one of these, its timings kept out of every statistic.
    """

    HTTP_STATUS = "http_status"  # an answer other than 200
    CONNECTION = "connection"  # no connection, or it broke before the response ended
    TIMEOUT = "timeout"  # the request's timeout_s passed
    ABORTED = "aborted"  # a finish_reason that is not a completion ("abort", "error")
    SHORT_OUTPUT = "short_output"  # ignore_eos and fewer tokens than max_tokens
    NO_FINISH = "no_finish"  # the stream ended without any finish_reason
    ERROR_EVENT = "error_event"  # an SSE error event or error object in the stream
    PROTOCOL = "protocol"  # bytes after [DONE], unparseable data, no [DONE]
    TOKEN_COUNT_MISMATCH = "token_count_mismatch"  # counted vs usage vs max_tokens disagree
    NO_OUTPUT = "no_output"  # completed without a single output token

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class RequestRecord(Wire):
    """One request as the load generator saw it, failed ones too.

    Seconds: ``due``/``begun``/``start``/``end`` from the load generator's start (monotonic),
    ``start_wall`` epoch, ``ttft``/``e2el`` and chunk times from the request's own start.
    ``start`` is when the request was sent (its last byte handed to the kernel; when it never
    was, when the client took it up), ``begun`` when the client took it up: ``start - begun``
    is the time spent getting a connection and writing. ``end``: the response's last byte.
    ``status`` is None when no HTTP response came; ``error`` None when it completed.
    ``finish_reason`` is what the engine said (SGLang's ``{"type": ...}`` read as its type);
    ``failure`` why it did not complete (None: completed), ``error`` the same for people.
    """

    EVENT: ClassVar[str] = "record"
    index: int
    warmup: bool
    start: float
    start_wall: float
    end: float
    due: Optional[float] = None
    status: Optional[int] = None
    ttft: Optional[float] = None
    e2el: Optional[float] = None
    chunks: Tuple[Chunk, ...] = ()
    output_tokens: Optional[int] = None
    usage_reported: bool = True
    prompt_tokens: Optional[int] = None
    token_count_method: Optional[str] = None  # "usage" | "tokenizer" | "chunk" | None
    error: Optional[str] = None
    begun: Optional[float] = None
    finish_reason: Optional[str] = None
    failure: Optional[RequestFailure] = None

    @property
    def ok(self) -> bool:
        """Completed: no failure kind (and, for records written before kinds existed, HTTP 200,
        at least one token and no error)."""
        return (
            self.failure is None and self.error is None and self.status == 200 and bool(self.chunks)
        )

    @property
    def send_lag(self) -> Optional[float]:
        """How late the client sent this request (s) compared with when it was due."""
        return None if self.due is None else max(0.0, self.start - self.due)


@dataclass(frozen=True)
class LagStats(Wire):
    """Milliseconds; every figure None when there were no samples."""

    n: int
    mean: Optional[float]
    p50: Optional[float]
    p99: Optional[float]
    max: Optional[float]


@dataclass(frozen=True)
class ClientLag(Wire):
    send_lag_ms: LagStats  # how late requests were sent compared with when they were due
    loop_delay_ms: LagStats  # how late the event loop woke up while requests streamed
    loop_tick_ms: float


@dataclass(frozen=True)
class LoadgenResult(Wire):
    """Counts, the measured window (epoch s) and the client's own lag."""

    requests: int
    completed: int
    failed: int
    duration_s: float
    started_at: Optional[float] = None  # first measured request sent
    ended_at: Optional[float] = None  # last measured response ended
    warmup: int = 0
    output_tokens: int = 0
    mode: str = "closed"
    concurrency: Optional[int] = None
    request_rate: Optional[float] = None
    burstiness: Optional[float] = None
    ramp_s: Optional[float] = None  # closed loop: the first wave went out over this many s
    client_lag: Optional[ClientLag] = None
    token_count_method: Optional[str] = None  # "usage" | "tokenizer" | "chunk" | "mixed"
    token_count_methods: Dict[str, int] = field(default_factory=dict)
    prompt_source: Optional[str] = None  # "list" | "random:tokens" | "random:words"
    # random prompts: True when every one is exactly input_len tokens; False when the host had
    # no tokenizer (lengths in words) or some missed; None for a prompt list or file
    input_len_exact: Optional[bool] = None
    random_prompts: Optional[int] = None
    random_prompts_exact: Optional[int] = None
    request_seeds: Optional[bool] = None  # requests carried a per-request sampling seed
    metrics_before: Optional[str] = None
    metrics_after: Optional[str] = None
    cache_reset: Optional[str] = None  # "ok" | "failed: <why>"; None when not asked
    event_loop: Optional[str] = None  # the client's loop and JSON parser: "asyncio, json"...
    # "kernel": chunk times are the kernel's receive timestamps; "loop": when the client read
    # them (https, another OS); "mixed"
    arrival_clock: Optional[str] = None
    reconciled: int = 0  # completed requests whose counted tokens were checked against usage
    token_count_mismatches: int = 0  # requests failed as token_count_mismatch
    cap_waits: int = 0  # open loop: measured requests its concurrency cap held back
    telemetry: Optional[TelemetryResult] = None  # None when the spec asked for none


# ---------------------------------------------------------------------- read_model_configs


@dataclass(frozen=True)
class ModelRef(Wire):
    id: str
    path: Optional[str] = None  # a local directory; else the id, else the HF cache


@dataclass(frozen=True)
class ReadModelConfigsSpec(Wire):
    models: List[ModelRef]
    hf_home: Optional[str] = None


@dataclass(frozen=True)
class ModelFiles(Wire):
    id: str
    path: Optional[str]
    found: bool
    config: Optional[Dict[str, Any]]
    tokenizer_config: Optional[Dict[str, Any]]
    generation_config: Optional[Dict[str, Any]]
    chat_template: Optional[str]
    error: Optional[str]


@dataclass(frozen=True)
class ReadModelConfigsResult(Wire):
    models: Dict[str, ModelFiles]


# ------------------------------------------------------------------------------ contract

TailEvent = Union[TailLines, TailHeartbeat, TailResult]
LoadgenEvent = Union[PhaseEvent, ProgressEvent, RequestRecord, LoadgenResult]


@dataclass(frozen=True)
class VerbContract:
    """One verb, declared once: what both sides wire from (see "How to add a verb" in
    docs/ARCHITECTURE.md).

    ``handler``: the agent's ``module:function`` (imported only when the verb is called).
    ``timeout_s``: a quick verb's deadline for the whole call; a stream's (``events``) for the
    silence between two lines. ``session``: whether the controller may send it over the
    session agent (``serve``) instead of starting a process for it; first contact (echo, probe)
    and the long-lived streams stay one process per call. ``retry_safe``: it only reads, so a
    call cut by a dropped session is sent again once as its own process.
    """

    spec: Type[Wire]
    result: Type[Wire]
    events: Tuple[Type[Wire], ...] = ()
    handler: str = ""
    timeout_s: Optional[float] = None
    session: bool = False
    retry_safe: bool = False

    @property
    def streaming(self) -> bool:
        return bool(self.events)


# fmt: off
CONTRACT: Dict[str, VerbContract] = {
    "echo": VerbContract(EchoSpec, EchoResult, handler="echo:run", timeout_s=60.0),
    "probe": VerbContract(ProbeSpec, ProbeResult, handler="probe:run", timeout_s=120.0),
    "launch": VerbContract(
        LaunchSpec, LaunchResult, handler="lifecycle:launch", timeout_s=120.0, session=True
    ),
    "hold": VerbContract(HoldSpec, HoldResult, (HoldLaunched,), handler="hold:run"),
    "tail": VerbContract(
        TailSpec, TailResult, (TailLines, TailHeartbeat), handler="lifecycle:tail", timeout_s=60.0
    ),
    "stop": VerbContract(
        StopSpec, StopResult, handler="lifecycle:stop", timeout_s=180.0, session=True
    ),
    "prune": VerbContract(PruneSpec, PruneResult, handler="prune:run", session=True),
    "status": VerbContract(
        StatusSpec, StatusResult, handler="lifecycle:status", timeout_s=60.0, session=True,
        retry_safe=True,
    ),
    "http": VerbContract(HttpSpec, HttpResult, handler="http:run", timeout_s=60.0, session=True),
    "loadgen": VerbContract(
        LoadgenSpec, LoadgenResult, (PhaseEvent, ProgressEvent, RequestRecord),
        handler="loadrunner:run", timeout_s=600.0,
    ),
    "read_model_configs": VerbContract(
        ReadModelConfigsSpec, ReadModelConfigsResult, handler="modelfiles:run", timeout_s=120.0,
        session=True, retry_safe=True,
    ),
}
# fmt: on

# The session agent: ``<agent.pyz> serve <tag>`` reads request frames on stdin and answers
# each with its lines tagged by the request's id (``remote/session.py``). Not a verb of its own
# in CONTRACT: it carries them. An agent without it answers ``unknown_verb``.
SERVE_VERB = "serve"


def request_frame(request_id: int, verb: str, spec: Wire) -> Dict[str, Any]:
    """One request of a session: its id, its verb and the spec as a spec file would hold it."""
    return {"id": request_id, "verb": verb, "spec": spec_file(spec)}


def event_name(event: Wire) -> str:
    name = getattr(type(event), "EVENT", None)
    if not isinstance(name, str) or name in ("result", "error"):
        raise WireError(f"{type(event).__name__} is not a streamed event type")
    return name


def event_line(event: Wire) -> Dict[str, Any]:
    """The JSON line of a streamed event: its fields beside the envelope keys."""
    return {"v": CONTRACT_VERSION, "event": event_name(event), **event.to_json()}


def result_line(result: Wire) -> Dict[str, Any]:
    return {"v": CONTRACT_VERSION, "event": "result", "data": result.to_json()}


def error_line(error: ErrorEvent) -> Dict[str, Any]:
    return {"v": CONTRACT_VERSION, "event": "error", **error.to_json()}


def spec_file(spec: Wire, *, keep_spec: bool = False) -> Dict[str, Any]:
    """What the controller writes into the spec file of one call."""
    out: Dict[str, Any] = {"v": CONTRACT_VERSION, **spec.to_json()}
    if keep_spec:
        out["keep_spec"] = True
    return out


def decode_line(verb: str, obj: Dict[str, Any]) -> Tuple[str, Wire]:
    """One line of ``verb``'s output -> (event name, typed object).

    ContractMismatch when the line carries another contract version; WireError when it does not
    fit the contract.
    """
    if obj.get("v") != CONTRACT_VERSION:
        raise ContractMismatch(obj.get("v"))
    name = obj.get("event")
    body = {k: v for k, v in obj.items() if k not in ENVELOPE_KEYS}
    if name == "error":
        return name, ErrorEvent.from_json(body)
    contract = CONTRACT.get(verb)
    if contract is None:
        raise WireError(f"no verb {verb!r} in contract v{CONTRACT_VERSION}")
    if name == "result":
        if set(body) != {"data"}:
            raise WireError(f"{verb} result line: expected only 'data' besides v and event")
        return name, contract.result.from_json(body["data"])
    for event_type in contract.events:
        if getattr(event_type, "EVENT", None) == name:
            return str(name), event_type.from_json(body)
    raise WireError(f"{verb}: unknown event {name!r}")
