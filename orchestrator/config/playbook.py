"""Playbooks: which engines, models and speculative settings to benchmark, on which hosts, how.

``defaults`` are deep-merged into every run before it is validated, and ``matrix`` expands a run
over lists of values; both are done on the YAML node trees, so an error in a merged or expanded
run still points at the line where the offending value was written.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_origin

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)
from yaml.nodes import MappingNode, Node, SequenceNode

from orchestrator.config import nightly_terms as terms
from orchestrator.config.errors import did_you_mean, unwrap, validate
from orchestrator.config.hostconfig import HostConfig, expand_env
from orchestrator.config.inventory import (
    EnvDict,
    Inventory,
    ScalarStr,
    Selectors,
    StrictModel,
    name_check,
)
from orchestrator.config.methods import EngineName, SpeculativeMethod
from orchestrator.config.nightly_terms import POSITION, POSITION_PREFIX, metric
from orchestrator.config.slo import THROUGHPUTS, SloTarget, parse_target
from orchestrator.config.yamlload import (
    Document,
    Mark,
    child,
    load_yaml,
    merge_nodes,
    replace_at,
    to_python,
)
from orchestrator.errors import ConfigError

Positive = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0)]
Port = Annotated[int, Field(ge=1, le=65535)]
ArgList = Annotated[
    list[ScalarStr], WithJsonSchema({"type": "array", "items": {"type": ["string", "number"]}})
]


class SpeculativeSpec(StrictModel):
    """Speculative decoding. ``num_draft_tokens`` means tokens drafted per step, whatever the engine calls it."""

    method: SpeculativeMethod = Field(
        "none", description="none, dflash, mtp, eagle, eagle3, ngram or draft_model."
    )
    draft_model: str | None = Field(
        None, description="Drafter model id or path (dflash, eagle, eagle3, draft_model)."
    )
    num_draft_tokens: Positive | None = Field(
        None, description="Tokens drafted per step (vLLM num_speculative_tokens; SGLang num-steps)."
    )
    draft_tensor_parallel: Positive | None = Field(
        None, description="Tensor parallel size of the drafter."
    )
    prompt_lookup_min: Positive | None = Field(None, description="ngram: shortest n-gram to match.")
    prompt_lookup_max: Positive | None = Field(None, description="ngram: longest n-gram to match.")
    eagle_topk: Positive | None = Field(
        None, description="EAGLE tree top-k (SGLang --speculative-eagle-topk)."
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Method-specific knobs passed through to the engine's speculative config.",
    )

    @model_validator(mode="after")
    def _lookup_range(self) -> SpeculativeSpec:
        low, high = self.prompt_lookup_min, self.prompt_lookup_max
        if low is not None and high is not None and low > high:
            raise ValueError(f"prompt_lookup_min ({low}) must be <= prompt_lookup_max ({high})")
        return self


_BUILTIN = re.compile(r"builtin:[A-Za-z0-9_.-]+")
_NULL_TAG = "tag:yaml.org,2002:null"


class SloSpec(StrictModel):
    """Service-level targets, checked at every load point, and an optional search for the
    highest load that meets them all."""

    targets: Annotated[list[str], Field(min_length=1)] = Field(
        description="'<metric> <= <number>' (latencies, e.g. ttft_ms_p99 <= 2000) or"
        f" '<metric> >= <number>' ({', '.join(THROUGHPUTS)})."
    )
    search: Literal["concurrency", "request_rate"] | None = Field(
        None, description="Find the highest concurrency or request rate meeting every target."
    )
    range: tuple[PositiveFloat, PositiveFloat] | None = Field(
        None, description="[low, high]: where the search looks (inclusive)."
    )
    max_points: Annotated[int, Field(ge=2, le=64)] = Field(
        8, description="Measurements the search may make at most."
    )

    @field_validator("targets")
    @classmethod
    def _parse_targets(cls, value: list[str]) -> list[str]:
        return [str(parse_target(text)) for text in value]

    @model_validator(mode="after")
    def _search_range(self) -> SloSpec:
        if self.search is not None and self.range is None:
            raise ValueError("slo.search needs range: [low, high]")
        if self.range is not None and self.range[0] >= self.range[1]:
            raise ValueError(f"slo.range {list(self.range)}: low must be below high")
        return self

    @property
    def parsed(self) -> list[SloTarget]:
        return [parse_target(text) for text in self.targets]


def _fraction(name: str, value: object) -> float:
    """``"5%"`` or ``0.05`` as 0.05 (a failure rate's threshold is a difference: 0.01)."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            number = float(value.strip()[:-1]) / 100
        except ValueError:
            number = float("nan")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        number = float("nan")
    if not (number >= 0 and number != float("inf")):
        raise ValueError(
            f"threshold of {name}: {value!r} is not a percentage ('5%') or a fraction (0.05)"
        )
    return number


def _metric_name(name: str) -> str:
    """A threshold's key: a metric the nightly watches, or ``acceptance_pos`` (every position)."""
    if name != POSITION_PREFIX.rstrip("_"):
        metric(name)  # ValueError naming the metrics it knows
    return name


def _threshold(entry: object) -> object:
    """One threshold, ``(metric, as written)`` (see ``NightlySpec._named``), as a number.

    Each rule here stops a threshold that would silently never alarm: a bare 5 is 500%, not
    5%; a figure that is better higher cannot fall by 100% (an alarm it can never reach),
    while a latency may well grow by 300% (4x); a failure rate's threshold is a rise in the
    share of failed requests, so it lies strictly between 0 and 1.
    """
    if not isinstance(entry, tuple):
        return entry  # not through _named: the float check says what is wrong
    name, value = entry
    number = _fraction(name, value)
    if not isinstance(value, str) and number >= 1:
        raise ValueError(
            f"threshold of {name}: {value!r} as a fraction is {number * 100:g}%: "
            f"write '{number:g}%' or {number / 100:g}"
        )
    try:
        watched = metric(name)
    except ValueError:
        watched = POSITION  # acceptance_pos, or an unknown name its key's error tells
    if watched.absolute and not 0 < number < 1:
        raise ValueError(
            f"threshold of {name}: {value!r} must be above 0 and below 1 (100%): it is the "
            "rise in the share of failed requests, e.g. '1%' or 0.01"
        )
    if watched.direction == "higher" and number >= 1:
        raise ValueError(
            f"threshold of {name}: {value!r} can never be exceeded: {name} is better higher "
            "and cannot fall by 100% or more, so it would never alarm; give less than 100%"
        )
    return number


MetricName = Annotated[str, AfterValidator(_metric_name)]
Threshold = Annotated[
    float,
    BeforeValidator(_threshold),
    WithJsonSchema({"type": ["string", "number"]}),
]


def cluster_hosts(inventory: Inventory, selectors: Sequence[str] | None) -> list[HostConfig]:
    """The clusters ``selectors`` name (by name or tag), as the hosts runs go to. ``all`` and
    no selector mean every host, never a cluster: a playbook submits jobs only where told."""
    if not selectors or "all" in selectors:
        return []
    return [cluster.as_host() for cluster in inventory.select_clusters(list(selectors))]


class SlurmSpec(StrictModel):
    """How this playbook's runs use Slurm clusters (ignored on hosts)."""

    max_allocations: Annotated[int, Field(ge=1, le=64)] = Field(
        4,
        description="Runs under way on one cluster at once, each in an allocation of its own "
        "(Slurm serialises them further when the GPUs are not free).",
    )
    pending_timeout_s: Annotated[float, Field(gt=0)] = Field(
        3600.0,
        description="Seconds a run's allocation may wait in the queue; then it is cancelled and"
        " the run recorded as not run, with Slurm's reason (Resources, Priority ...).",
    )


class NightlySpec(StrictModel):
    """How `orch nightly` judges a night of this playbook (defaults: the nightly's own)."""

    baseline_nights: Annotated[int, Field(ge=1, le=365)] = Field(
        terms.BASELINE_NIGHTS,
        description="The baseline: the median of this many last nights that count; their "
        "spread is how far nights ordinarily move.",
    )
    min_baseline_nights: Annotated[int, Field(ge=1, le=365)] = Field(
        terms.MIN_BASELINE_NIGHTS, description="Fewer nights that count: insufficient_data."
    )
    min_repeats: Annotated[int, Field(ge=2)] = Field(
        terms.MIN_REPEATS,
        description="Fewer values in a night (workload.repeat): insufficient_data.",
    )
    alpha: Annotated[float, Field(gt=0, lt=1)] = Field(
        terms.ALPHA,
        description="p below which one night past the threshold is suspicious (against how "
        "far nights ordinarily move).",
    )
    confirm_alpha: Annotated[float, Field(gt=0, lt=1)] = Field(
        terms.CONFIRM_ALPHA,
        description="p below which each of two nights in a row past the threshold makes a "
        "regression.",
    )
    run_alpha: Annotated[float, Field(gt=0, lt=1)] = Field(
        terms.RUN_ALPHA,
        description="p below which 3 or more recent nights together (their mean, the worst "
        "left out) make a regression.",
    )
    run_nights: Annotated[int, Field(ge=2, le=365)] = Field(
        terms.RUN_NIGHTS, description="The longest run of recent nights tested together."
    )
    drift_nights: Annotated[int, Field(ge=10, le=365)] = Field(
        terms.DRIFT_NIGHTS, description="The nights a slow trend (drift) is looked for over."
    )
    drift_alpha: Annotated[float, Field(gt=0, lt=1)] = Field(
        terms.DRIFT_ALPHA,
        description="Kendall's one-sided p below which a trend past the threshold is a drift.",
    )
    thresholds: dict[MetricName, Threshold] = Field(
        default_factory=dict,
        description="Practical threshold per metric, as '5%' or 0.05 (failure_rate: an absolute"
        " rise, e.g. 0.01); acceptance_pos sets every draft position. Defaults: 5% throughput"
        " and acceptance, 10% latency, 0.01 failure rate. Below 100% for throughput and"
        " acceptance; a latency's may be more ('300%' = 4x).",
    )

    @field_validator("thresholds", mode="before")
    @classmethod
    def _named(cls, value: object) -> object:
        """Each value with its metric's name: a value's rules depend on its metric, and an
        error raised for the value is told at the value's own line (one raised for the whole
        mapping would point at the mapping)."""
        if not isinstance(value, dict):
            return value
        return {name: (str(name), raw) for name, raw in value.items()}

    @model_validator(mode="after")
    def _enough(self) -> NightlySpec:
        if self.min_baseline_nights > self.baseline_nights:
            raise ValueError(
                f"min_baseline_nights {self.min_baseline_nights} is above baseline_nights "
                f"{self.baseline_nights}"
            )
        return self


class WorkloadSpec(StrictModel):
    """The load driven against the server once it is ready."""

    prompts: str = Field(
        "builtin:chat",
        description="'builtin:<name>', 'random', or a .jsonl or .json file (relative to the playbook).",
    )
    num_prompts: Positive = Field(64, description="Requests to send (after warm-up).")
    duration_s: Annotated[float, Field(gt=0)] | None = Field(
        None, description="Stop after this many seconds instead of after num_prompts."
    )
    concurrency: Positive | Annotated[list[Positive], Field(min_length=1)] = Field(
        1,
        description="Requests in flight at once (closed loop), or a list of them to sweep over on"
        " one server; with request_rate, a cap on them when the run itself sets it.",
    )
    request_rate: PositiveFloat | Annotated[list[PositiveFloat], Field(min_length=1)] | None = (
        Field(
            None,
            description="Requests per second (open loop, Poisson arrivals) when set; a list sweeps"
            " over them on one server.",
        )
    )
    burstiness: Annotated[float, Field(gt=0)] = Field(
        1.0, description="Gamma shape of arrivals: 1 is Poisson, lower is burstier."
    )
    ramp_s: Annotated[float, Field(ge=0)] | None = Field(
        None,
        description="Closed loop: send the first wave of requests evenly over this many seconds"
        " (default: concurrency / 500, 0.5 s at 256); 0 sends them in one burst.",
    )
    max_tokens: Positive = Field(256, description="Output tokens per request.")
    input_len: Positive | None = Field(
        None, description="Prompt length in tokens for 'random' prompts."
    )
    temperature: Annotated[float, Field(ge=0)] = Field(0.0, description="Sampling temperature.")
    ignore_eos: bool = Field(
        False, description="Generate exactly max_tokens where the engine supports it."
    )
    api: Literal["chat", "completions"] = Field(
        "chat", description="OpenAI endpoint: chat or completions."
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="Passed to the chat template, e.g. {enable_thinking: false}."
    )
    warmup: Annotated[int, Field(ge=0)] = Field(
        2, description="Warm-up requests, excluded from results."
    )
    seed: int = Field(0, description="Seed for everything random in the workload.")
    repeat: Positive = Field(
        1, description="Measurements of each load point, one after another on the same server."
    )
    noisy_ci: Annotated[float, Field(gt=0, le=1)] = Field(
        0.10,
        description="A figure whose 95% t-interval over the repeats is wider than this fraction"
        " of its mean (half-width / mean) is marked noisy.",
    )
    max_failed_fraction: Annotated[float, Field(ge=0, lt=1)] = Field(
        0.0,
        description="Failed requests, as a fraction of the measured ones, past which a"
        " measurement is failed; 0 (the default): any failed request fails it.",
    )
    slo: SloSpec | None = Field(
        None, description="Service-level targets: goodput at every point, and a search."
    )

    # set by load_playbook: `concurrency` came from `defaults` that set no `request_rate`
    _closed_loop_default: bool = PrivateAttr(False)

    @field_validator("prompts")
    @classmethod
    def _prompt_source(cls, value: str, info: ValidationInfo) -> str:
        if value == "random" or _BUILTIN.fullmatch(value):
            return value
        if not value.endswith((".jsonl", ".json")):
            raise ValueError(
                "expected 'builtin:<name>', 'random' or a path to a .jsonl or .json file;"
                f" found {value!r}"
            )
        path = Path(value).expanduser()
        base = (info.context or {}).get("base_dir")
        return str(path if path.is_absolute() or base is None else Path(base) / path)

    @model_validator(mode="after")
    def _one_sweep_axis(self) -> WorkloadSpec:
        if isinstance(self.request_rate, list) and isinstance(self.concurrency, list):
            raise ValueError(
                "concurrency and request_rate are both lists: a sweep varies one of them"
            )
        if self.request_rate is not None and isinstance(self.concurrency, list):
            raise ValueError(
                "with request_rate set, concurrency is the open loop's cap on requests in flight:"
                " give one value (or sweep request_rate instead)"
            )
        search = self.slo.search if self.slo else None
        if search == "concurrency" and self.request_rate is not None:
            raise ValueError(
                "slo.search: concurrency searches a closed loop; this workload sets request_rate"
            )
        if search == "request_rate" and self.request_rate is None:
            raise ValueError(
                "slo.search: request_rate searches an open loop: give request_rate (a value or"
                " a list) in the workload"
            )
        slo_range = self.slo.range if self.slo else None
        if search == "concurrency" and slo_range and any(v != int(v) for v in slo_range):
            raise ValueError(f"slo.range {list(slo_range)}: concurrencies are whole numbers")
        return self

    @property
    def sweep_values(self) -> list[float]:
        """The load points written, in order: the list swept, or the one value."""
        if self.request_rate is not None:
            rate = self.request_rate
            return list(rate) if isinstance(rate, list) else [rate]
        conc = self.concurrency
        return [float(c) for c in conc] if isinstance(conc, list) else [float(conc)]

    @property
    def sweep_kind(self) -> Literal["concurrency", "request_rate"]:
        return "concurrency" if self.request_rate is None else "request_rate"

    @property
    def is_sweep(self) -> bool:
        """More than one measurement on the server: a list of points, repeats or an SLO search."""
        search = self.slo is not None and self.slo.search is not None
        return len(self.sweep_values) > 1 or self.repeat > 1 or search

    def at_load(self, value: float) -> WorkloadSpec:
        """This workload at one load point: a scalar concurrency (closed loop) or request rate
        (open loop), everything else unchanged, including which fields were written."""
        if self.sweep_kind == "concurrency":
            return self.model_copy(update={"concurrency": int(value)})
        return self.model_copy(update={"request_rate": float(value)})

    @property
    def point_concurrency(self) -> int:
        """The scalar concurrency of a workload made by ``at_load`` (or never swept)."""
        conc = self.concurrency
        if isinstance(conc, list):
            raise TypeError("a swept workload has no single concurrency: use at_load()")
        return conc

    @property
    def point_rate(self) -> float | None:
        rate = self.request_rate
        if isinstance(rate, list):
            raise TypeError("a swept workload has no single request rate: use at_load()")
        return rate

    @property
    def open_loop_cap(self) -> int | None:
        """The cap on requests in flight of an open loop (``request_rate`` set); None: no cap.

        ``concurrency`` is the closed loop's setting, so neither its default of 1 nor a value
        that ``defaults`` give the closed-loop runs may throttle a rate this run asks for: it
        caps only when the run (or its matrix) wrote it, or when ``defaults`` wrote it together
        with a ``request_rate`` (the defaults then describe an open loop and its cap).
        """
        if self.request_rate is None or "concurrency" not in self.model_fields_set:
            return None
        return None if self._closed_loop_default else self.point_concurrency


class RunSpec(StrictModel):
    """One server configuration to benchmark."""

    name: Annotated[str, AfterValidator(name_check("run"))] = Field(
        description="Unique within the playbook; used in result folder names."
    )
    engine: EngineName = Field(description="vllm or sglang.")
    model: str = Field(min_length=1, description="Target model id or path, e.g. Qwen/Qwen3.6-27B.")
    served_name: str | None = Field(
        None, description="Name the API serves the model under (default: model)."
    )
    tensor_parallel: Positive = Field(1, description="Tensor parallel size (GPUs per server).")
    max_model_len: Positive | None = Field(None, description="Maximum context length.")
    gpu_memory_fraction: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="Fraction of GPU memory the engine may use."
    )
    port: Port | None = Field(None, description="Server port (default: the engine's).")
    speculative: SpeculativeSpec = Field(
        default_factory=SpeculativeSpec, description="Speculative decoding settings."
    )
    extra_args: ArgList = Field(
        default_factory=list, description="More engine arguments, one argv item each."
    )
    env: EnvDict = Field(default_factory=dict)
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec, description="The load to drive.")
    doctor: Literal["error", "warn", "off"] = Field(
        "error",
        description="What the doctor's errors do: refuse the run, warn, or skip the checks.",
    )
    ready_timeout_s: Annotated[float, Field(gt=0)] = Field(
        900.0, description="Seconds to wait for the server to become ready."
    )
    hosts: Selectors | None = Field(
        None, description="Host names or tags for this run (default: the playbook's)."
    )
    matrix: dict[str, Annotated[list[Any], Field(min_length=1)]] | None = Field(
        None,
        description="Expand this run over lists of values: {workload.concurrency: [1, 4], speculative.num_draft_tokens: [7, 15]}.",
    )

    _mark: Mark | None = PrivateAttr(None)
    _env_marks: dict[str, Mark] = PrivateAttr(default_factory=dict)
    _matrix_values: dict[str, Any] = PrivateAttr(default_factory=dict)
    _served_default: bool = PrivateAttr(False)  # served_name follows model (matrix over model)

    @model_validator(mode="after")
    def _default_served_name(self) -> RunSpec:
        if self.served_name is None:
            self.served_name = self.model
            self._served_default = True
        return self

    @property
    def source(self) -> str | None:
        """``playbook.yaml:12`` where the run starts, when it came from a file."""
        return f"{self._mark.file}:{self._mark.line}" if self._mark else None

    @property
    def line(self) -> int | None:
        return self._mark.line if self._mark else None

    @property
    def matrix_values(self) -> dict[str, Any]:
        """For a run expanded from a matrix: the value of each matrix key ({} otherwise)."""
        return dict(self._matrix_values)

    def resolved_env(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        return expand_env(
            self.env,
            environ=environ,
            owner=f"run {self.name!r}",
            source=self.source,
            marks=self._env_marks,
        )


def _partial(model: type[StrictModel], name: str, drop: tuple[str, ...]) -> type[StrictModel]:
    """The same fields, all optional: what a playbook's ``defaults`` may set."""
    fields: dict[str, Any] = {}
    for f, info in model.model_fields.items():
        if f not in drop:
            params = (info.annotation, *info.metadata)  # Annotated[params] == Annotated[a, *m]
            typ: Any = Annotated[params] if info.metadata else info.annotation
            fields[f] = (typ | None, Field(None, description=info.description))
    return create_model(
        name, __base__=StrictModel, __doc__="Run fields merged into every run.", **fields
    )


if TYPE_CHECKING:
    # a model class built at run time: a checker sees the base it is built on (and its fields
    # reach code as ``model_dump()`` only; see the runs' merge with defaults)
    RunDefaults = StrictModel
else:
    RunDefaults = _partial(RunSpec, "RunDefaults", drop=("name",))


class Playbook(StrictModel):
    """orch playbook: runs to benchmark and the hosts to run them on."""

    model_config = ConfigDict(title="orch playbook")

    name: str = Field(min_length=1, description="Playbook name; used in the results folder name.")
    description: str | None = Field(None, description="Free text.")
    hosts: Selectors | None = Field(
        None, description="Host names, tags or groups (default: every host)."
    )
    defaults: RunDefaults | None = Field(None, description="Run fields deep-merged into every run.")
    runs: Annotated[list[RunSpec], Field(min_length=1)] = Field(description="The runs, in order.")
    share_gpus: bool = Field(
        False,
        description="Let runs that need fewer GPUs than a host has run on it at the same time,"
        " each on its own GPUs (CUDA_VISIBLE_DEVICES set by orch), in playbook order as GPUs"
        " free up, at most three at once; runs on one port wait for each other. A run whose env"
        " sets CUDA_VISIBLE_DEVICES runs alone. Off by default: servers sharing a"
        " machine also share its CPUs, PCIe and memory, which can move the figures.",
    )

    nightly: NightlySpec = Field(
        default_factory=NightlySpec, description="How `orch nightly` judges this playbook's nights."
    )
    slurm: SlurmSpec = Field(
        default_factory=SlurmSpec, description="How runs on Slurm clusters are submitted."
    )

    _source_path: Path | None = PrivateAttr(None)
    _doc: Document | None = PrivateAttr(None)
    _run_nodes: list[Node] = PrivateAttr(default_factory=list)
    _expanded_nodes: dict[str, Node] = PrivateAttr(default_factory=dict)  # matrix run -> its tree
    _context: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _unique_names(self) -> Playbook:
        names = [run.name for run in self.runs]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"run name {name!r} is used more than once")
        return self

    @property
    def source_path(self) -> Path | None:
        return self._source_path

    def run_index(self, run: RunSpec) -> int | None:
        """The index in ``runs`` of ``run``, or of the run a matrix run was expanded from."""
        base = run.name.split("[", 1)[0]  # run names cannot hold '[': see name_check
        return next((i for i, r in enumerate(self.runs) if r.name == base), None)

    def error_at(
        self,
        run: RunSpec,
        fields: Sequence[str],
        message: str,
        *,
        hint: str | None = None,
        name_matrix_run: bool = True,
    ) -> ConfigError:
        """A ConfigError at the first of ``fields`` (dotted paths in the run, most specific
        first) that is written in the file; else at the closest enclosing value written (the
        ``speculative`` mapping for a draft model it lacks); else at the run itself.

        Defaults and matrix values are found where they were typed (``defaults.…``,
        ``runs[0].matrix.…[1]``), like validation errors; the message then names the run, as
        it names a matrix run (its values may be the cause) unless ``name_matrix_run`` is False.
        """
        index = self.run_index(run)
        own = f"runs[{index}]" if index is not None else None
        node = self._expanded_nodes.get(run.name)
        if node is None and index is not None and index < len(self._run_nodes):
            node = self._run_nodes[index]
        if self._doc is None or node is None:
            path = f"{own}.{fields[0]}" if own and fields else own
            return _error(self._doc, node=None, message=message, path=path, hint=hint)
        doc = self._doc
        best, best_depth = node, 0
        for field in fields:
            parts = tuple(int(p) if p.isdigit() else p for p in field.split("."))
            found, _, depth = doc.locate(node, parts)
            if depth == len(parts):
                best = found
                break
            if depth > best_depth:
                best, best_depth = found, depth
        path = doc.path_of(best) or own
        expanded = name_matrix_run and index is not None and run.name != self.runs[index].name
        if expanded or not (path and own and (path == own or path.startswith(f"{own}."))):
            message = f"{message} (in {'matrix ' if expanded else ''}run {run.name!r})"
        return doc.mark(best).error(message, path=path, hint=hint)

    def hosts_for(self, run: RunSpec, inventory: Inventory) -> list[HostConfig]:
        """The hosts ``run`` may use: its own selectors, else the playbook's, else all."""
        index = self.run_index(run)  # an expanded run is found by its base run
        own = run.hosts is not None
        selectors = run.hosts if own else self.hosts
        origin = self._marks_of(("runs", index, "hosts") if own else ("hosts",), selectors)
        return inventory.select(selectors, origin=origin) + cluster_hosts(inventory, selectors)

    def _marks_of(self, loc: tuple[Any, ...], selectors: list[str] | None) -> list[Mark] | None:
        """Where each selector was written, when this playbook came from a file."""
        if self._doc is None or None in loc or not selectors:
            return None
        doc = self._doc
        node, _, depth = doc.locate(doc.root, loc)
        if depth != len(loc):
            return None
        if isinstance(node, SequenceNode) and len(node.value) == len(selectors):
            return [doc.mark(item) for item in node.value]
        return [doc.mark(node)] * len(selectors)

    def expand(self) -> list[RunSpec]:
        """Every run with its matrix expanded (cartesian product, in the order keys are written)."""
        out: list[RunSpec] = []
        for i, run in enumerate(self.runs):
            node = self._run_nodes[i] if i < len(self._run_nodes) else None
            for spec, tree in _expand(run, i, node, self._doc, self._context):
                out.append(spec)
                if tree is not None and tree is not node:
                    self._expanded_nodes[spec.name] = tree
        seen: set[str] = set()
        for run in out:
            if run.name in seen:
                raise _error(
                    self._doc, node=None, message=f"two expanded runs are both named {run.name!r}"
                )
            seen.add(run.name)
        return out


