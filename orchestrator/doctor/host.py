"""Host checks from probe facts: GPUs, memory, engine version, driver, port -> findings.

Pure: the facts come from the agent's ``probe`` verb (``ProbeResult``, the one parser of it),
so the same checks run on a probe done minutes ago or on test data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.agent.facts import HostFacts
from orchestrator.doctor.findings import Finding, error, ok, warning
from orchestrator.doctor.modelconfig import ModelConfig
from orchestrator.doctor.reference import canonical_method, version_tuple
from orchestrator.engines import get_engine
from orchestrator.engines.parallel import Parallelism
from orchestrator.metrics.roofline import (
    attention_params,
    bytes_per_parameter,
    layer_kinds,
    linear_attention_params,
    mlp_params,
)
from orchestrator.remote.holders import describe_all
from orchestrator.remote.wire import GpuInfo, PortHolder, ProbeResult

GIB = 1024**3
MIB = 1024**2
# Leave this share of the engine's memory budget for KV cache and activations; weights above
# it leave too little room to serve even short prompts.
MAX_WEIGHT_SHARE = 0.8


@dataclass
class HostProbe:
    """The doctor's view of a host: the fields of ``HostFacts`` (``agent/facts.py``, the one
    reading of a probe result) the checks read, so tests can state just those.

    ``engines`` is keyed by engine name (``vllm``), as ``HostFacts.engines`` is: the probe
    reports versions by Python package, and only ``HostFacts`` maps one to the other.
    ``free_ports`` None means ports were not probed. ``cpu_only``: hosts.yaml declares the
    host ``gpus: none`` (a CPU host), which the probe cannot tell; ``name`` is the host's,
    for messages that must say which host to change.
    """

    gpus: list[GpuInfo] = field(default_factory=list)
    driver_version: str | None = None
    engines: dict[str, str | None] = field(default_factory=dict)
    free_ports: set[int] | None = None
    checked_ports: set[int] | None = None
    port_holders: list[PortHolder] = field(default_factory=list)  # of the taken ports
    cpu_only: bool = False
    name: str | None = None

    @classmethod
    def from_facts(
        cls, facts: HostFacts, *, cpu_only: bool = False, name: str | None = None
    ) -> HostProbe:
        return cls(
            gpus=list(facts.gpus),
            driver_version=facts.driver_version,
            engines=dict(facts.engines),
            free_ports=set(facts.free_ports),
            checked_ports=set(facts.checked_ports),
            port_holders=list(facts.probe.ports.holders),
            cpu_only=cpu_only,
            name=name,
        )

    @classmethod
    def from_probe(
        cls, probe: ProbeResult, *, cpu_only: bool = False, name: str | None = None
    ) -> HostProbe:
        """From the ``probe`` verb's result, through ``HostFacts``."""
        return cls.from_facts(HostFacts.from_probe(probe), cpu_only=cpu_only, name=name)


def run_host_checks(
    *,
    host: HostProbe,
    engine: str,
    method: str | None,
    tensor_parallel: int = 1,
    parallelism: Parallelism | None = None,
    port: int | None = None,
    default_port: bool = False,
    target: ModelConfig | None = None,
    drafter: ModelConfig | None = None,
    memory_fraction: float | None = None,
    expected_gpu: str | None = None,
) -> list[Finding]:
    """GPU count, GPU model, free memory, engine and version, driver, port -> one finding each.

    ``port`` is the one the server will listen on (``runspec.planned_port``);
    ``default_port`` says it is the engine's default because the run sets none.
    ``parallelism``: the server's sizes (``Engine.parallelism``); None: tensor parallel only.
    A CPU host (``host.cpu_only``) gets ``cpu_host_checks`` in place of the GPU ones.
    """
    engine = engine.strip().lower()
    sizes = parallelism or Parallelism(tensor=max(tensor_parallel, 1))
    if host.cpu_only:
        return [
            *cpu_host_checks(host, sizes),
            check_engine_version(host, engine=engine, method=method),
            check_port(host, port, engine=engine, default=default_port),
        ]
    gpus = sorted(host.gpus, key=lambda g: g.index)[: sizes.gpus]
    return [
        check_driver(host),
        check_gpu_count(host, sizes),
        check_gpu_model(gpus, expected_gpu),
        check_gpu_memory(
            gpus,
            engine=engine,
            parallelism=sizes,
            target=target,
            drafter=drafter,
            memory_fraction=memory_fraction,
        ),
        check_engine_version(host, engine=engine, method=method),
        check_port(host, port, engine=engine, default=default_port),
    ]


