"""Engine server lifecycle on the host: ``launch``, ``status``, ``tail``, ``stop``.

Layout of one run: ``<workdir>/runs/<run_id>/`` holds ``server.log`` (engine stdout+stderr,
appended), ``server.json`` (pid, process group, argv, env keys, port, start time) and, once the
engine has exited, ``exit.json`` (its return code); ``stop.json`` when `orch stop` stopped it.

Why a supervisor: each agent call is a short-lived process behind one SSH command, so the agent
that starts the engine cannot ``wait()`` for it later, and a detached engine's exit status is
otherwise lost (it would be reaped by init). ``launch`` therefore starts a small supervisor — a
fresh interpreter running :func:`supervise` in its own session, stdio detached from SSH — which
starts the engine in *another* new session (so signalling the engine's process group never hits
the supervisor), writes ``server.json``, reports the pid back over a pipe, then waits on the
engine and writes ``exit.json``. Both survive the SSH connection dropping: neither holds the SSH
channel's pipes, and neither is in the session that sshd hangs up.

Limit: a host whose systemd-logind has ``KillUserProcesses=yes`` kills a logged-out session's
processes whatever their session id; the default (``no``) on Debian/Ubuntu/RHEL keeps them.

Process identity: a pid alone can be reused, so ``server.json`` also records the kernel's start
time of the process (``/proc/<pid>/stat`` field 22) and the boot id; a pid counts as the engine
only when both still match (``procs``). GPU checks and waits run nvidia-smi through ``gpus``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type, TypeVar

from .gpus import check_gpus, wait_gpu_released
from .holders import describe_all, named_holders
from .probe import identity
from .procs import (
    boot_id,
    engine_listeners,
    group_members,
    kill_quietly,
    port_owner,
    same_process,
    signal_group,
    start_ticks,
    wait_group_gone,
    wait_stopped,
)
from .protocol import AgentFailure, Emit, parse_spec
from .util import atomic_write_json, port_is_free, read_text, wait_until
from .wire import (
    ErrorKind,
    ExitRecord,
    LaunchResult,
    LaunchSpec,
    PortHolder,
    ServerRecord,
    ServerState,
    StatusResult,
    StatusSpec,
    StopOutcome,
    StopRecord,
    StopResult,
    StopSpec,
    TailHeartbeat,
    TailLines,
    TailResult,
    TailSpec,
    WireError,
)

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SERVER_JSON = "server.json"
EXIT_JSON = "exit.json"
STOP_JSON = "stop.json"  # who stopped the server on purpose (`orch stop`), and when
SERVER_LOG = "server.log"
SUPERVISOR_LOG = "supervisor.log"
LOCKS = "locks"
LOG_MODE = 0o600  # engines print their API key and arguments: the logs are the user's alone
SUPERVISOR_START_TIMEOUT_S = 30.0
HEARTBEAT_S = 5.0
LINGER_S = StopSpec.linger_s  # an engine whose port closed gets this long to exit
READ_CHUNK = 1 << 16
FIRST_POLL_S = 0.001  # tail: the first look after new lines; doubled up to the poll interval

# Started as `python -c BOOT ROOT PACKAGE`: imports this module from wherever the agent runs
# (the zipapp as `orch_remote`, or a source tree as `orchestrator.remote`).
_BOOT = (
    "import importlib, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "importlib.import_module(sys.argv[2] + '.lifecycle').supervise()\n"
)


# ---------------------------------------------------------------------------------------------
# Paths and records


def run_dir(workdir: str, run_id: str) -> str:
    if not RUN_ID.match(run_id):
        raise AgentFailure(
            ErrorKind.BAD_SPEC, f"run id {run_id!r} must be letters, digits, '.', '_' or '-'"
        )
    return os.path.join(os.path.expanduser(workdir), "runs", run_id)


def read_json(path: str) -> Optional[Dict[str, Any]]:
    text = read_text(path)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


R = TypeVar("R", ServerRecord, ExitRecord)


def from_disk(cls: Type[R], raw: Dict[str, Any]) -> Optional[R]:
    """A record this or another agent version wrote: ``runs/`` outlives agent versions, so a
    field it does not know is dropped (a later version added it) and a record it cannot read
    is None (that run is not shown) rather than an error for every run on the host."""
    known = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls.from_json({k: v for k, v in raw.items() if k in known})
    except WireError:
        return None


def read_exit(directory: str) -> Optional[ExitRecord]:
    raw = read_json(os.path.join(directory, EXIT_JSON))
    return from_disk(ExitRecord, raw) if raw is not None else None


def read_stop(directory: str, started_at: float) -> Optional[StopRecord]:
    """stop.json when it is about this launch (written after it started), else None."""
    raw = read_json(os.path.join(directory, STOP_JSON))
    if raw is None:
        return None
    try:
        found = StopRecord.from_json(raw)
    except WireError:
        return None
    return found if found.at >= started_at else None


def record_fields(record: ServerRecord) -> Dict[str, Any]:
    """The server.json fields of ``record``, to build the results that extend it."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(ServerRecord)}