def _error(
    doc: Document | None,
    *,
    node: Node | None,
    message: str,
    path: str | None = None,
    hint: str | None = None,
) -> ConfigError:
    if doc is not None and node is not None:
        return doc.mark(node).error(message, path=path, hint=hint)
    return ConfigError(message, file=doc.file if doc else None, path=path, hint=hint)


def run_paths() -> tuple[list[str], list[str]]:
    """(field paths a matrix may set, paths of free mappings whose sub-keys may be set too)."""
    exact: list[str] = []
    free: list[str] = ["env"]
    for name, info in RunSpec.model_fields.items():
        if name in ("name", "matrix"):
            continue
        exact.append(name)
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, StrictModel):
            for inner, inner_info in sub.model_fields.items():
                exact.append(f"{name}.{inner}")
                if get_origin(unwrap(inner_info.annotation)[0]) is dict:
                    free.append(f"{name}.{inner}")
    return exact, free


def _check_matrix_key(key: str, doc: Document | None, node: Node | None, index: int) -> None:
    exact, free = run_paths()
    if key in exact or any(key.startswith(f"{p}.") and len(key) > len(p) + 1 for p in free):
        return
    key_node = None
    if node is not None and (found := child(node, "matrix")) and (entry := child(found[1], key)):
        key_node = entry[0]
    raise _error(
        doc,
        node=key_node,
        path=f"runs[{index}].matrix.{key}",
        message=f"matrix key {key!r} is not a run field{did_you_mean(key, exact)}",
        hint="matrix keys are dotted run fields, e.g. workload.concurrency, speculative.num_draft_tokens",
    )