CPU_HOST = "CPU host (gpus: none)"


def cpu_host_checks(host: HostProbe, parallelism: Parallelism) -> list[Finding]:
    """The GPU checks of a host declared ``gpus: none``: the engine runs on the CPU, so no
    driver, GPU model or GPU memory applies (each says so, to tell "not applicable" from
    "never checked"), and a server gets one device, the CPU: parallel sizes past 1 cannot run.
    GPUs that nvidia-smi does show there are ``orch hosts check``'s warning, not the run's."""
    details = {"cpu_only": True}
    need = parallelism.gpus
    where = f"host {host.name}" if host.name else "the host"
    if need > 1:
        count = error(
            "gpu_count",
            f"{CPU_HOST}: the run needs {need} devices ({parallelism.describe()}) but {where} "
            "serves each run on its CPU, one device. Fix: set tensor_parallel (and the "
            "pipeline and data parallel sizes in extra_args) to 1, or send the run to a GPU "
            f"host (its `hosts:`); if {where} does have GPUs, declare them in hosts.yaml.",
            found=0,
            needed=need,
            **parallelism.to_json(),
            **details,
        )
    else:
        count = ok("gpu_count", f"{CPU_HOST}: one server on the CPU.", needed=need, **details)
    return [
        ok("driver", f"{CPU_HOST}: no NVIDIA driver needed.", **details),
        count,
        ok("gpu_model", f"{CPU_HOST}: no GPU model to check.", **details),
        ok(
            "gpu_memory",
            f"{CPU_HOST}: GPU memory not checked; the engine's KV cache lives in host memory "
            "(vLLM CPU: VLLM_CPU_KVCACHE_SPACE, in GiB).",
            **details,
        ),
    ]


def check_driver(host: HostProbe) -> Finding:
    if not host.driver_version:
        return error(
            "driver",
            "no NVIDIA driver answered (nvidia-smi missing or failing). "
            "Fix: install the NVIDIA driver, or check `nvidia-smi` works for this user.",
        )
    return ok("driver", f"NVIDIA driver {host.driver_version}.", version=host.driver_version)


def check_gpu_count(host: HostProbe, parallelism: Parallelism) -> Finding:
    """The host must have the product of the run's parallel sizes in GPUs."""
    found, need = len(host.gpus), parallelism.gpus
    details = {"found": found, "needed": need, **parallelism.to_json()}
    if found < need:
        return error(
            "gpu_count",
            f"the run needs {need} GPU(s) ({parallelism.describe()}) but the host has "
            f"{found}. Fix: lower the parallel sizes (tensor_parallel, and the pipeline and "
            f"data parallel sizes in extra_args) to {max(found, 1)} GPU(s) or run on a host "
            "with more GPUs.",
            **details,
        )
    return ok("gpu_count", f"{found} GPU(s) for {need} ({parallelism.describe()}).", **details)


def check_gpu_model(gpus: list[GpuInfo], expected: str | None) -> Finding:
    names = [g.name or "unknown" for g in gpus]
    details = {"found": names, "expected": expected}
    if not gpus:
        return warning("gpu_model", "no GPU to check.", **details)
    if expected and not all(expected.lower() in n.lower() for n in names):
        return warning(
            "gpu_model",
            f"the inventory says {expected!r} but the run's GPUs are "
            f"{names}: results will not be comparable. Fix: correct `gpus` in hosts.yaml "
            "or pick the intended host.",
            **details,
        )
    if len(set(names)) > 1:
        return warning(
            "gpu_model",
            f"the run's GPUs are of different models {names}: tensor "
            "parallel runs at the slowest one's pace.",
            **details,
        )
    return ok("gpu_model", f"{len(gpus)} x {names[0]}.", **details)