def server_state(directory: str, *, check_port: bool = True) -> Optional[ServerState]:
    """server.json with liveness and exit facts, or None when no server was launched here.

    ``check_port``: also say who answers on the server's port (``port_owner``): the controller
    must know that what answers is the engine it launched, not a stale or foreign server. A
    listing of every run checks it for live servers only.
    """
    raw = read_json(os.path.join(directory, SERVER_JSON))
    record = from_disk(ServerRecord, raw) if raw is not None else None
    if raw is None or record is None:
        return None
    exit_record = read_exit(directory)
    alive = same_process(raw) and exit_record is None
    try:
        log_size: Optional[int] = os.path.getsize(record.log)
    except OSError:
        log_size = None
    owner: Optional[str] = None
    holders: List[PortHolder] = []
    if check_port or alive:
        owner, found = port_owner(record.port, raw)
        holders = [
            PortHolder(pid=h["pid"], cmdline=h["cmdline"], launched=h["launched"]) for h in found
        ]
    return ServerState(
        **record_fields(record),
        alive=alive,
        group_pids=group_members(raw),
        exit=exit_record,
        returncode=exit_record.returncode if exit_record else None,
        log_size=log_size,
        uptime_s=round(time.time() - record.started_at, 1) if alive else None,
        port_owner=owner,
        port_holders=holders,
        stop=read_stop(directory, record.started_at),
    )


def all_run_dirs(workdir: str) -> List[str]:
    root = os.path.join(os.path.expanduser(workdir), "runs")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [
        os.path.join(root, n) for n in names if os.path.isfile(os.path.join(root, n, SERVER_JSON))
    ]


# ---------------------------------------------------------------------------------------------
# launch


def launch(raw: Dict[str, Any], emit: Emit) -> LaunchResult:
    spec = parse_spec(LaunchSpec, raw)
    if not spec.argv:
        raise AgentFailure(ErrorKind.BAD_SPEC, "launch: 'argv' must be a non-empty list of strings")
    directory = run_dir(spec.workdir, spec.run_id)
    previous = server_state(directory, check_port=False)
    if previous is not None and (previous.alive or previous.group_pids):
        raise AgentFailure(
            ErrorKind.ALREADY_RUNNING,
            f"run {spec.run_id} already has a live server (pid {previous.pid})",
            {"pid": previous.pid, "run_id": spec.run_id},
        )
    lock = take_port_lock(spec.workdir, spec.port, spec.run_id)
    try:
        return _launch(spec, directory, lock)
    except BaseException:
        release_port_lock(lock, spec.run_id)
        raise


def _launch(spec: LaunchSpec, directory: str, lock: str) -> LaunchResult:
    check_port(spec.workdir, spec.port)
    env = launch_env(spec)
    merged_env = dict(os.environ)
    merged_env.update(env)
    # with gpu_ids, CUDA_VISIBLE_DEVICES names them: only they are checked (a shared host's
    # other GPUs are busy with the other runs, and rightly so)
    gpu_check = check_gpus(spec.gpus_needed, merged_env, threshold_mib=spec.gpu_busy_threshold_mib)
    resolved = resolve_argv(spec.argv, merged_env)
    os.makedirs(directory, exist_ok=True)
    for stale in (EXIT_JSON, SERVER_JSON):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, stale))
    log = os.path.join(directory, SERVER_LOG)
    log_offset = os.path.getsize(log) if os.path.exists(log) else 0
    config = {
        "run_id": spec.run_id,
        "dir": directory,
        "argv": resolved,
        "requested_argv": spec.argv,
        "env": env,
        "port": spec.port,
        "cwd": os.path.expanduser(spec.cwd or directory),
        "log": log,
        "lock": lock,
    }
    record = start_supervisor(config)
    return LaunchResult(**record_fields(record), log_offset=log_offset, gpu_check=gpu_check)