def _label(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":")).replace('"', "")
    return str(value)


def _expand(
    run: RunSpec, index: int, node: Node | None, doc: Document | None, context: dict[str, Any]
) -> list[tuple[RunSpec, Node | None]]:
    """(run, its node tree with the matrix values in place) for each combination."""
    if not run.matrix:
        return [(run, node)]
    keys = list(run.matrix)
    for key in keys:
        _check_matrix_key(key, doc, node, index)
    shorts = [k.rsplit(".", 1)[-1] for k in keys]
    if len(set(shorts)) < len(shorts):
        shorts = keys
    # from the validated run (current even after model_copy), re-validated with each combination
    base = run.model_dump(exclude={"matrix", "served_name"} if run._served_default else {"matrix"})
    # only the workload keys that were set, so the expanded runs know which ones were written
    # (an open loop's concurrency cap depends on it: WorkloadSpec.open_loop_cap)
    base["workload"] = run.workload.model_dump(exclude_unset=True)
    in_matrix = _workload_keys_in(keys)
    items = _matrix_items(node, keys)
    out: list[tuple[RunSpec, Node | None]] = []
    for combo in itertools.product(*(range(len(run.matrix[k])) for k in keys)):
        data = copy.deepcopy(base)
        tree = node
        for key, j in zip(keys, combo, strict=True):
            _set(data, key.split("."), copy.deepcopy(run.matrix[key][j]))
            if tree is not None and doc is not None and items[key]:
                tree = replace_at(tree, key.split("."), items[key][j], doc)
        spec = _validate_run(data, doc, tree, index, context)
        spec.workload._closed_loop_default = (
            run.workload._closed_loop_default and "concurrency" not in in_matrix
        )
        values = {key: run.matrix[key][j] for key, j in zip(keys, combo, strict=True)}
        label = ",".join(f"{s}={_label(v)}" for s, v in zip(shorts, values.values(), strict=True))
        spec = spec.model_copy(update={"name": f"{run.name}[{label}]", "matrix": None})
        spec._matrix_values = values
        out.append((spec, tree))
    return out