def check_gpu_memory(
    gpus: list[GpuInfo],
    *,
    engine: str,
    parallelism: Parallelism,
    target: ModelConfig | None,
    drafter: ModelConfig | None,
    memory_fraction: float | None,
) -> Finding:
    """Every GPU of the run must have ``fraction`` x total free (engines refuse to start
    otherwise) and the weights per GPU must leave room for KV cache within that budget. The
    weights are split over tensor x pipeline GPUs; each data-parallel replica holds a copy."""
    name = "gpu_memory"
    fraction = memory_fraction or get_engine(engine).doctor.default_memory_fraction
    weights = sum(estimate_weight_bytes(m) or 0 for m in (target, drafter) if m is not None)
    per_gpu = weights / parallelism.shards
    details: dict[str, Any] = {
        "memory_fraction": fraction,
        "weights_gib": round(weights / GIB, 1),
        "weights_per_gpu_gib": round(per_gpu / GIB, 1),
        "gpus": [],
    }
    worst: Finding | None = None
    for gpu in gpus:
        if gpu.memory_total_mib is None or gpu.free_mib is None:
            continue
        total, free = gpu.memory_total_mib * MIB, gpu.free_mib * MIB
        budget = fraction * total
        details["gpus"].append(
            {
                "index": gpu.index,
                "total_gib": _gib(total),
                "free_gib": _gib(free),
                "budget_gib": _gib(budget),
            }
        )
        finding = _memory_verdict(
            gpu.index,
            free=free,
            budget=budget,
            per_gpu=per_gpu,
            fraction=fraction,
            split=parallelism.describe(),
        )
        if finding and (
            worst is None or (worst.severity == "warning" and finding.severity == "error")
        ):
            worst = finding
    if not details["gpus"]:
        return warning(name, "GPU memory figures are unavailable: not checked.", **details)
    if worst is not None:
        worst.details.update(details)
        return worst
    need = f"; weights about {_gib(per_gpu)} GiB per GPU" if weights else ""
    return ok(name, f"every GPU has its {fraction:.0%} budget free{need}.", **details)


def _memory_verdict(
    index: int, *, free: float, budget: float, per_gpu: float, fraction: float, split: str
) -> Finding | None:
    if free < budget:
        return error(
            "gpu_memory",
            f"GPU {index} has {_gib(free)} GiB free but the engine asks for "
            f"{fraction:.0%} of it ({_gib(budget)} GiB) and will refuse to start. Fix: stop "
            "what else runs on that GPU (see `orch hosts check`) or lower "
            "gpu_memory_fraction.",
        )
    if per_gpu > budget:
        return error(
            "gpu_memory",
            f"the weights need about {_gib(per_gpu)} GiB per GPU with "
            f"{split}, more than GPU {index}'s {_gib(budget)} GiB budget. Fix: raise "
            "tensor_parallel (or the pipeline parallel size in extra_args), use a quantized "
            "checkpoint, or a bigger GPU.",
        )
    if per_gpu > MAX_WEIGHT_SHARE * budget:
        return warning(
            "gpu_memory",
            f"the weights take about {_gib(per_gpu)} GiB of GPU {index}'s "
            f"{_gib(budget)} GiB budget, leaving little KV cache. Fix: raise "
            "tensor_parallel or gpu_memory_fraction.",
        )
    return None