def launch_env(spec: LaunchSpec) -> Dict[str, str]:
    """The engine's environment: the spec's, with the GPUs orch gave the run on a shared host
    (``gpu_ids``) as ``CUDA_VISIBLE_DEVICES``, numbered as nvidia-smi numbers them
    (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, unless the run sets an order itself)."""
    if spec.gpu_ids is None:
        return dict(spec.env)
    ids = spec.gpu_ids
    if len(ids) < spec.gpus_needed or len(set(ids)) != len(ids) or any(i < 0 for i in ids):
        raise AgentFailure(
            ErrorKind.BAD_SPEC,
            f"launch: gpu_ids {ids} must be {spec.gpus_needed} distinct GPU indices or more",
            {"gpu_ids": ids, "gpus_needed": spec.gpus_needed},
        )
    visible = ",".join(str(i) for i in ids)
    given = spec.env.get("CUDA_VISIBLE_DEVICES")
    if given is not None and given != visible:
        raise AgentFailure(
            ErrorKind.BAD_SPEC,
            f"launch: env sets CUDA_VISIBLE_DEVICES={given} but gpu_ids are {ids}: one or the other",
            {"gpu_ids": ids, "CUDA_VISIBLE_DEVICES": given},
        )
    env = dict(spec.env)
    env["CUDA_VISIBLE_DEVICES"] = visible
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


def resolve_argv(argv: List[str], env: Dict[str, str]) -> List[str]:
    """Run the engine of the interpreter the agent runs in (the engine's venv), not PATH's first.

    ``python`` is that interpreter; ``vllm`` is its sibling console script when present, else
    whatever PATH (with the run's env applied) finds.
    """
    head = argv[0]
    bindir = os.path.dirname(sys.executable)
    if head in ("python", "python3"):
        return [sys.executable] + argv[1:]
    if os.sep not in head:
        sibling = os.path.join(bindir, head)
        if os.path.isfile(sibling) and os.access(sibling, os.X_OK):
            return [sibling] + argv[1:]
        found = shutil.which(head, path=env.get("PATH", os.defpath))
        if found is None:
            raise AgentFailure(
                ErrorKind.ENGINE_NOT_FOUND,
                f"{head} is neither next to {sys.executable} nor on PATH",
                {"argv0": head, "python": sys.executable},
            )
        return [found] + argv[1:]
    return list(argv)


def check_port(workdir: str, port: int) -> None:
    if not 0 < port < 65536:
        raise AgentFailure(ErrorKind.BAD_SPEC, f"launch: port {port} is outside 1-65535")
    if port_is_free(port, "127.0.0.1"):
        return
    holders = named_holders(port, workdir)
    runs = [h.run_id for h in holders if h.run_id] or [
        state.run_id
        for state in (server_state(d, check_port=False) for d in all_run_dirs(workdir))
        if state and state.port == port and (state.alive or state.group_pids)
    ]
    message = f"port {port} on 127.0.0.1 is already in use by {describe_all(holders)}"
    if runs:
        message += f" — orch run {runs[0]!r}, stop it with `orch stop {runs[0]}`"
    raise AgentFailure(
        ErrorKind.PORT_IN_USE,
        message,
        {"port": port, "holders": [h.to_json() for h in holders], "runs": runs},
    )


# ---------------------------------------------------------------------------------------------
# port locks: one launch per host and port at a time


def lock_path(workdir: str, port: int) -> str:
    return os.path.join(os.path.expanduser(workdir), LOCKS, "port-%d.lock" % port)


