"""Log path: engine log lines per second that `orch run`'s tail + parse sustains end to end, and
the delay from a line written on the host to its parsed event on the controller.

The path measured is the one `orch run` follows: the host's agent (``tail`` verb, launched and
tailed through :class:`~orchestrator.runner.server.Server`) over a real OpenSSH ``sshd`` on
127.0.0.1 (started by ``benchmarks.sshd``), and on an embedded host (``transport: embedded``);
on the controller, ``execute._follow`` masks each batch of lines, writes it to server.log,
parses it (``LogFollower``) and writes its events to events.jsonl, exactly as in a run. The
"engine" the agent launches is a writer that appends log lines and keeps the moment it wrote
each one; its metrics lines are vLLM's ``Engine 000: Avg prompt throughput: ...`` with the
line's sequence number as the pid of the ``(APIServer pid=N)`` prefix, so every parsed event
says which line it is. ``time.monotonic`` is one clock for both sides on one machine.

- throughput, two logs of ``--lines`` lines written as fast as the writer can (256 a write);
  lines / (last parsed event - first write):
  - worst case: every line a metrics line, so every line is parsed and makes an event;
  - engine log: one line in ``MIX_EVERY`` a metrics line, the others the request lines a vLLM
    server under load prints with request logging on (``Received request`` with its sampling
    parameters, ``Added request``, the HTTP access line), in turn;
  once more on the worst-case log with ``server.tail()`` alone (no mask, parse or files): what
  the agent and the transport carry, the ceiling of the whole;
- delay: ``--rate`` metrics lines a second for ``--seconds``, one a write; parsed-event time -
  write time per line, median, p99 and max.

Line 0 is written first, and the rest only once its event reached the controller, so that
neither figure counts the start of the tail.

    python -m benchmarks.logpath
    python -m benchmarks.logpath --smoke   # 5k lines, 1 s at 1k lines/s, for CI
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from benchmarks.common import Bench, Target, arguments
from benchmarks.sshd import Fleet, free_port
from orchestrator.agent.client import Agent
from orchestrator.config import HostConfig, RunSpec
from orchestrator.engines import engine_for
from orchestrator.engines.logs import LogFollower
from orchestrator.remote.wire import LaunchSpec
from orchestrator.results.store import AppendLog
from orchestrator.runner.execute import _follow
from orchestrator.runner.progress import RunEvent
from orchestrator.runner.server import Server, ServerRegistry
from orchestrator.runner.state import LiveState, RunJob
from orchestrator.sim.embedded import SimulatedHosts
from orchestrator.transport import ConnectionPool

LINES_PER_S = 100_000.0  # the targets
P99_MS = 100.0
MIX_EVERY = 100  # the engine log: one line in this many is a metrics line

# vLLM's engine stats line; {} is the line's sequence number
LINE = (
    "(APIServer pid={}) INFO 12-02 10:57:11 [loggers.py:123] Engine 000: Avg prompt throughput: "
    "1234.5 tokens/s, Avg generation throughput: 567.8 tokens/s, Running: 12 reqs, Waiting: 0 "
    "reqs, GPU KV cache usage: 34.5%, Prefix cache hit rate: 12.3%\n"
)
# what vLLM prints per request with request logging on ({} is the line's sequence number)
REQUEST_LINES = (
    "(APIServer pid=4021) INFO 12-02 10:57:11 [logger.py:41] Received request "
    "chatcmpl-{:032x}: prompt: '<|im_start|>user\\nWrite a haiku about the sea.<|im_end|>\\n"
    "<|im_start|>assistant\\n', params: SamplingParams(n=1, presence_penalty=0.0, "
    "frequency_penalty=0.0, repetition_penalty=1.0, temperature=0.7, top_p=1.0, top_k=0, "
    "min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], "
    "include_stop_str_in_output=False, ignore_eos=False, max_tokens=256, min_tokens=0, "
    "logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
    "spaces_between_special_tokens=True, truncate_prompt_tokens=None, guided_decoding=None, "
    "extra_args=None), prompt_token_ids: None, prompt_embeds shape: None, lora_request: None.\n",
    "(APIServer pid=4021) INFO 12-02 10:57:11 [async_llm.py:273] Added request chatcmpl-{:032x}.\n",
    '(APIServer pid=4021) INFO:     127.0.0.1:{} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
)
WRITER = """\
import os, sys, time
from array import array
count, rate, every, go, out = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
LINE, OTHERS = @LINE@, @OTHERS@
def line(i):
    return LINE.format(i) if i % every == 0 else OTHERS[i % len(OTHERS)].format(i)
times = array("d", [time.monotonic()])
os.write(1, line(0).encode())
while not os.path.exists(go):
    time.sleep(0.001)
batch = 1 if rate else 256
start, seq = time.monotonic(), 1
while seq <= count:
    n = min(batch, count + 1 - seq)
    if rate:
        time.sleep(max(0.0, start + (seq - 1) / rate - time.monotonic()))
    chunk = "".join(line(i) for i in range(seq, seq + n)).encode()
    times.extend([time.monotonic()] * n)
    os.write(1, chunk)
    seq += n