def check_engine_version(host: HostProbe, *, engine: str, method: str | None) -> Finding:
    name = "engine_version"
    version = host.engines.get(engine)
    canonical = canonical_method(method)
    details = {"engine": engine, "version": version, "method": canonical}
    if not version:
        return error(
            name,
            f"{engine} is not installed for the host's Python. Fix: install it, or set "
            "`python` in hosts.yaml to the interpreter of the engine's virtual environment.",
            **details,
        )
    support = get_engine(engine).doctor.method_support.get(canonical) if canonical else None
    if canonical is None or support is None:
        return ok(name, f"{engine} {version} installed.", **details)
    have = version_tuple(version)
    details["source"] = support.source
    if support.min_version and have < version_tuple(support.min_version):
        return error(
            name,
            f"{engine} {version} has no {canonical!r} speculative method (it arrived in "
            f"{support.min_version}). Fix: upgrade {engine} to {support.min_version} or later.",
            expected=support.min_version,
            **details,
        )
    if support.min_version or (
        support.confirmed_version and have >= version_tuple(support.confirmed_version)
    ):
        return ok(name, f"{engine} {version} supports {canonical!r}.", **details)
    return warning(
        name,
        f"{engine} {version} is older than {support.confirmed_version}, the release "
        f"known to support {canonical!r}: it may not. Fix: upgrade {engine} if the launch "
        "fails.",
        expected=support.confirmed_version,
        **details,
    )


def check_port(
    host: HostProbe, port: int | None, *, engine: str = "vllm", default: bool = False
) -> Finding:
    """The server's port must be free at doctor time: nothing of orch's own listens yet (the
    doctor runs before any server starts, and runs sharing a host reuse the port one after
    another), so a taken port means something else holds it and the launch would fail."""
    label = get_engine(engine).display_name
    what = f"port {port} ({label}'s default: the run sets no `port`)" if default else f"port {port}"
    details: dict[str, Any] = {"port": port, "default": default}
    if port is None:
        return warning("port", "the run's port is not known: not checked.", **details)
    if host.free_ports is None or (
        host.checked_ports is not None and port not in host.checked_ports
    ):
        return warning("port", f"{what} was not probed: not checked.", **details)
    if port not in host.free_ports:
        holders = [h for h in host.port_holders if h.port == port]
        details["holders"] = [h.to_json() for h in holders]
        return error("port", port_taken(what, holders), **details)
    return ok("port", f"{what} is free.", **details)


def port_taken(what: str, holders: list[PortHolder]) -> str:
    """The refusal of a taken port: who holds it (pid, user, command; orch's run id) and the
    one thing to do about it, so nobody has to hunt with ``ss``."""
    runs = [h.run_id for h in holders if h.run_id]
    if runs:
        fix = f"`orch stop {runs[0]}` (see `orch ps`)"
    elif holders:
        fix = "stop that process"
    else:
        fix = "free it (`ss -ltnp` run as root names the process)"
    return (
        f"{what} is already in use on the host by {describe_all(holders)}: the server cannot "
        f"listen there. Fix: {fix}, or set the run's `port` to a free one."
    )


# --- weight estimate ----------------------------------------------------------------------------


def estimate_weight_bytes(model: ModelConfig) -> int | None:
    """Weight bytes: parameter count (a stated one, else estimated) x bytes per parameter."""
    params = estimate_parameters(model)
    if params is None:
        return None
    return int(params * bytes_per_parameter(model.text))


def estimate_parameters(model: ModelConfig) -> int | None:
    """Parameter count from a stated field, else from the shapes in the config.

    The estimate counts embeddings, attention (softmax or linear) and MLP (or every MoE
    expert) of every layer, with ``metrics.roofline``'s shapes; it is within a few percent for
    dense, MoE and hybrid linear-attention stacks, enough to tell "fits" from "does not fit".
    """
    text = model.text
    for key in ("num_parameters", "num_params", "n_params", "total_params"):
        if _pos_int(text.get(key)):
            return int(text[key])
    hidden, layers, vocab = model.hidden_size, model.num_layers, model.vocab_size
    if not hidden or not layers:
        return None
    embed = (vocab or 0) * hidden * (1 if text.get("tie_word_embeddings") else 2)
    if any("dflash" in a.lower() for a in model.architectures):
        embed = 0  # DFlash drafters share the target's embeddings and LM head
    full, sliding, linear = layer_kinds(text)
    if full + sliding + linear != layers:
        full, sliding, linear = layers, 0, 0
    mlp = mlp_params(text, hidden)
    return (
        embed
        + (full + sliding) * (attention_params(text, hidden) + mlp)
        + linear * (linear_attention_params(text, hidden) + mlp)
    )


def _pos_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _gib(num_bytes: float) -> float:
    return round(num_bytes / GIB, 1)
