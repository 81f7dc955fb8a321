"""A fake ``nvidia-smi`` for simulated hosts, printing exactly what the real one prints.

Supported: ``--query-gpu=FIELDS``, ``--query-compute-apps=FIELDS`` (with
``--format=csv[,noheader][,nounits]``), ``-i/--id``, ``-L`` and the plain table. Memory in use
comes from the simulated engine servers that are alive right now (see ``gpus.py``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.sim.gpus import (
    BUSY_MEM_MHZ,
    BUSY_SM_MHZ,
    IDLE_MEM_MHZ,
    IDLE_SM_MHZ,
    POWER_LIMIT_W,
    THROTTLE_REASONS,
    THROTTLED_SM_MHZ,
    Activity,
    GpuFacts,
    GpuProcess,
    activity,
    gpu_uuid,
    live_processes,
    load_gpu_facts,
    pci_bus_id,
    power_w,
    state_dir,
    used_memory_mib,
)
from orchestrator.sim.versions import CUDA_VERSION


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    bus_id: str
    total_mib: int
    used_mib: int
    utilization: int
    driver_version: str
    running: int = 0  # requests the engines on it run now (their activity files)
    throttle: str | None = None  # the night's throttle reason (nights.py), None: none


def _timestamp(g: Gpu) -> str:
    """nvidia-smi's: local time to the millisecond, ``2026/12/04 13:30:04.836``."""
    now = time.time()
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"


def _reasons(g: Gpu) -> str:
    if not g.running:
        return "0x0000000000000001"  # GPU idle
    return f"0x{THROTTLE_REASONS.get(g.throttle or '', 0):016X}"


def _sm_mhz(g: Gpu) -> str:
    if not g.utilization:
        return str(IDLE_SM_MHZ)
    return str(THROTTLED_SM_MHZ if g.throttle else BUSY_SM_MHZ)