def take_port_lock(workdir: str, port: int, run_id: str) -> str:
    """Reserve ``port`` for ``run_id`` on this host, atomically (``O_CREAT | O_EXCL``), or refuse.

    Two `orch run` started at once against one host and port would both find the port free
    (the engine binds it only after loading) and both launch. The lock names its run and the
    launching agent; it is released when the run is stopped, when its supervisor sees the
    engine exit, or when its launch fails. A lock whose owner is gone (no live server for its
    run, and its launching agent gone) is stale and taken over, under an flock so that two
    agents cannot both take over the same stale lock.
    """
    path = lock_path(workdir, port)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    mine = json.dumps(
        {
            "run_id": run_id,
            "port": port,
            "launcher_pid": os.getpid(),
            "launcher_ticks": start_ticks(os.getpid()),
            "boot_id": boot_id(),
            "created_at": time.time(),
        }
    ).encode("utf-8")
    for _attempt in range(3):
        if _create_exclusive(path, mine):
            return path
        with _flock(path + ".guard"):
            holder = read_json(path)
            if holder is not None and _lock_owner_alive(workdir, holder):
                other = str(holder.get("run_id") or "?")
                raise AgentFailure(
                    ErrorKind.PORT_IN_USE,
                    f"port {port} on this host is reserved by orch run {other!r}, which is "
                    f"launching or serving there: stop it with `orch stop {other}`, or give "
                    "this run another `port:`",
                    {"port": port, "runs": [other], "lock": path},
                )
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # stale: its owner is gone
            if _create_exclusive(path, mine):
                return path
    raise AgentFailure(
        ErrorKind.PORT_IN_USE, f"port {port} on this host: could not take its lock {path}"
    )


def _create_exclusive(path: str, data: bytes) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return True


@contextlib.contextmanager
def _flock(path: str) -> Iterator[None]:
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _lock_owner_alive(workdir: str, holder: Dict[str, Any]) -> bool:
    """A lock's run still launching (its agent alive, no server.json yet) or serving."""
    run_id = holder.get("run_id")
    if isinstance(run_id, str) and RUN_ID.match(run_id):
        state = server_state(run_dir(workdir, run_id), check_port=False)
        if state is not None:
            return state.exit is None and (state.alive or bool(state.group_pids))
    return _launcher_alive(holder)


def _launcher_alive(holder: Dict[str, Any]) -> bool:
    """The agent that took the lock is still launching (its server.json may not exist yet)."""
    pid = holder.get("launcher_pid")
    if not isinstance(pid, int):
        return False
    launcher = {"pid": pid, "start_ticks": holder.get("launcher_ticks")}
    return same_process({**launcher, "boot_id": holder.get("boot_id")})


def release_port_lock(path: str, run_id: Optional[str]) -> None:
    """Remove the lock at ``path`` if ``run_id`` holds it (another run's lock stays)."""
    with contextlib.suppress(OSError), _flock(path + ".guard"):
        holder = read_json(path)
        if holder is not None and holder.get("run_id") == run_id:
            os.unlink(path)


def start_supervisor(config: Dict[str, Any]) -> ServerRecord:
    """Start the supervisor, hand it the config on stdin (env may hold secrets: never on disk)."""
    root = package_root()
    package = __name__.rsplit(".", 1)[0]
    with os.fdopen(open_log(os.path.join(config["dir"], SUPERVISOR_LOG)), "ab") as errlog:
        proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, root, package],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            start_new_session=True,
            close_fds=True,
        )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(config).encode("utf-8"))
    proc.stdin.close()
    line = _readline_with_timeout(proc, SUPERVISOR_START_TIMEOUT_S)
    proc.stdout.close()
    try:
        report = json.loads(line) if line else None
    except ValueError:
        report = None
    if not isinstance(report, dict):
        errors = (
            (read_text(os.path.join(config["dir"], SUPERVISOR_LOG)) or "")
            .strip()
            .splitlines()[-20:]
        )
        raise AgentFailure(
            ErrorKind.LAUNCH_FAILED, "the server supervisor did not start", {"stderr": errors}
        )
    if not report.get("ok"):
        raise AgentFailure(
            ErrorKind.LAUNCH_FAILED,
            f"cannot start {config['argv'][0]}: {report.get('error')}",
            {"argv0": config["argv"][0]},
        )
    return ServerRecord.from_json(report["record"])


