"""Simulated GPUs and who holds their memory: state shared by the fake nvidia-smi and the servers.

Each running simulated engine writes ``<state>/gpu-<pid>.json``; nvidia-smi counts a file only
while its process is alive (same pid *and* same start time, so a recycled pid does not count),
and deletes files left behind by processes that were killed. Engines sharing a host on disjoint
GPU sets (``CUDA_VISIBLE_DEVICES``) hold memory on their own GPUs only; an engine claims its
full share under ``memory_lock``, so two engines started at once on the same GPUs cannot both
get it. Standard library only: the fake nvidia-smi must start fast.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.sim.versions import DRIVER_VERSION

DEFAULT_GPUS = 2
DEFAULT_GPU_NAME = "NVIDIA RTX A6000"
DEFAULT_GPU_MEMORY_MIB = 49140
IDLE_USED_MIB = 1  # what an idle GPU reports as used


@dataclass(frozen=True)
class GpuFacts:
    count: int
    name: str
    memory_mib: int
    driver_version: str = DRIVER_VERSION


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    gpus: tuple[int, ...]
    memory_mib: int  # per GPU
    process_name: str


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    explicit = env.get("ORCH_SIM_STATE")
    if explicit:
        return Path(explicit)
    return Path(tempfile.gettempdir()) / f"orch-sim-{os.getuid()}"


def load_gpu_facts(state: Path, environ: Mapping[str, str] | None = None) -> GpuFacts:
    """Env vars (ORCH_SIM_GPUS, _GPU_NAME, _GPU_MEMORY_MIB, _DRIVER_VERSION) win over the
    sandbox's gpus.json (whose driver_version a nightly test edits to 'upgrade' a host)."""
    env = os.environ if environ is None else environ
    saved: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads((state / "gpus.json").read_text())
    count = int(env.get("ORCH_SIM_GPUS") or saved.get("count") or DEFAULT_GPUS)
    name = str(env.get("ORCH_SIM_GPU_NAME") or saved.get("name") or DEFAULT_GPU_NAME)
    memory = int(
        env.get("ORCH_SIM_GPU_MEMORY_MIB") or saved.get("memory_mib") or DEFAULT_GPU_MEMORY_MIB
    )
    driver = str(
        env.get("ORCH_SIM_DRIVER_VERSION") or saved.get("driver_version") or DRIVER_VERSION
    )
    return GpuFacts(count=count, name=name, memory_mib=memory, driver_version=driver)


