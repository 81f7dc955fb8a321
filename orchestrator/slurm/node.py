"""One run's Slurm allocation, seen by the runner as a host with an agent.

``AllocationAgent`` implements the same ``AgentClient`` interface as the agent on a named host,
so the runner launches, follows, measures and stops a server on a cluster with the code it uses
everywhere else. What differs is where each verb runs:

- the engine lives in the job's batch step: the job runs the agent's ``hold`` verb, which waits
  for the launch spec ``launch`` writes into the run's job folder, starts the engine and stays
  until it exits (``remote/hold.py``); its answer is read from the job's output file;
- every other verb (status, tail, http, loadgen, stop, probe) runs in an ``srun --overlap`` step
  of the job, on the job's node, through the login node's SSH connection: the load generator
  drives the engine from next to it, as on a host.

Each run gets a folder of its own under ``<workdir>/jobs/<run id>``: its agent workdir
(server.log, server.json, the port lock), so runs on different nodes never share a lock file.
On a shared filesystem (``shared_fs``) files go through the login node over SFTP and the job's
output is in that folder too. Without one, everything travels through the job: the agent and
its specs are written on the node by ``srun`` steps (``PUT``, data on stdin, renamed into place
in a directory only the user may write), the job waits for its agent to arrive (``WAIT``),
every verb's spec goes on the agent's stdin, and the job's output (sent by ``WAIT`` into the
run's private folder on the node) is read back by an ``srun`` step. ``PUT`` and ``WAIT`` are
orch's own fixed programs, handed to the node's Python as ``-c``; paths and data are argv
items and stdin, never code.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import posixpath
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import replace

from orchestrator.agent.bundle import AgentBundle
from orchestrator.agent.client import Agent, decode_output
from orchestrator.aio import shielded
from orchestrator.config.hostconfig import ClusterConfig, HostConfig
from orchestrator.errors import AgentError, HostTimeout, OrchError, RemoteCommandError
from orchestrator.remote.prune import JOBS_DIR  # one name for the job folders
from orchestrator.remote.wire import (
    EchoResult,
    EchoSpec,
    ErrorKind,
    HoldLaunched,
    HoldResult,
    HoldSpec,
    HttpResult,
    HttpSpec,
    LaunchResult,
    LaunchSpec,
    LoadgenEvent,
    LoadgenSpec,
    ProbeResult,
    ReadModelConfigsResult,
    ReadModelConfigsSpec,
    StatusResult,
    StatusSpec,
    StopResult,
    StopSpec,
    TailEvent,
    TailSpec,
    spec_file,
)
from orchestrator.slurm.allocation import (
    Allocation,
    JobState,
    cancel,
    job_state,
    submit,
    wait_running,
)
from orchestrator.slurm.jobs import JOB_NAME_PREFIX, AllocationRequest, squeue_argv, srun_argv
from orchestrator.transport import Connection

Connect = Callable[[], Awaitable[Connection]]
# WAIT: the job's first program where the workdir is not shared: wait for the agent (argv[1],
# put there whole by PUT, which made its private folder), send the job's output to argv[3] in
# that folder, then become the rest of argv
WAIT = (
    "import os,sys,time\n"
    "end=time.time()+float(sys.argv[2])\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    if time.time()>end: sys.exit('orch: the agent never arrived at '+sys.argv[1])\n"
    "    time.sleep(0.2)\n"
    "fd=os.open(sys.argv[3],os.O_WRONLY|os.O_CREAT|os.O_APPEND,0o600)\n"
    "os.dup2(fd,1);os.dup2(fd,2)\n"
    "os.execv(sys.argv[4],sys.argv[4:])\n"
)
# PUT: write stdin (base64) to argv[1] with mode argv[2] (octal): whole or not at all, in a
# directory of the user's that nobody else may write to
PUT = (
    "import base64,os,sys,tempfile\n"
    "path,mode=sys.argv[1],int(sys.argv[2],8)\n"
    "d=os.path.dirname(path)\n"
    "os.makedirs(d,mode=0o700,exist_ok=True)\n"
    "st=os.stat(d)\n"
    "if st.st_uid!=os.getuid() or st.st_mode&0o022: sys.exit('orch: refusing '+d+': others may write to it')\n"
    "data=base64.b64decode(sys.stdin.buffer.read())\n"
    "fd,tmp=tempfile.mkstemp(dir=d)\n"
    "os.write(fd,data);os.fchmod(fd,mode);os.close(fd)\n"
    "os.replace(tmp,path)\n"
)
PUT_TIMEOUT_S = 120.0
HOLD_WAIT_S = 600.0  # the job gives its GPUs back when no launch spec came by then
OUTPUT_POLL_S = 0.25
STATE_EVERY = 8  # polls of the output file between two looks at the job's state
RELEASE_TIMEOUT_S = 60.0
NAME_LOOKUPS, NAME_LOOKUP_S = 5, 2.0
# the job's hold answers through a file a network filesystem may show late (attribute caches)
LAUNCH_TIMEOUT_S = 300.0


class AllocationAgent:
    """The agent of one run on one cluster: ``allocate`` first, then the ``AgentClient`` verbs,
    ``release`` at the end whatever happened (it cancels the job, which stops what is left)."""

    def __init__(
        self, login: Agent, cluster: ClusterConfig, run_id: str, *, connect: Connect
    ) -> None:
        self.login = login
        self._connect = connect  # the login node's connection, live (for Slurm's commands)
        self.cluster = cluster
        self.run_id = run_id
        self._host = cluster.as_host()
        self.job_id: int | None = None
        self.allocation: Allocation | None = None
        self.last_state: JobState | None = None
        self._node: Agent | None = None
        self._output: str | None = None

    @property
    def host(self) -> HostConfig:
        return self._host

    @property
    def bundle(self) -> AgentBundle:
        return self.login.bundle

    @property
    def job_name(self) -> str:
        return JOB_NAME_PREFIX + self.run_id

    @property
    def shared(self) -> bool:
        return self.cluster.shared_fs

    async def workdir(self) -> str:
        """The run's own agent workdir on the compute node (its job folder)."""
        return self.jobdir

    @property
    def jobdir(self) -> str:
        return posixpath.join(self.cluster.workdir, JOBS_DIR, self.run_id)

    @property
    def launch_spec_path(self) -> str:
        return posixpath.join(self.jobdir, "launch.json")

    @property
    def hold_spec_path(self) -> str:
        return posixpath.join(self.jobdir, "hold.json")

    @property
    def own_pyz(self) -> str:
        """The job's own copy of the agent, where the node does not see the login's."""
        return posixpath.join(self.jobdir, self.bundle.filename)

    # -- the allocation ---------------------------------------------------------------------
    async def allocate(
        self, gpus: int, *, pending_timeout: float, on_state: Callable[[JobState], None]
    ) -> Allocation:
        """Submit the run's job and wait until it runs (AllocationTimeout past
        ``pending_timeout``, the job cancelled; AllocationFailed if it ends first)."""
        await self.login.ensure()
        conn = await self._connect()
        python, hold = self.cluster.python, self.hold_spec_path
        hold_spec = json.dumps(
            spec_file(HoldSpec(launch_spec=self.launch_spec_path, wait_s=HOLD_WAIT_S))
        ).encode()
        pyz = await self.login.pyz_path() if self.shared else self.own_pyz
        agent: tuple[str, ...] = (python, pyz, "hold", hold)
        if self.shared:
            await conn.makedirs(self.jobdir, mode=0o700)
            await conn.put_bytes(hold_spec, hold, mode=0o600)
            output = posixpath.join(self.jobdir, "job-%j.out")
        else:  # the job waits for its agent, put on the node once the job runs
            output = posixpath.join(self.jobdir, "job.out")  # the folder PUT makes private
            agent = (python, "-c", WAIT, pyz, str(HOLD_WAIT_S), output, *agent)
        request = AllocationRequest(
            run_id=self.run_id,
            gpus=gpus,
            job_name=self.job_name,
            argv=agent,
            output=output if self.shared else "/dev/null",
        )
        submitting = replace(self.cluster, workdir=await self.login.workdir())  # its job script
        # shielded: a job that sbatch queues must have its id known, to be cancelled
        self.job_id = await shielded(submit(conn, submitting, request))
        self._output = output.replace("%j", str(self.job_id))

        def seen(state: JobState) -> None:
            self.last_state = state
            on_state(state)

        self.allocation = await wait_running(
            conn, self.job_id, on_state=seen, pending_timeout=pending_timeout
        )
        own = None if self.shared else pyz
        self._node = self.login.with_prefix(srun_argv(self.job_id), self._host, pyz=own)
        if not self.shared:  # the spec first: the agent's arrival starts the job's hold
            await self._put(hold, hold_spec, 0o600)
            await self._put(pyz, self.bundle.data, 0o644)
        return self.allocation

    async def _put(self, path: str, data: bytes, mode: int) -> None:
        """Write ``data`` at ``path`` on the job's node (no shared filesystem), whole."""
        assert self.job_id is not None
        argv = [*srun_argv(self.job_id), self.cluster.python, "-c", PUT, path, f"{mode:o}"]
        conn = await self._connect()
        done = await conn.run(
            argv, timeout=PUT_TIMEOUT_S, input=base64.b64encode(data).decode("ascii")
        )
        if done.returncode != 0:
            raise RemoteCommandError(
                self.cluster.name,
                f"cannot write {path} on the node of job {self.job_id} (exit "
                f"{done.returncode}): {done.stderr.strip()[-500:] or '(nothing on stderr)'}",
                hint="is the cluster's `python` a Python 3 on the compute nodes, and its "
                "`workdir` a directory you may create there?",
            )

    async def release(self) -> str | None:
        """Cancel the run's job (nothing to do once it ended) and delete a launch spec the
        job never read (it holds the engine's secrets). Bounded and never raising: it runs
        on the way out of a failure or an interrupt, whose error is the one to report. What
        went wrong, when something did: the job may still hold its node, to be told."""
        try:
            await asyncio.wait_for(self._release(), RELEASE_TIMEOUT_S)
        except (OrchError, asyncio.TimeoutError) as exc:
            what = (
                exc.message
                if isinstance(exc, OrchError)
                else f"no answer in {RELEASE_TIMEOUT_S:g} s"
            )
            job = f"job {self.job_id}" if self.job_id is not None else f"job {self.job_name}"
            return f"{job} on {self.cluster.name} may not be cancelled: {what}"
        return None

    async def _release(self) -> None:
        conn = await self._connect()
        try:
            if not self.shared and self._node is not None:  # before the job ends: through it
                with contextlib.suppress(OrchError):
                    argv = [*srun_argv(self.node_job), "rm", "-f", "--", self.launch_spec_path]
                    await conn.run(argv, timeout=PUT_TIMEOUT_S)
            await cancel(conn, await self._job_ids())
        finally:
            if self.shared:
                with contextlib.suppress(OrchError):
                    await conn.remove(self.launch_spec_path)

    async def _job_ids(self) -> list[int]:
        """The run's job; when sbatch was interrupted before it answered, found by its name,
        looked for a few times (a busy slurmctld may register the job a moment later)."""
        if self.job_id is not None:
            return [self.job_id]
        for _ in range(NAME_LOOKUPS):
            found = await self._jobs_by_name()
            if found:
                return found
            await asyncio.sleep(NAME_LOOKUP_S)
        return []

    async def _jobs_by_name(self) -> list[int]:
        """A job submitted by an sbatch whose answer never came (interrupted): found by name."""
        conn = await self._connect()
        done = await conn.run(squeue_argv(names=[self.job_name]), timeout=30.0)
        ids = [line.split("|", 1)[0] for line in done.stdout.splitlines()]
        return [int(i) for i in ids if i.strip().isdigit()]

    async def reconnected(self) -> AllocationAgent:
        """The same agent on live connections (a ``reconnect`` for ``Server``)."""
        await self.login.live()
        if self._node is not None:
            await self._node.live()
        return self

    @property
    def node(self) -> Agent:
        if self._node is None:
            raise OrchError(f"run {self.run_id}: its allocation is not running yet")
        return self._node

    # -- launch: the job's batch step starts the engine ------------------------------------
    async def launch(self, spec: LaunchSpec) -> LaunchResult:
        """Hand the launch spec to the job's ``hold`` and read its answer from the job's
        output; AgentError as ``launch`` raises it, or when the job ends without one."""
        node = self.node
        data = json.dumps(spec_file(spec), ensure_ascii=True).encode("ascii")
        if self.shared:
            await (await self.login.live()).put_bytes(data, self.launch_spec_path, mode=0o600)
        else:
            await self._put(self.launch_spec_path, data, 0o600)
        loop = asyncio.get_running_loop()
        limit = self.login.host.agent_timeout_s or LAUNCH_TIMEOUT_S
        deadline = loop.time() + limit
        polls = 0
        while True:
            answer = await self._hold_answer()
            if isinstance(answer, LaunchResult):
                return answer
            if answer is not None:
                raise AgentError(
                    node.host.name,
                    f"launch: job {self.job_id} ended its hold without an engine ({answer.reason})",
                    kind=ErrorKind.LAUNCH_FAILED,
                )
            polls += 1
            if polls % STATE_EVERY == 0:
                await self._check_job()
            if loop.time() >= deadline:
                raise HostTimeout(
                    node.host.name,
                    f"launch: job {self.job_id} did not start the engine within {limit:g} s",
                    hint=f"look at the job's output, {self._output}",
                )
            await asyncio.sleep(OUTPUT_POLL_S)

    async def _hold_answer(self) -> LaunchResult | HoldResult | None:
        """What the job's ``hold`` said so far: the launch, its end, or nothing yet."""
        text = await self._job_output()
        if text is None:
            return None
        for obj in decode_output(text).events:
            value = self.node.read_event("hold", obj)
            if isinstance(value, HoldLaunched):
                return value.launch
            if isinstance(value, HoldResult):
                return value
        return None

    async def _job_output(self) -> str | None:
        """The job's output so far (None before it has any): read on the login node over
        SFTP, or through the job on its node where nothing is shared."""
        assert self._output is not None
        if self.shared:
            conn = await self.login.live()
            if not await conn.exists(self._output):
                return None
            return (await conn.read_bytes(self._output)).decode("utf-8", errors="replace")
        argv = [*srun_argv(self.node_job), "cat", "--", self._output]
        done = await (await self._connect()).run(argv, timeout=PUT_TIMEOUT_S)
        return done.stdout if done.returncode == 0 else None

    @property
    def node_job(self) -> int:
        assert self.job_id is not None
        return self.job_id

    async def _check_job(self) -> None:
        assert self.job_id is not None
        state = await job_state(await self._connect(), self.job_id)
        if state is None or state.ended:
            why = state.describe() if state else "no longer known to Slurm"
            raise AgentError(
                self.node.host.name,
                f"launch: job {self.job_id} ended before its engine started: {why}",
                kind=ErrorKind.LAUNCH_FAILED,
                hint=f"look at the job's output, {self._output}",
            )

    # -- every other verb: an srun step beside the engine ----------------------------------
    async def echo(
        self, spec: EchoSpec, *, keep_spec: bool = False, timeout: float | None = None
    ) -> EchoResult:
        return await self.node.echo(spec, keep_spec=keep_spec, timeout=timeout)

    async def probe(
        self, *, ports: Sequence[int] = (), packages: Sequence[str] | None = None
    ) -> ProbeResult:
        return await self.node.probe(ports=ports, packages=packages)

    async def status(self, spec: StatusSpec, *, timeout: float | None = None) -> StatusResult:
        return await self.node.status(spec, timeout=timeout)

    async def tail(self, spec: TailSpec) -> AsyncGenerator[TailEvent, None]:
        async with contextlib.aclosing(self.node.tail(spec)) as events:
            async for event in events:
                yield event

    async def stop(self, spec: StopSpec, *, timeout: float | None = None) -> StopResult:
        return await self.node.stop(spec, timeout=timeout)

    async def http(self, spec: HttpSpec, *, timeout: float | None = None) -> HttpResult:
        return await self.node.http(spec, timeout=timeout)

    async def loadgen(self, spec: LoadgenSpec) -> AsyncGenerator[LoadgenEvent, None]:
        async with contextlib.aclosing(self.node.loadgen(spec)) as events:
            async for event in events:
                yield event

    async def read_model_configs(self, spec: ReadModelConfigsSpec) -> ReadModelConfigsResult:
        return await self.node.read_model_configs(spec)