with open(out, "wb") as f:
    f.write(times.tobytes())
"""


def mix_bytes() -> float:
    """The engine log's mean line length, in bytes."""
    lines = [LINE.format(0)] + [
        REQUEST_LINES[i % len(REQUEST_LINES)].format(i) for i in range(1, MIX_EVERY)
    ]
    return sum(len(line.encode()) for line in lines) / len(lines)


@dataclass(frozen=True)
class Outcome:
    lines: int
    seconds: float  # first measured write -> last parsed event
    delays_ms: list[float]
    cpu_s: float  # the controller process's CPU time meanwhile

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.lines * 1e6

    @property
    def per_s(self) -> float:
        return self.lines / self.seconds

    def quantile(self, q: int) -> float:
        """The ``q``-th percentile of the delays (50: median)."""
        return statistics.quantiles(self.delays_ms, n=100, method="inclusive")[q - 1]


class Stamps:
    """When each parsed event arrived: ``_follow`` tells its observer once per batch of lines,
    so the events the follower gained since are stamped then (without parse: each line is).
    The first arrival lets the writer go on (it waits for ``go``)."""

    def __init__(self, go: Path, follower: LogFollower) -> None:
        self.go = go
        self.follower = follower
        self.at: list[float] = []

    def on_event(self, event: RunEvent | None) -> None:
        self.arrived(len(self.follower.events) - len(self.at))

    def arrived(self, count: int) -> None:
        self.at.extend([time.monotonic()] * count)
        if count and len(self.at) == count:
            self.go.touch()


@dataclass(frozen=True)
class _Job:
    key: str


async def follow_writer(
    agent: Agent,
    host: HostConfig,
    work: Path,
    count: int,
    rate: float,
    *,
    every: int = 1,
    parse: bool = True,
) -> Outcome:
    """Launch the writer through the agent as a run's engine; follow its log as a run does
    (``parse=False``: ``server.tail()`` alone, each batch dropped as it comes). One line in
    ``every`` is a metrics line; ``count`` is a multiple of it, so the last line is one."""
    name = work.name
    run = RunSpec.model_validate({"name": name, "engine": "vllm", "model": "Qwen/Qwen3-8B"})
    engine = engine_for(run)
    work.mkdir()
    writer, times, go = work / "writer.py", work / "times.bin", work / "go"
    source = WRITER.replace("@LINE@", repr(LINE)).replace("@OTHERS@", repr(REQUEST_LINES))
    writer.write_text(source)
    argv = ["python", str(writer), str(count), str(rate), str(every), str(go), str(times)]
    port = free_port()
    state = LiveState(follower=LogFollower(engine="vllm"), secrets=engine.secrets(run, host))
    stamps = Stamps(go, state.follower)
    async with ServerRegistry() as registry:
        server = Server(agent, host=host, run=run, run_id=name, port=port, engine=engine)
        registry.add(server)  # stopped on the way out, whatever happens
        spec = LaunchSpec(run_id=name, workdir=await agent.workdir(), argv=argv, port=port)
        server.record = await agent.launch(spec)
        server.log_offset = server.record.log_offset
        cpu = time.process_time()
        if parse:
            logs = AppendLog(work / "server.log"), AppendLog(work / "events.jsonl")
            job = cast(RunJob, _Job(key=name))  # _follow reads only the job's key
            await _follow(server, state, *logs, stamps, job)
            for log in logs:
                log.close()
        else:
            async for batch in server.tail():
                stamps.arrived(len(batch.lines))
        cpu = time.process_time() - cpu
    written = array("d")
    written.frombytes(times.read_bytes())
    seqs = [getattr(e, "pid", -1) for e in state.follower.events] if parse else []
    events = count // every + 1 if parse else count + 1
    if len(stamps.at) != events or (parse and seqs != list(range(0, count + 1, every))):
        raise SystemExit(f"{name}: {len(stamps.at)} events of {events} arrived, or out of order")
    pairs = zip(stamps.at[1:], seqs[1:], strict=True) if parse else iter(())
    delays = [(at - written[seq]) * 1000 for at, seq in pairs]
    return Outcome(count, stamps.at[-1] - written[1], delays, cpu)


async def measure(host: HostConfig, pool: ConnectionPool, tmp: Path, args: Sizes) -> Row:
    agent = Agent(await pool.get(host), host, connect=functools.partial(pool.get, host))
    await agent.ensure()  # the agent pushed before timing, as after a run's preflight
    tag = host.transport
    alone = await follow_writer(agent, host, tmp / f"{tag}-alone", args.lines, 0, parse=False)
    burst = await follow_writer(agent, host, tmp / f"{tag}-burst", args.lines, 0)
    mix = await follow_writer(agent, host, tmp / f"{tag}-mix", args.lines, 0, every=MIX_EVERY)
    steady = await follow_writer(agent, host, tmp / f"{tag}-steady", args.steady, args.rate)
    return Row(tag, alone, burst, mix, steady)


@dataclass(frozen=True)
class Sizes:
    lines: int  # a multiple of MIX_EVERY
    rate: float
    steady: int  # lines written at ``rate``