def _readline_with_timeout(proc: subprocess.Popen, timeout: float) -> bytes:
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            kill_quietly(proc.pid)
            return b""
    return proc.stdout.readline()


def package_root() -> str:
    """The sys.path entry holding this package (a zipapp path or a source tree)."""
    path = os.path.abspath(__file__)
    for _ in range(__name__.count(".") + 1):
        path = os.path.dirname(path)
    return path


def supervise() -> None:
    """Supervisor process body: start the engine, report its pid, wait, record its exit."""
    config = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A SIGTERM meant for everything (a Slurm job cancelled) is passed on to the engine, and
    # the supervisor stays its parent until it exits: process trackers that follow parents
    # (Slurm's proctrack/linuxproc) then still find the engine when their SIGKILL comes. One
    # that comes before the engine exists is passed on as soon as it does.
    engine_pid: List[int] = []
    termed: List[bool] = []

    def on_term(_signum: int, _frame: Any) -> None:
        termed.append(True)
        if engine_pid:
            _forward(engine_pid[0], signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)  # reset to the default in the engine by exec
    env = dict(os.environ)
    env.update(config["env"])
    log_fd = open_log(config["log"])
    try:
        engine = subprocess.Popen(
            config["argv"],
            env=env,
            cwd=config["cwd"],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        _report({"ok": False, "error": f"{exc.strerror or exc} ({config['argv'][0]})"}, devnull)
        return  # the launcher releases the port lock
    finally:
        os.close(log_fd)
    engine_pid.append(engine.pid)
    if termed:
        _forward(engine.pid, signal.SIGTERM)
    record = ServerRecord(
        run_id=config["run_id"],
        pid=engine.pid,
        pgid=engine.pid,
        supervisor_pid=os.getpid(),
        argv=config["argv"],
        requested_argv=config["requested_argv"],
        env_keys=sorted(config["env"]),
        port=config["port"],
        cwd=config["cwd"],
        log=config["log"],
        started_at=time.time(),
        start_ticks=start_ticks(engine.pid),
        boot_id=boot_id(),
    ).to_json()
    atomic_write_json(os.path.join(config["dir"], SERVER_JSON), record)
    _report({"ok": True, "record": record}, devnull)
    returncode = engine.wait()
    ended = ExitRecord(
        pid=engine.pid,
        returncode=returncode,
        signal=signal.Signals(-returncode).name if returncode < 0 else None,
        ended_at=time.time(),
    )
    atomic_write_json(os.path.join(config["dir"], EXIT_JSON), ended.to_json())
    if config.get("lock"):
        release_port_lock(config["lock"], config["run_id"])


def _forward(pgid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, sig)


def open_log(path: str) -> int:
    """Open a log for appending, mode 0600 even when an older launch created it wider."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, LOG_MODE)
    os.fchmod(fd, LOG_MODE)
    return fd


def _report(obj: Dict[str, Any], devnull: int) -> None:
    # A launcher that is gone (its SSH session died) must not stop us supervising.
    with contextlib.suppress(OSError):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()
    os.dup2(devnull, 1)  # let go of the launcher's pipe: nothing of SSH's stays open here


# ---------------------------------------------------------------------------------------------
# status


def status(raw: Dict[str, Any], emit: Emit) -> StatusResult:
    spec = parse_spec(StatusSpec, raw)
    if spec.all:
        states = [server_state(d, check_port=False) for d in all_run_dirs(spec.workdir)]
        return StatusResult(servers=[s for s in states if s is not None], **identity(spec.workdir))
    run_id = _run_id(spec.run_id, "status")
    state = server_state(run_dir(spec.workdir, run_id))
    if state is None:
        raise AgentFailure(
            ErrorKind.NOT_FOUND,
            f"no server was launched for run {run_id} in {spec.workdir}",
            {"run_id": run_id},
        )
    return StatusResult(servers=[state])


def _run_id(run_id: Optional[str], verb: str) -> str:
    if run_id is None:
        raise AgentFailure(ErrorKind.BAD_SPEC, f"{verb}: give 'run_id' or 'all'")
    return run_id


# ---------------------------------------------------------------------------------------------
# tail


def tail(raw: Dict[str, Any], emit: Emit) -> TailResult:
    """Stream complete log lines from a byte offset, the lines of each read of the log as one
    ``TailLines`` event that says where its first line starts and its last one ends.

    A controller that lost its connection calls again with the last ``next`` it received and gets
    exactly the following line. A final line without a newline is only sent once the server has
    exited (it may still be being written before that).

    Polling: a log that just grew is looked at again after ``FIRST_POLL_S``, then after twice
    as long each time it has not, up to ``poll_interval_s``: a line written while the engine
    logs is sent within milliseconds, and an idle log costs one look per ``poll_interval_s``.
    """
    spec = parse_spec(TailSpec, raw)
    run_id, offset, follow, until_exit = spec.run_id, spec.offset, spec.follow, spec.until_exit
    idle_timeout, poll = spec.idle_timeout_s, spec.poll_interval_s
    if offset < 0:
        raise AgentFailure(ErrorKind.BAD_SPEC, "tail: 'offset' must be a byte offset >= 0")
    directory = run_dir(spec.workdir, run_id)
    record = read_json(os.path.join(directory, SERVER_JSON))
    log = (record or {}).get("log") or os.path.join(directory, SERVER_LOG)
    if not os.path.exists(log):
        raise AgentFailure(
            ErrorKind.NOT_FOUND, f"no log for run {run_id} at {log}", {"run_id": run_id}
        )
    size = os.path.getsize(log)
    if offset > size:
        raise AgentFailure(
            ErrorKind.BAD_OFFSET,
            f"offset {offset} is past the end of {log} ({size} bytes)",
            {"size": size},
        )
    parent = os.getppid()
    with open(log, "rb") as handle:
        handle.seek(offset)
        pending = b""
        last_data = last_emit = time.monotonic()
        wait = FIRST_POLL_S
        while True:
            exited = _has_exited(directory, record)  # before reading: then EOF means drained
            chunk = handle.read(READ_CHUNK)
            now = time.monotonic()
            if chunk:
                pending, offset = _emit_lines(pending + chunk, offset, emit)
                last_data = last_emit = now
                wait = FIRST_POLL_S
                continue
            if exited or not follow:
                if pending and exited:
                    end = offset + len(pending)
                    emit(TailLines(offset=offset, next=end, lines=_texts(pending)))
                    pending, offset = b"", end
                if exited and (until_exit or not follow):
                    return _tail_result(offset, "exited", directory)
                if not follow:
                    return _tail_result(offset, "eof", directory)
            if idle_timeout is not None and now - last_data >= idle_timeout:
                return _tail_result(offset, "idle_timeout", directory)
            if os.getppid() != parent:
                return _tail_result(offset, "orphaned", directory)  # our SSH session is gone
            if now - last_emit >= HEARTBEAT_S:
                emit(TailHeartbeat(offset=offset))  # a dead channel fails this write
                last_emit = now
            time.sleep(min(wait, poll))
            wait = min(wait * 2, poll)


def _emit_lines(data: bytes, offset: int, emit: Emit) -> Tuple[bytes, int]:
    """Emit the complete lines in ``data`` (which starts at ``offset``) as one event; return
    the rest and where it starts."""
    end = data.rfind(b"\n") + 1
    if end == 0:
        return data, offset
    emit(TailLines(offset=offset, next=offset + end, lines=_texts(data[:end])))
    return data[end:], offset + end


def _texts(data: bytes) -> List[str]:
    """The lines of ``data`` (whole lines, the last one may lack its newline) without their
    line ends (a newline and any carriage returns before it). Decoded at once: a newline never
    sits inside a UTF-8 sequence, so this gives what decoding each line on its own gave, U+FFFD
    included."""
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    if "\r" in text:
        lines = [line.rstrip("\r") for line in lines]
    return lines


def _has_exited(directory: str, record: Optional[Dict[str, Any]]) -> bool:
    if os.path.exists(os.path.join(directory, EXIT_JSON)):
        return True
    if record is None:
        record = read_json(os.path.join(directory, SERVER_JSON))
    if record is None:
        return True  # never started (or its record is gone): nothing will write to the log
    return not same_process(record) and not group_members(record)


def _tail_result(offset: int, reason: str, directory: str) -> TailResult:
    return TailResult(offset=offset, reason=reason, exit=read_exit(directory))


# ---------------------------------------------------------------------------------------------
# stop


def stop(raw: Dict[str, Any], emit: Emit) -> StopResult:
    spec = parse_spec(StopSpec, raw)
    if spec.all:
        directories = all_run_dirs(spec.workdir)
    else:
        run_id = _run_id(spec.run_id, "stop")
        directories = [run_dir(spec.workdir, run_id)]
        if not os.path.isfile(os.path.join(directories[0], SERVER_JSON)):
            raise AgentFailure(
                ErrorKind.NOT_FOUND,
                f"no server was launched for run {run_id} in {spec.workdir}",
                {"run_id": run_id},
            )
    results = []
    for directory in directories:
        record = read_json(os.path.join(directory, SERVER_JSON))
        if record is not None:
            results.append(
                stop_one(
                    directory,
                    record,
                    timeout=spec.timeout_s,
                    gpu_timeout=spec.gpu_timeout_s,
                    linger=spec.linger_s,
                    requested_by=spec.requested_by,
                    wait_gpus=spec.wait_gpus,
                )
            )
    failed = [r for r in results if r.remaining_pids or r.gpu_released is False]
    if failed and not spec.all:
        r = failed[0]
        what = (
            f"processes {r.remaining_pids} survived SIGKILL"
            if r.remaining_pids
            else f"GPU memory of pids {r.gpu_pids} was not released within {spec.gpu_timeout_s:g} s"
        )
        raise AgentFailure(ErrorKind.STOP_FAILED, f"run {r.run_id}: {what}", r.to_json())
    return StopResult(stopped=results)


def stop_one(
    directory: str,
    record: Dict[str, Any],
    *,
    timeout: float,
    gpu_timeout: float,
    linger: float = LINGER_S,
    requested_by: Optional[str] = None,
    wait_gpus: bool = True,
) -> StopOutcome:
    """SIGTERM the group, wait (the grace, shortened once its port has closed: see
    ``wait_stopped``), SIGKILL what is left, then wait for the GPUs to let go (unless
    ``wait_gpus`` is False: a CPU host). Who asked is written down first, so the run
    measuring on this server sees why it died."""
    started = time.monotonic()
    pids = set(group_members(record))
    if same_process(record):
        pids.add(int(record["pid"]))
    signals: List[str] = []
    if pids:
        if requested_by:  # a note for the run; a stop goes on without it
            mark = StopRecord(by=requested_by, at=time.time(), grace_s=timeout)
            with contextlib.suppress(OSError):
                atomic_write_json(os.path.join(directory, STOP_JSON), mark.to_json())
        listeners = engine_listeners(record)
        signal_group(record, signal.SIGTERM)
        signals.append("SIGTERM")
        pids |= set(group_members(record))
        if not wait_stopped(record, timeout, min(linger, timeout), listeners):
            pids |= set(group_members(record))
            signal_group(record, signal.SIGKILL)
            signals.append("SIGKILL")
            wait_group_gone(record, 10.0)
    remaining = group_members(record)
    if not wait_gpus:
        gpu_released: Optional[bool] = None  # a CPU host: its engine held no GPU memory
    else:
        gpu_released = wait_gpu_released(sorted(pids), gpu_timeout) if pids else True
    _wait_for_exit_record(directory, 5.0 if pids else 0.0)
    if not remaining and isinstance(record.get("port"), int):
        workdir = os.path.dirname(os.path.dirname(directory))  # <workdir>/runs/<run_id>
        release_port_lock(lock_path(workdir, record["port"]), record.get("run_id"))
    return StopOutcome(
        run_id=record.get("run_id"),
        pid=record.get("pid"),
        was_running=bool(pids),
        signals=signals,
        killed_pids=sorted(pids),
        remaining_pids=remaining,
        gpu_pids=sorted(pids),
        gpu_released=gpu_released,
        exit=read_exit(directory),
        waited_s=round(time.monotonic() - started, 2),
    )


def _wait_for_exit_record(directory: str, timeout: float) -> None:
    """The supervisor writes exit.json right after the engine dies: give it a moment."""
    path = os.path.join(directory, EXIT_JSON)
    wait_until(lambda: os.path.exists(path), timeout, interval=0.05)