# field -> (header, unit or "", getter)
_GPU_FIELDS: dict[str, tuple[str, str, Callable[[Gpu], str]]] = {
    "index": ("index", "", lambda g: str(g.index)),
    "timestamp": ("timestamp", "", _timestamp),
    "name": ("name", "", lambda g: g.name),
    "gpu_name": ("name", "", lambda g: g.name),
    "uuid": ("uuid", "", lambda g: g.uuid),
    "gpu_uuid": ("uuid", "", lambda g: g.uuid),
    "count": ("count", "", lambda g: ""),  # filled in by the caller
    "memory.total": ("memory.total", "MiB", lambda g: str(g.total_mib)),
    "memory.used": ("memory.used", "MiB", lambda g: str(g.used_mib)),
    "memory.free": ("memory.free", "MiB", lambda g: str(g.total_mib - g.used_mib)),
    "memory.reserved": ("memory.reserved", "MiB", lambda g: "0"),
    "utilization.gpu": ("utilization.gpu", "%", lambda g: str(g.utilization)),
    "utilization.memory": ("utilization.memory", "%", lambda g: str(g.utilization // 2)),
    "driver_version": ("driver_version", "", lambda g: g.driver_version),
    "pci.bus_id": ("pci.bus_id", "", lambda g: g.bus_id),
    "gpu_bus_id": ("pci.bus_id", "", lambda g: g.bus_id),
    "temperature.gpu": ("temperature.gpu", "", lambda g: "34" if not g.utilization else "61"),
    "power.draw": ("power.draw", "W", lambda g: f"{power_w(g.running):.2f}"),
    "power.limit": ("power.limit", "W", lambda g: f"{POWER_LIMIT_W:.2f}"),
    # an RTX A6000's: 210/405 MHz idle, its boost clocks busy (lower on a throttled night);
    # the reasons idle (0x1), none, or the night's throttling
    "clocks.current.sm": ("clocks.current.sm", "MHz", _sm_mhz),
    "clocks.current.memory": (
        "clocks.current.memory",
        "MHz",
        lambda g: str(BUSY_MEM_MHZ if g.running else IDLE_MEM_MHZ),
    ),
    "clocks_event_reasons.active": ("clocks_event_reasons.active", "", _reasons),
    "clocks_throttle_reasons.active": ("clocks_event_reasons.active", "", _reasons),
    "pstate": ("pstate", "", lambda g: "P8" if not g.utilization else "P2"),
    "compute_cap": ("compute_cap", "", lambda g: "8.6"),
    "persistence_mode": ("persistence_mode", "", lambda g: "Enabled"),
}

_APP_FIELDS: dict[str, tuple[str, str, Callable[[Gpu, GpuProcess], str]]] = {
    "gpu_uuid": ("gpu_uuid", "", lambda g, p: g.uuid),
    "gpu_name": ("gpu_name", "", lambda g, p: g.name),
    "gpu_bus_id": ("gpu_bus_id", "", lambda g, p: g.bus_id),
    "pid": ("pid", "", lambda g, p: str(p.pid)),
    "process_name": ("process_name", "", lambda g, p: p.process_name),
    "name": ("process_name", "", lambda g, p: p.process_name),
    "used_memory": ("used_gpu_memory", "MiB", lambda g, p: str(p.memory_mib)),
    "used_gpu_memory": ("used_gpu_memory", "MiB", lambda g, p: str(p.memory_mib)),
}

_BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"


def snapshot(
    facts: GpuFacts, procs: list[GpuProcess], doing: list[Activity] | None = None
) -> list[Gpu]:
    """The GPUs now; ``doing``: per GPU, what its engines do (idle when not given)."""
    used = used_memory_mib(facts, procs)
    doing = doing or [Activity()] * facts.count
    busy = [a.running for a in doing]
    return [
        Gpu(
            index=i,
            name=facts.name,
            uuid=gpu_uuid(i, facts.name),
            bus_id=pci_bus_id(i),
            total_mib=facts.memory_mib,
            used_mib=used[i],
            utilization=97 if busy[i] else 0,  # a loaded but idle engine shows 0 %
            driver_version=facts.driver_version,
            running=busy[i],
            throttle=doing[i].throttle,
        )
        for i in range(facts.count)
    ]


def _format_value(value: str, unit: str, units: bool) -> str:
    if not unit or not units:
        return value
    return f"{value} %" if unit == "%" else f"{value} {unit}"


def _header(name: str, unit: str) -> str:
    return f"{name} [{unit}]" if unit else name


def query_gpus(gpus: list[Gpu], fields: list[str], *, header: bool, units: bool) -> str:
    """Pure: the CSV nvidia-smi prints for ``--query-gpu``; raises KeyError on a bad field."""
    specs = [_GPU_FIELDS[f] for f in fields]
    lines = [", ".join(_header(n, u) for n, u, _ in specs)] if header else []
    for gpu in gpus:
        values = []
        for field, (_, unit, get) in zip(fields, specs, strict=False):
            value = str(len(gpus)) if field == "count" else get(gpu)
            values.append(_format_value(value, unit, units))
        lines.append(", ".join(values))
    return "".join(line + "\n" for line in lines)


def query_apps(
    gpus: list[Gpu], procs: list[GpuProcess], fields: list[str], *, header: bool, units: bool
) -> str:
    specs = [_APP_FIELDS[f] for f in fields]
    lines = [", ".join(_header(n, u) for n, u, _ in specs)] if header else []
    by_index = {g.index: g for g in gpus}
    for gpu_index in sorted(by_index):
        for proc in procs:
            if gpu_index in proc.gpus:
                gpu = by_index[gpu_index]
                lines.append(
                    ", ".join(_format_value(get(gpu, proc), u, units) for _, u, get in specs)
                )
    return "".join(line + "\n" for line in lines)


def list_gpus(gpus: list[Gpu]) -> str:
    return "".join(f"GPU {g.index}: {g.name} (UUID: {g.uuid})\n" for g in gpus)


def _cells(*parts: tuple[str, str, int]) -> str:
    """One table row: each cell is (left text, right text, width), padded between the two."""
    return (
        "|" + "|".join(left + right.rjust(width - len(left)) for left, right, width in parts) + "|"
    )


def table(gpus: list[Gpu], procs: list[GpuProcess], now: float) -> str:
    """The plain ``nvidia-smi`` screen (driver 580 layout)."""
    bar = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    wide = "+" + "-" * 89 + "+"
    drv = gpus[0].driver_version if gpus else ""
    out = [
        time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(now)) + "       ",
        wide,
        _cells(
            (
                f" NVIDIA-SMI {drv}",
                f"Driver Version: {drv}      CUDA Version: {CUDA_VERSION}     ",
                89,
            )
        ),
        bar,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
    ]
    for g in gpus:
        mem = f"{g.used_mib}MiB / {g.total_mib:>6}MiB "
        out += [
            _cells(
                (f" {g.index:>3}  {g.name}", "On  ", 41),
                ("", f"{g.bus_id} Off ", 24),
                ("", "Off ", 22),
            ),
            _cells(
                (" 30%   34C    P8", "22W /  300W ", 41),
                ("", mem, 24),
                (f"{g.utilization:>7}%", "Default ", 22),
            ),
            _cells(("", "", 41), ("", "", 24), ("", "N/A ", 22)),
            bar,
        ]
    out += [
        "",
        wide,
        _cells((" Processes:", "", 89)),
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * 89 + "|",
    ]
    rows = [(gi, p) for gi in range(len(gpus)) for p in procs if gi in p.gpus]
    if not rows:
        out.append(_cells(("  No running processes found", "", 89)))
    for gi, p in rows:
        left = f" {gi:>4}   N/A  N/A  {p.pid:>13}      C   {p.process_name[:34]}"
        out.append(_cells((left, f"{p.memory_mib}MiB ", 89)))
    out.append(wide)
    return "".join(line + "\n" for line in out)


def _option(args: list[str], i: int, name: str) -> tuple[str, int]:
    """`--name=value` or `--name value` -> (value, index of the next argument)."""
    arg = args[i]
    if arg.startswith(name + "="):
        return arg[len(name) + 1 :], i + 1
    if i + 1 >= len(args):
        raise ValueError(name)
    return args[i + 1], i + 2


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    query_gpu = query_app = fmt = None
    ids: list[int] | None = None
    list_mode = False
    loop_ms: int | None = None
    i = 0
    try:
        while i < len(args):
            arg = args[i]
            if arg.startswith("--query-gpu"):
                query_gpu, i = _option(args, i, "--query-gpu")
            elif arg.startswith("--query-compute-apps"):
                query_app, i = _option(args, i, "--query-compute-apps")
            elif arg.startswith("--format"):
                fmt, i = _option(args, i, "--format")
            elif arg.startswith("--id"):
                value, i = _option(args, i, "--id")
                ids = [int(x) for x in value.split(",")]
            elif arg == "-i":
                value, i = _option(args, i, "-i")
                ids = [int(x) for x in value.split(",")]
            elif arg in ("-L", "--list-gpus"):
                list_mode, i = True, i + 1
            elif arg.startswith("--loop-ms") or arg == "-lms":
                value, i = _option(args, i, "--loop-ms" if arg.startswith("--") else "-lms")
                loop_ms = int(value)
            else:
                raise ValueError(arg)
    except ValueError:
        sys.stdout.write(_BAD_ARGS)
        return 2
    if loop_ms is not None and query_gpu is not None:
        return _loop(args, loop_ms)
    state = state_dir()
    facts = load_gpu_facts(state)
    procs = live_processes(state)
    doing = [activity(state, [p.pid for p in procs if i in p.gpus]) for i in range(facts.count)]
    gpus = snapshot(facts, procs, doing)
    if ids is not None:
        if any(not 0 <= x < len(gpus) for x in ids):
            sys.stdout.write("No devices were found\n")
            return 6
        gpus = [g for g in gpus if g.index in ids]
    if list_mode:
        sys.stdout.write(list_gpus(gpus))
        return 0
    if query_gpu is not None or query_app is not None:
        parts = (fmt or "").replace(" ", "").split(",")
        if not fmt or parts[0] != "csv" or not set(parts[1:]) <= {"noheader", "nounits"}:
            sys.stdout.write(_BAD_ARGS)
            return 2
        header, units = "noheader" not in parts, "nounits" not in parts
        fields = [f.strip() for f in (query_gpu or query_app or "").split(",") if f.strip()]
        known = _GPU_FIELDS if query_gpu is not None else _APP_FIELDS
        for field in fields:
            if field not in known:
                sys.stdout.write(f'Field "{field}" is not a valid field to query.\n\n')
                return 2
        if query_gpu is not None:
            sys.stdout.write(query_gpus(gpus, fields, header=header, units=units))
        else:
            sys.stdout.write(query_apps(gpus, procs, fields, header=header, units=units))
        return 0
    sys.stdout.write(table(gpus, procs, time.time()))
    return 0


def _loop(args: list[str], loop_ms: int) -> int:
    """``-lms N``: the query again every N ms until killed, its header (if any) once."""
    once = [a for a in args if a != "-lms" and not a.startswith("--loop-ms")]
    if "-lms" in args:
        once.pop(args.index("-lms"))  # its value followed it
    noheader = [
        a.replace("csv", "csv,noheader", 1) if a.startswith("--format") else a for a in once
    ]
    if "noheader" in " ".join(once):
        noheader = once
    first = True
    try:
        while True:
            code = main(once if first else noheader)
            sys.stdout.flush()
            if code != 0:
                return code
            first = False
            time.sleep(loop_ms / 1000.0)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    sys.exit(main())