@dataclass(frozen=True)
class Row:
    transport: str
    alone: Outcome  # the tail without parse or files
    burst: Outcome  # every line a metrics line
    mix: Outcome  # one in MIX_EVERY
    steady: Outcome

    def cells(self) -> list[str | float | int | None]:
        return [
            "SSH (OpenSSH sshd, 127.0.0.1)" if self.transport == "ssh" else "embedded",
            self.alone.per_s,
            self.alone.cpu_us,
            self.mix.per_s,
            self.mix.cpu_us,
            self.burst.per_s,
            self.burst.cpu_us,
            self.steady.quantile(50),
            self.steady.quantile(99),
            max(self.steady.delays_ms),
        ]


async def ssh_row(tmp: Path, sizes: Sizes) -> Row:
    with Fleet(tmp / "sshd", 1) as fleet:
        sshd = fleet.hosts[0]
        host = HostConfig(
            name=sshd.name,
            address="127.0.0.1",
            port=sshd.port,
            user=sshd.user,
            identity_file=str(fleet.client_key),
            python=sys.executable,
            workdir=str(sshd.workdir),
            connect_timeout=10,
        )
        pool = ConnectionPool(known_hosts=fleet.known_hosts, ssh_config=[fleet.ssh_config])
        async with pool:
            return await measure(host, pool, tmp, sizes)


async def embedded_row(tmp: Path, sizes: Sizes) -> Row:
    host = HostConfig(name="emb", transport="embedded", python=sys.executable, connect_timeout=10)
    async with ConnectionPool(embedded_root=tmp / "embedded", embedded=SimulatedHosts) as pool:
        return await measure(host, pool, tmp, sizes)


def notes(sizes: Sizes, rate: int, ssh: Row) -> list[str]:
    """What the rows are, and which one the lines/s target is judged on."""
    mix = f"1 in {MIX_EVERY}"
    return [
        f"Lines/s: {sizes.lines:,} lines written as fast as the writer can. Engine log: "
        f"{mix} lines is vLLM's engine stats line, the others the request lines vLLM prints "
        "with request logging on (`Received request` with its sampling parameters, "
        "`Added request`, the HTTP access line) in turn, "
        f"{mix_bytes():.0f} bytes a line on average. Worst case: every line the stats "
        f"line ({len(LINE.format(0))} bytes), so every line is parsed into an event. Delay: "
        f"{sizes.steady:,} stats lines at {rate:,} lines/s. With parse, each batch of "
        "lines is masked, written to server.log, parsed, and its events written to "
        "events.jsonl, as `orch run` does; the tail alone (on the worst-case log) drops "
        "each batch as it comes. CPU µs/line: the controller process's CPU time over the "
        "lines (the embedded host's SSH server runs in that process too; the agent and "
        "sshd are processes of their own).",
        "The lines/s target is judged on the engine log, not the worst case: an engine "
        "prints its stats line once every few seconds (vLLM every 10 s, SGLang every 40 "
        "decode steps), so a log that grows by thousands of lines a second is made of "
        "request lines; the worst case measures the parser, which costs tens of µs per "
        f"metrics line. Over SSH: engine log {ssh.mix.per_s:,.0f} lines/s, worst case "
        f"{ssh.burst.per_s:,.0f} lines/s.",
    ]


def main() -> None:
    args = arguments(
        __doc__ or "", "5k lines, 1 s at 1k lines/s", lines=200_000, rate=1000, seconds=10
    )
    seconds = 1 if args.smoke else args.seconds
    lines = 5_000 if args.smoke else args.lines
    lines = -(-lines // MIX_EVERY) * MIX_EVERY  # the engine log ends on a metrics line
    sizes = Sizes(lines, float(args.rate), seconds * args.rate)
    with tempfile.TemporaryDirectory(prefix="orch-bench-logpath-") as name:
        tmp = Path(name)
        ssh = asyncio.run(ssh_row(tmp, sizes))
        embedded = asyncio.run(embedded_row(tmp, sizes))
    rows = [ssh, embedded]
    mix = f"1 in {MIX_EVERY}"
    bench = Bench(
        name="logpath",
        title="Log path: tail + parse, host to controller",
        columns=[
            "transport",
            "lines/s, tail alone",
            "CPU µs/line",
            f"lines/s, tail + parse, engine log ({mix} a metrics line)",
            "CPU µs/line",
            "lines/s, tail + parse, worst case (every line a metrics line)",
            "CPU µs/line",
            f"delay median ms ({args.rate:,}/s)",
            f"delay p99 ms ({args.rate:,}/s)",
            "delay max ms",
        ],
        rows=[r.cells() for r in rows],
        targets=[
            Target(
                f"lines/s, tail + parse over SSH, engine log ({mix} a metrics line)",
                ssh.mix.per_s,
                LINES_PER_S,
                "lines/s",
                False,
            ),
            Target(
                f"delay p99 at {args.rate:,} lines/s over SSH",
                ssh.steady.quantile(99),
                P99_MS,
                "ms",
            ),
        ],
        notes=notes(sizes, args.rate, ssh),
        smoke=args.smoke,
    )
    bench.publish(args.out)


if __name__ == "__main__":
    main()
