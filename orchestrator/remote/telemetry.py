"""GPU telemetry on the host: NVML through ctypes, ``nvidia-smi`` as the fallback, a sampler.

What decides a serving configuration's cost on one's own GPUs is energy and clock time, and
what tells "the software got slower" from "the GPU ran at another clock" is the clocks and the
throttle reasons during the window. The agent samples them while the load generator measures.

- ``NvmlReader`` reads ``libnvidia-ml.so.1`` directly (the driver's own library, no Python
  package): the energy counter (mJ since the driver loaded, monotonic; Volta and newer), power,
  SM and memory clocks, memory used, utilisation, temperature and the clock-event (throttle)
  reasons. A field this GPU or driver does not offer is None, never an error.
- ``SmiReader`` is the fallback where NVML cannot be loaded: one ``nvidia-smi --query-gpu``
  per sample. It has no energy counter: the energy is then integrated from power (and the
  result says so).
- ``Sampler`` reads every ``interval_s`` on a thread of its own (a GIL-light loop of C calls,
  so the load generator's event loop is not delayed), from before the measured window to after
  it, and keeps every sample with its epoch time (the clock the load generator's window uses).

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import ctypes
import os
import queue
import shutil
import subprocess
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from .gpus import na
from .util import NVIDIA_SMI
from .wire import GpuSample as GpuSample
from .wire import TelemetryResult, TelemetrySpec

NVML_LIBRARY = "libnvidia-ml.so.1"
DEFAULT_INTERVAL_S = 0.1
SMI_START_S = 5.0  # nvidia-smi's first line, or the fallback is not available
# nvidia-smi's power.draw is already a 1 s average (Ampere and newer), and each of its lines
# costs the host parsing in the load generator's process: the fallback reads twice a second
SMI_MIN_INTERVAL_S = 0.5
MAX_SAMPLES = 40_000  # per verb: a long run keeps every k-th read (its memory stays bounded)
SMI_FIELDS = (
    "timestamp",
    "index",
    "power.draw",
    "clocks.current.sm",
    "clocks.current.memory",
    "memory.used",
    "utilization.gpu",
    "temperature.gpu",
    # the pre-r535 name, which newer drivers still accept ("clocks_event_reasons" since)
    "clocks_throttle_reasons.active",
)
SMI_QUERY = [f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,nounits"]

# nvmlClocksEventReasons bits (nvml.h); a sample's ``reasons`` is their OR
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
_NVML_CLOCK_SM, _NVML_CLOCK_MEM, _NVML_TEMPERATURE_GPU = 1, 2, 0


class TelemetryUnavailable(Exception):
    """Neither NVML nor nvidia-smi can be read: the message says why."""


def reason_names(bits: int) -> List[str]:
    """``0x24`` -> ``["sw_power_cap", "sw_thermal"]``; unknown bits as ``0x...``."""
    names = [name for bit, name in REASONS.items() if bits & bit]
    rest = bits & ~sum(REASONS)
    return names + ([hex(rest)] if rest else [])


# ---------------------------------------------------------------------------------------------
# nvidia-smi: a query plus a pure parser


def _number(text: str) -> Optional[float]:
    value = na(text)
    if value is None:
        return None
    try:
        return float(value.split()[0])  # "84.88 W" when asked without nounits
    except (ValueError, IndexError):
        return None


def _int(text: str) -> Optional[int]:
    value = _number(text)
    return None if value is None else int(value)


def _bits(text: str) -> Optional[int]:
    value = na(text)
    if value is None:
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        return None


def _epoch(text: str) -> Optional[float]:
    """nvidia-smi's timestamp (local time, ``2026/12/04 13:30:04.836``) as epoch seconds."""
    value = na(text)
    if value is None:
        return None
    whole, _, fraction = value.partition(".")
    try:
        seconds = time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S"))
        return seconds + (float(f"0.{fraction}") if fraction.isdigit() else 0.0)
    except (ValueError, OverflowError):
        return None