def gpu_uuid(index: int, name: str) -> str:
    """Stable per (index, name), in nvidia-smi's `GPU-xxxxxxxx-...` form."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"orch-sim/{name}/{index}"))


def pci_bus_id(index: int) -> str:
    return f"00000000:{index + 1:02X}:00.0"


_ORDINAL = re.compile(r"\d+")


def visible_devices(value: str | None, facts: GpuFacts) -> list[int]:
    """The GPUs (physical indices, in CUDA's order) a process sees with ``CUDA_VISIBLE_DEVICES``.

    As CUDA and torch read it: unset, every GPU; items are indices or (prefixes of) UUIDs,
    taken in the order given; the first invalid item (not a GPU of this host, negative, not a
    number) ends the list; a GPU named twice leaves none visible.
    """
    if value is None:
        return list(range(facts.count))
    seen: list[int] = []
    for item in (part.strip() for part in value.split(",")):
        if item.startswith("GPU-"):
            matches = [i for i in range(facts.count) if gpu_uuid(i, facts.name).startswith(item)]
            index = matches[0] if len(matches) == 1 else -1
        else:
            digits = _ORDINAL.match(item)
            index = int(digits.group()) if digits else -1
        if index in seen:
            return []
        if not 0 <= index < facts.count:
            break
        seen.append(index)
    return seen


@contextlib.contextmanager
def memory_lock(state: Path) -> Iterator[None]:
    """Held while an engine checks free memory and claims it (one host's engines in turn)."""
    state.mkdir(parents=True, exist_ok=True)
    with (state / "gpus.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def held_by_others(state: Path, gpus: list[int], pid: int) -> dict[int, int]:
    """MiB other live engines hold on each of ``gpus`` (physical indices)."""
    others = [p for p in live_processes(state) if p.pid != pid]
    return {gpu: sum(p.memory_mib for p in others if gpu in p.gpus) for gpu in gpus}


def _start_ticks(pid: int) -> int | None:
    """Process start time (clock ticks since boot), None when gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def register_process(
    state: Path, *, pid: int, gpus: list[int], memory_mib: int, process_name: str
) -> Path:
    state.mkdir(parents=True, exist_ok=True)
    path = state / f"gpu-{pid}.json"
    record = {
        "pid": pid,
        "gpus": gpus,
        "memory_mib": memory_mib,
        "process_name": process_name,
        "start_ticks": _start_ticks(pid),
    }
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record) + "\n")
    os.replace(tmp, path)
    return path


def _replace(path: Path, text: str) -> None:
    """Write ``text`` whole or not at all: a reader never sees half a line."""
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(OSError):
        tmp.write_text(text)
        os.replace(tmp, path)


def unregister_process(state: Path, pid: int) -> None:
    for name in (f"gpu-{pid}.json", f"activity-{pid}.json", f"nvml-{pid}.txt"):
        with contextlib.suppress(FileNotFoundError):
            (state / name).unlink()


# What the simulated GPUs draw and run at: an RTX A6000's idle figures, and busy ones that grow
# with the engine's batch (a busier step draws more power) up to the board's limit.
IDLE_POWER_W, BUSY_POWER_W, POWER_PER_REQUEST_W, POWER_LIMIT_W = 22.51, 190.0, 12.0, 300.0
IDLE_SM_MHZ, BUSY_SM_MHZ, IDLE_MEM_MHZ, BUSY_MEM_MHZ = 210, 1740, 405, 8001
# A throttled night's (nights.py): the busy SM clock, and the clock-event reasons as NVML's bits.
THROTTLED_SM_MHZ = 1410
THROTTLE_REASONS = {"sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40}


class GpuActivity:
    """An engine listener that tells the host's ``nvidia-smi`` how many requests the engine
    runs, and the night's throttling of its GPUs (``nights.py``): ``activity-<pid>.json`` in
    the state folder, rewritten when the number changes (a request admitted or finished; never
    per step)."""

    def __init__(
        self,
        state: Path,
        pid: int,
        throttle: str | None = None,
        *,
        gpus: Sequence[int] = (),
        memory_mib: int = 0,
    ) -> None:
        self.path = state / f"activity-{pid}.json"
        self.nvml_path = state / f"nvml-{pid}.txt"  # the same for the C library (nvml.c)
        self.throttle = throttle
        self.mask = sum(1 << g for g in gpus)
        self.memory_mib = memory_mib
        self.running = -1
        self.update(0)

    def update(self, running: int) -> None:
        if running == self.running:
            return
        self.running = running
        bits = THROTTLE_REASONS.get(self.throttle or "", 0)
        line = f"{self.mask} {running} {bits} {self.memory_mib}\n"
        _replace(self.path, json.dumps({"running": running, "throttle": self.throttle}) + "\n")
        _replace(self.nvml_path, line)

    def on_prefill(self, batch: list[Any], wall_s: float, running: int, queued: int) -> None:
        self.update(running + len(batch))

    def on_decode(self, batch: list[Any], tokens: int, wall_s: float) -> None:
        self.update(len(batch))

    def on_chunk(self, req: Any, tokens: int, gap_s: float | None) -> None:
        pass

    def on_finish(self, req: Any) -> None:
        self.update(max(0, self.running - 1))


@dataclass(frozen=True)
class Activity:
    """What a GPU's engines do now: requests running, and a throttle reason (None: none)."""

    running: int = 0
    throttle: str | None = None


def activity(state: Path, pids: list[int]) -> Activity:
    """The engines of ``pids`` (live ones) now, by their activity files."""
    total, throttle = 0, None
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            record = json.loads((state / f"activity-{pid}.json").read_text())
            total += int(record["running"])
            throttle = throttle or record.get("throttle")
    return Activity(total, throttle if isinstance(throttle, str) else None)


def power_w(running: int) -> float:
    return (
        IDLE_POWER_W
        if running <= 0
        else min(POWER_LIMIT_W, BUSY_POWER_W + POWER_PER_REQUEST_W * running)
    )


def live_processes(state: Path) -> list[GpuProcess]:
    """Processes holding GPU memory now; files of dead processes are removed on the way."""
    procs: list[GpuProcess] = []
    for path in sorted(state.glob("gpu-*.json")):
        try:
            record = json.loads(path.read_text())
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        ticks = _start_ticks(pid)
        if ticks is None or (record.get("start_ticks") not in (None, ticks)):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        procs.append(
            GpuProcess(
                pid=pid,
                gpus=tuple(int(g) for g in record.get("gpus", [])),
                memory_mib=int(record.get("memory_mib", 0)),
                process_name=str(record.get("process_name", "python3")),
            )
        )
    return procs


def used_memory_mib(facts: GpuFacts, procs: list[GpuProcess]) -> list[int]:
    used = [IDLE_USED_MIB] * facts.count
    for proc in procs:
        for gpu in proc.gpus:
            if 0 <= gpu < facts.count:
                used[gpu] = min(facts.memory_mib, used[gpu] + proc.memory_mib)
    return used