def _workload_keys_in(matrix_keys: list[str]) -> frozenset[str]:
    """The workload fields a matrix writes (all of them for a matrix over ``workload``)."""
    out: set[str] = set()
    for key in matrix_keys:
        parts = key.split(".")
        if parts[0] == "workload":
            out |= {parts[1]} if len(parts) > 1 else set(WorkloadSpec.model_fields)
    return frozenset(out)


def _matrix_items(node: Node | None, keys: list[str]) -> dict[str, list[Node]]:
    found = child(node, "matrix") if node is not None else None
    out: dict[str, list[Node]] = {}
    for key in keys:
        entry = child(found[1], key) if found else None
        out[key] = list(entry[1].value) if entry and isinstance(entry[1], SequenceNode) else []
    return out


def _set(data: dict[str, Any], parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        if not isinstance(data.get(part), dict):
            data[part] = {}
        data = data[part]
    data[parts[-1]] = value


def _validate_run(
    data: dict[str, Any],
    doc: Document | None,
    node: Node | None,
    index: int,
    context: dict[str, Any],
) -> RunSpec:
    if doc is None or node is None:
        return RunSpec.model_validate(data, context=context)
    run = validate(RunSpec, data, doc, node, prefix=("runs", index), context=context)
    run._mark = doc.mark(node)
    env = child(node, "env")
    if env is not None and isinstance(env[1], MappingNode):
        run._env_marks = {key.value: doc.mark(value) for key, value in env[1].value}
    return run


def _closed_loop_default(defaults: Node | None, run: Node) -> bool:
    """Whether the run's ``concurrency`` comes from ``defaults`` that set no ``request_rate``:
    then it is the closed-loop runs' setting and caps no open loop (``open_loop_cap``)."""

    def keys(node: Node | None) -> set[str]:  # the workload keys written, nulls left out
        found = child(node, "workload") if node is not None else None
        if found is None or not isinstance(found[1], MappingNode):
            return set()
        return {key.value for key, value in found[1].value if value.tag != _NULL_TAG}

    shared = keys(defaults)
    return (
        "concurrency" in shared and "request_rate" not in shared and "concurrency" not in keys(run)
    )


def load_playbook(path: str | Path) -> Playbook:
    doc = load_yaml(path)
    context = {"base_dir": Path(path).resolve().parent}
    head = validate(_PlaybookHead, doc.data, doc, doc.root, context=context)
    defaults = child(doc.root, "defaults")
    runs_node = child(doc.root, "runs")
    assert runs_node is not None and isinstance(runs_node[1], SequenceNode)  # validated above
    runs: list[RunSpec] = []
    nodes: list[Node] = []
    first: dict[str, int] = {}
    for i, run_node in enumerate(runs_node[1].value):
        merged = merge_nodes(defaults[1] if defaults else None, run_node, doc)
        run = _validate_run(to_python(merged), doc, merged, i, context)
        run.workload._closed_loop_default = _closed_loop_default(
            defaults[1] if defaults else None, run_node
        )
        if run.name in first:
            name_node = child(merged, "name")
            raise _error(
                doc,
                node=name_node[1] if name_node else merged,
                message=f"duplicate run name {run.name!r} (first used by the run at line {first[run.name]})",
                hint="run names must be unique within a playbook",
            )
        first[run.name] = run.line or 0
        runs.append(run)
        nodes.append(merged)
    playbook = Playbook(
        name=head.name,
        description=head.description,
        hosts=head.hosts,
        defaults=head.defaults,
        runs=runs,
        share_gpus=head.share_gpus,
        nightly=head.nightly,
        slurm=head.slurm,
    )
    playbook._source_path = Path(path)
    playbook._doc = doc
    playbook._run_nodes = nodes
    playbook._context = context
    playbook.expand()  # a bad matrix key or value fails now, at its own line
    return playbook


class _PlaybookHead(StrictModel):
    """The playbook's top level, runs unvalidated: they are validated one by one, merged with defaults."""

    name: str = Field(min_length=1)
    description: str | None = None
    hosts: Selectors | None = None
    defaults: RunDefaults | None = None
    runs: Annotated[list[dict[str, Any]], Field(min_length=1)]
    share_gpus: bool = False
    nightly: NightlySpec = Field(default_factory=NightlySpec)
    slurm: SlurmSpec = Field(default_factory=SlurmSpec)