def _field_name(header: str) -> str:
    """``"power.draw [W]"`` -> ``"power.draw"``; the throttle reasons under their newer name."""
    name = header.strip().split(" [", 1)[0].strip()
    return name.replace("clocks_throttle_reasons.", "clocks_event_reasons.")


def parse_smi_csv(text: str, t: float) -> List[GpuSample]:
    """``nvidia-smi --query-gpu=... --format=csv`` (with its header, units or not) as samples
    taken at their ``timestamp`` field (else at ``t``), read by the header's field names, so any
    query holding the fields works;
    a GPU without an ``index`` field is numbered by its row. Lines that do not parse (a
    driver message, a truncated line) are left out."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    column = {_field_name(h): i for i, h in enumerate(lines[0].split(","))}
    samples = []
    for row, line in enumerate(lines[1:]):
        fields = [field.strip() for field in line.split(",")]  # no field here holds a comma
        if len(fields) != len(column):
            continue

        def get(name: str, fields: List[str] = fields) -> str:
            return fields[column[name]] if name in column else ""

        index = _int(get("index"))
        stamp = _epoch(get("timestamp"))
        samples.append(
            GpuSample(
                t=t if stamp is None else stamp,
                gpu=row if index is None else index,
                energy_mj=None,
                power_w=_number(get("power.draw")),
                sm_mhz=_int(get("clocks.current.sm")),
                mem_mhz=_int(get("clocks.current.memory")),
                mem_used_mib=_int(get("memory.used")),
                util_pct=_int(get("utilization.gpu")),
                temp_c=_int(get("temperature.gpu")),
                reasons=_bits(get("clocks_event_reasons.active")),
            )
        )
    return samples


class SmiReader:
    """The fallback: ``nvidia-smi ... -lms N``, one process that prints a line per GPU every
    N ms (a process per sample would cost tens of ms of CPU each), read on a thread of its own;
    each sample carries nvidia-smi's own timestamp, so a late read does not move it."""

    source = "nvidia-smi"

    def __init__(self, indices: Sequence[int], interval_s: float = DEFAULT_INTERVAL_S) -> None:
        path = shutil.which(NVIDIA_SMI)
        if path is None:
            raise TelemetryUnavailable(f"nvidia-smi: {NVIDIA_SMI} not found on PATH")
        self.indices = list(indices)
        ids = ",".join(str(i) for i in self.indices)
        self.interval_s = max(interval_s, SMI_MIN_INTERVAL_S)
        loop = str(int(self.interval_s * 1000))
        self.argv = [path, *SMI_QUERY, f"--id={ids}", "-lms", loop]
        self._lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
        threading.Thread(target=self._pump, name="orch-nvidia-smi", daemon=True).start()
        self._header: Optional[str] = None
        self._pending: List[str] = []
        if not self._first_line(SMI_START_S):
            try:  # its output ended: it exited, or is about to
                code: Optional[int] = self._proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                code = None
            self.close()
            raise TelemetryUnavailable(
                f"nvidia-smi: no sample within {SMI_START_S:g} s"
                if code is None
                else f"nvidia-smi exited with status {code} before its first sample"
            )

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _first_line(self, timeout: float) -> bool:
        """Wait for the header and a first row (nvidia-smi answers in well under a second)."""
        deadline = time.monotonic() + timeout
        while len(self._pending) < 2:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False
            if line is None:
                return False
            self._pending.append(line)
        return True

    def read(self) -> List[GpuSample]:
        lines, self._pending = self._pending, []
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                break
            if line is None:
                raise TelemetryUnavailable(f"nvidia-smi exited ({self._proc.poll()})")
            lines.append(line)
        samples: List[GpuSample] = []
        for line in lines:
            if line.lstrip().startswith("timestamp"):
                self._header = line
            elif self._header is not None:
                samples += parse_smi_csv(f"{self._header}\n{line}", t=time.time())
        return samples

    def kill(self) -> None:
        """SIGTERM to nvidia-smi, without waiting for it."""
        if self._proc.poll() is None:
            self._proc.terminate()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


# ---------------------------------------------------------------------------------------------
# NVML through ctypes


class _Memory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _ProcessInfo(ctypes.Structure):
    """nvmlProcessInfo_t of the _v2/_v3 process queries (drivers 470 and newer)."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


_NVML_ERROR_INSUFFICIENT_SIZE = 7


class NvmlReader:
    """NVML's readings for the GPUs of ``indices`` (nvidia-smi's indices: NVML numbers the
    devices alike). Raises TelemetryUnavailable when the library or a device cannot be had."""

    source = "nvml"

    def __init__(self, indices: Sequence[int], library: str = NVML_LIBRARY) -> None:
        try:
            self.nvml = ctypes.CDLL(library)
        except OSError as e:
            raise TelemetryUnavailable(f"cannot load {library}: {e}") from None
        self._check(self.nvml.nvmlInit_v2(), "nvmlInit_v2")
        self.indices = list(indices)
        self.handles = []
        for index in self.indices:
            handle = ctypes.c_void_p()
            ret = self.nvml.nvmlDeviceGetHandleByIndex_v2(
                ctypes.c_uint(index), ctypes.byref(handle)
            )
            self._check(ret, f"GPU {index}: nvmlDeviceGetHandleByIndex_v2")
            self.handles.append(handle)
        self._reasons = self._function(
            "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"
        )

    def _function(self, *names: str) -> Optional[Callable[..., int]]:
        """The first of ``names`` this library exports (older drivers lack newer names)."""
        for name in names:
            function = getattr(self.nvml, name, None)
            if function is not None:
                return function
        return None

    def _check(self, ret: int, what: str) -> None:
        if ret != 0:
            raise TelemetryUnavailable(f"NVML {what} failed: {self._error(ret)}")

    def _error(self, ret: int) -> str:
        describe = getattr(self.nvml, "nvmlErrorString", None)
        if describe is None:
            return f"error {ret}"
        describe.restype = ctypes.c_char_p
        text = describe(ret)
        return f"{text.decode(errors='replace') if text else ''} ({ret})"

    def _uint(self, function: Callable[..., int], *args: object) -> Optional[int]:
        value = ctypes.c_uint()
        return value.value if function(*args, ctypes.byref(value)) == 0 else None

    def _ulonglong(self, function: Optional[Callable[..., int]], handle: object) -> Optional[int]:
        if function is None:
            return None
        value = ctypes.c_ulonglong()
        return value.value if function(handle, ctypes.byref(value)) == 0 else None

    def read(self) -> List[GpuSample]:
        t = time.time()
        return [self._sample(t, index, self.handles[k]) for k, index in enumerate(self.indices)]

    def _sample(self, t: float, index: int, handle: object) -> GpuSample:
        nvml = self.nvml
        power = self._uint(nvml.nvmlDeviceGetPowerUsage, handle)
        memory = _Memory()
        used = (
            memory.used if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0 else None
        )
        util = _Utilization()
        busy = (
            util.gpu
            if nvml.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(util)) == 0
            else None
        )
        return GpuSample(
            t=t,
            gpu=index,
            energy_mj=self._ulonglong(nvml.nvmlDeviceGetTotalEnergyConsumption, handle),
            power_w=None if power is None else power / 1000.0,
            sm_mhz=self._uint(nvml.nvmlDeviceGetClockInfo, handle, ctypes.c_int(_NVML_CLOCK_SM)),
            mem_mhz=self._uint(nvml.nvmlDeviceGetClockInfo, handle, ctypes.c_int(_NVML_CLOCK_MEM)),
            mem_used_mib=None if used is None else used // (1024 * 1024),
            util_pct=busy,
            temp_c=self._uint(
                nvml.nvmlDeviceGetTemperature, handle, ctypes.c_int(_NVML_TEMPERATURE_GPU)
            ),
            reasons=self._ulonglong(self._reasons, handle),
        )

    def processes(self, index: int) -> Optional[List[int]]:
        """The pids computing on GPU ``index`` now; None when this NVML cannot say."""
        handle = self.handles[self.indices.index(index)]
        function = self._function(
            "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"
        )
        if function is None:
            return None
        count = ctypes.c_uint(0)
        ret = function(handle, ctypes.byref(count), None)
        if ret == 0:
            return []
        if ret != _NVML_ERROR_INSUFFICIENT_SIZE:
            return None
        count = ctypes.c_uint(count.value + 8)  # processes may start between the two calls
        infos = (_ProcessInfo * count.value)()
        if function(handle, ctypes.byref(count), infos) != 0:
            return None
        return sorted({infos[i].pid for i in range(count.value)})

    def power_limit_w(self, index: int) -> Optional[float]:
        """The enforced board power limit of GPU ``index``, W."""
        handle = self.handles[self.indices.index(index)]
        limit = self._uint(self.nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        return None if limit is None else limit / 1000.0

    def close(self) -> None:
        self.nvml.nvmlShutdown()


Reader = Union[NvmlReader, SmiReader]


def open_reader(
    indices: Sequence[int],
    library: str = NVML_LIBRARY,
    interval_s: float = DEFAULT_INTERVAL_S,
) -> Reader:
    """NVML when it loads, else nvidia-smi when it answers; TelemetryUnavailable naming both
    reasons otherwise."""
    try:
        return NvmlReader(indices, library)
    except TelemetryUnavailable as nvml_error:
        try:
            return SmiReader(indices, interval_s)
        except TelemetryUnavailable as smi_error:
            raise TelemetryUnavailable(f"{nvml_error}; {smi_error}") from None


# ---------------------------------------------------------------------------------------------
# the sampler


class Sampler:
    """Reads ``reader`` every ``interval_s`` on its own thread until ``stop``; keeps every
    sample and the reader's failures (a failed read is a gap, not the end)."""

    def __init__(self, reader: Reader, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.reader = reader
        self.interval_s = interval_s
        self.samples: List[GpuSample] = []
        self.errors: List[str] = []
        self.cpu_s = 0.0  # the sampler thread's own CPU time
        self._stop = threading.Event()
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, name="orch-telemetry", daemon=True)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> List[GpuSample]:
        self._stop.set()
        self._thread.join()
        return self.samples

    def latest(self, gpus: int) -> Tuple[Optional[float], Optional[float]]:
        """(power of all GPUs together, their mean SM clock) at the newest read, for the live
        progress; (None, None) before the first read or when the GPU does not say. Each
        GPU's newest sample: nvidia-smi's lines may arrive one GPU ahead of the others, and
        the last ``gpus`` samples would then count one GPU twice."""
        newest: Dict[int, GpuSample] = {}
        for sample in reversed(self.samples[-4 * gpus :] if gpus > 0 else []):
            newest.setdefault(sample.gpu, sample)
            if len(newest) == gpus:
                break
        read = list(newest.values())
        power = [s.power_w for s in read if s.power_w is not None]
        clocks = [s.sm_mhz for s in read if s.sm_mhz is not None]
        return (
            round(sum(power), 1) if power else None,
            round(sum(clocks) / len(clocks)) if clocks else None,
        )

    def abandon(self) -> None:
        """Stop at once: no last read, no join; nvidia-smi (the fallback) is sent SIGTERM."""
        self._abandoned = True
        self._stop.set()
        if isinstance(self.reader, SmiReader):
            self.reader.kill()

    def _run(self) -> None:
        cpu0 = time.thread_time()
        due = time.monotonic()
        try:
            while True:
                try:
                    self.samples.extend(self.reader.read())
                except TelemetryUnavailable as e:
                    if len(self.errors) < 20:
                        self.errors.append(str(e))
                # on a schedule, not "interval after the read": reads do not drift the rate;
                # a late wake-up skips the reads it missed (a gap shows it) instead of bursting
                due += self.interval_s
                now = time.monotonic()
                if due < now:
                    due = now
                if self._stop.wait(due - now):
                    break
            if self._abandoned:
                return
            if isinstance(self.reader, SmiReader):  # its lines come on nvidia-smi's own clock
                time.sleep(self.reader.interval_s * 1.5)
            self.samples.extend(self.reader.read())  # the window's end is always covered
        except TelemetryUnavailable as e:
            self.errors.append(str(e))
        finally:
            self.cpu_s = time.thread_time() - cpu0


def _process_group(pid: int) -> Optional[int]:
    """``pid``'s process group; None for a process this one cannot see (another container's,
    or gone): not the engine's either way."""
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class Recording:
    """The ``loadgen`` verb's telemetry: started before its first request, stopped after its
    last; a host where neither NVML nor nvidia-smi answers gives a result saying why (the
    measurement goes on without)."""

    def __init__(self, spec: TelemetrySpec) -> None:
        self.spec = spec
        self.error: Optional[str] = None
        self.sampler: Optional[Sampler] = None
        self.limits: Dict[str, float] = {}
        # the engine's GPUs' other processes, at the start (see ``_foreign``)
        self.foreign: Optional[Dict[str, List[int]]] = None
        try:
            reader = open_reader(spec.gpus, spec.library or NVML_LIBRARY, spec.interval_s)
        except TelemetryUnavailable as e:
            self.error = str(e)
            return
        if isinstance(reader, NvmlReader):
            for index in spec.gpus:
                limit = reader.power_limit_w(index)
                if limit is not None:
                    self.limits[str(index)] = limit
        interval = reader.interval_s if isinstance(reader, SmiReader) else spec.interval_s
        self.foreign = self._foreign(reader, {})
        self.sampler = Sampler(reader, interval).start()

    def latest(self) -> Tuple[Optional[float], Optional[float]]:
        """The GPUs' newest read (``Sampler.latest``); (None, None) when not sampling."""
        if self.sampler is None:
            return None, None
        return self.sampler.latest(len(self.spec.gpus))

    def abandon(self) -> None:
        """The verb is cut short: stop sampling without its last read, and without waiting."""
        if self.sampler is not None:
            self.sampler.abandon()

    def _foreign(
        self, reader: Reader, seen: Optional[Dict[str, List[int]]]
    ) -> Optional[Dict[str, List[int]]]:
        """``seen`` with the processes on the sampled GPUs now that are not the engine's
        (another process group); None when they cannot be looked for."""
        pgid = self.spec.engine_pgid
        if pgid is None or seen is None or not isinstance(reader, NvmlReader):
            return None
        out = {gpu: list(pids) for gpu, pids in seen.items()}
        for index in self.spec.gpus:
            pids = reader.processes(index)
            if pids is None:
                return None
            others = [pid for pid in pids if _process_group(pid) != pgid]
            if others:
                out[str(index)] = sorted(set(out.get(str(index), [])) | set(others))
        return out

    def stop(self) -> TelemetryResult:
        if self.sampler is None:
            return TelemetryResult(source=None, interval_s=self.spec.interval_s, error=self.error)
        interval = self.sampler.interval_s
        samples = self.sampler.stop()
        foreign = self._foreign(self.sampler.reader, self.foreign)
        self.sampler.reader.close()
        thin = 1
        while len(samples) // thin > MAX_SAMPLES:
            thin += 1
        if thin > 1:  # keep whole reads (all GPUs of one moment) and the very last one
            per_read = max(1, len(self.spec.gpus))
            reads = [samples[i : i + per_read] for i in range(0, len(samples), per_read)]
            kept = reads[::thin] + ([reads[-1]] if (len(reads) - 1) % thin else [])
            samples = [s for read in kept for s in read]
        return TelemetryResult(
            source=self.sampler.reader.source,
            interval_s=interval,
            samples=samples,
            power_limit_w=self.limits,
            read_errors=self.sampler.errors,
            cpu_s=round(self.sampler.cpu_s, 4),
            thin=thin,
            foreign_pids=foreign,
        )
