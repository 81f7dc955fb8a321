"""Issue 9, items 9, 11, 12, 13 without a host: results write failures, the prune selection,
what a run needs on its host, and host entries that share a workdir."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from orchestrator.agent.facts import HostFacts
from orchestrator.backends.reports import HostServers, same_place
from orchestrator.commands.clean import parse_age
from orchestrator.errors import OrchError, ResultsWriteError
from orchestrator.remote import prune
from orchestrator.remote.prune import RunEntry, select
from orchestrator.remote.wire import ProbeResult
from orchestrator.results.store import AppendLog, write_error, write_json
from orchestrator.runner.preflight import host_requirements

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "wire"


# -- item 9: a full results disk is a typed error, never an OSError ----------------------------


def test_enospc_is_named_with_path_and_reason() -> None:
    exc = write_error(Path("/r/x/summary.json"), OSError(errno.ENOSPC, "No space left on device"))
    assert isinstance(exc, ResultsWriteError) and isinstance(exc, OrchError)
    assert str(exc) == "cannot write /r/x/summary.json: no space left on device"
    assert exc.errno == errno.ENOSPC and "--results" in (exc.hint or "")


def test_append_log_on_a_full_device_records_and_raises(tmp_path: Path) -> None:
    """/dev/full: a real file whose every flush fails with ENOSPC."""
    log = AppendLog(tmp_path / "server.log")
    log._fh.close()  # type: ignore[union-attr]
    log._fh = open("/dev/full", "w", encoding="utf-8")  # noqa: SIM115
    with pytest.raises(ResultsWriteError, match="no space left on device"):
        log.write_line("INFO engine started")
    assert log.error is not None and log.error.path == str(tmp_path / "server.log")
    with pytest.raises(ResultsWriteError):  # every later write says so again
        log.write_json({"a": 1})
    log.close()  # never raises: the error is kept
    assert log.closed and log.error.errno == errno.ENOSPC


def tiny_disk(path: Path, size: str = "64k") -> Path:
    path.mkdir()
    if os.geteuid() != 0 or os.system(f"mount -t tmpfs -o size={size} tmpfs {path} 2>/dev/null"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    return path


def test_write_json_on_a_full_tmpfs(tmp_path: Path) -> None:
    disk = tiny_disk(tmp_path / "disk")
    try:
        with open(disk / "filler", "wb") as fh, pytest.raises(OSError):
            fh.write(b"\0" * 128 * 1024)
            fh.flush()
        with pytest.raises(ResultsWriteError, match=r"summary\.json: no space left on device"):
            write_json(disk / "summary.json", {"big": "x" * 8192})
        assert not (disk / "summary.json").exists()
        assert [p.name for p in disk.iterdir()] == ["filler"]  # no temp file left behind
    finally:
        os.system(f"umount {disk}")


# -- item 11: which finished runs prune removes -------------------------------------------------


NOW = 1_000_000.0
DAY = 86400.0


def entries() -> list[RunEntry]:
    return [
        RunEntry("a", live=False, ended_at=NOW - 10 * DAY),
        RunEntry("b", live=False, ended_at=NOW - 3 * DAY),
        RunEntry("c", live=False, ended_at=NOW - 60),
        RunEntry("d", live=True, ended_at=None),
        RunEntry("e", live=False, ended_at=None),
    ]


@pytest.mark.parametrize(
    ("older_than", "keep", "removed", "kept"),
    [
        (None, None, ["c", "b", "a", "e"], []),
        (7 * DAY, None, ["a", "e"], ["b", "c"]),
        (None, 1, ["b", "a", "e"], ["c"]),
        (None, 2, ["a", "e"], ["b", "c"]),
        (DAY, 2, ["a", "e"], ["b", "c"]),
        (DAY, 0, ["b", "a", "e"], ["c"]),
        (None, 10, [], ["a", "b", "c", "e"]),
    ],
)
def test_prune_selection(older_than, keep, removed, kept) -> None:
    remove, spared = select(entries(), now=NOW, older_than_s=older_than, keep=keep)
    assert [r.run_id for r in remove] == removed
    assert sorted(r.run_id for r in spared) == kept
    assert "d" not in {r.run_id for r in remove + spared}  # a live run is never touched


def make_run(workdir: Path, run_id: str, *, ended_at: float | None, pid: int | None = None) -> None:
    d = workdir / "runs" / run_id
    d.mkdir(parents=True)
    record = {
        "run_id": run_id, "pid": pid or 999999, "pgid": pid or 999999, "supervisor_pid": 1,
        "argv": ["vllm", "serve", "m", "--api-key", "sk-secret"], "requested_argv": ["vllm"],
        "env_keys": [], "port": 8000, "cwd": str(d), "log": str(d / "server.log"),
        "started_at": NOW, "start_ticks": None, "boot_id": None,
    }  # fmt: skip
    (d / "server.json").write_text(json.dumps(record))
    (d / "server.log").write_text("x" * 100)
    if ended_at is not None:
        (d / "exit.json").write_text(
            json.dumps(
                {"pid": record["pid"], "returncode": 0, "signal": None, "ended_at": ended_at}
            )
        )


def test_prune_handler_removes_finished_keeps_live_and_stale_specs(tmp_path: Path) -> None:
    now = time.time()
    make_run(tmp_path, "old", ended_at=now - 2 * DAY)
    make_run(tmp_path, "new", ended_at=now - 10)
    make_run(tmp_path, "live", ended_at=None, pid=os.getpid())  # this process: alive
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "launch-stale.json").write_text("{}")
    os.utime(specs / "launch-stale.json", (now - 2 * DAY, now - 2 * DAY))
    (specs / "probe-fresh.json").write_text("{}")
    raw = {"workdir": str(tmp_path), "keep": 1}
    dry = prune.run({**raw, "dry_run": True}, lambda e: None)
    assert [p.run_id for p in dry.pruned] == ["old"] and not dry.pruned[0].removed
    assert (tmp_path / "runs" / "old").is_dir()
    size = sum(f.stat().st_size for f in (tmp_path / "runs" / "old").iterdir())
    result = prune.run(raw, lambda e: None)
    assert [(p.run_id, p.removed, p.bytes) for p in result.pruned] == [("old", True, size)]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["live", "new"]
    assert result.kept == ["new"] and result.live == ["live"]
    assert [Path(p).name for p in result.specs_removed] == ["launch-stale.json"]
    assert sorted(p.name for p in specs.iterdir()) == ["probe-fresh.json"]
    assert result.workdir == os.path.realpath(tmp_path)


def test_parse_age() -> None:
    assert [parse_age(t) for t in ("7d", "12h", "30m", "90s", "2w", "5")] == [
        7 * DAY, 12 * 3600.0, 1800.0, 90.0, 14 * DAY, 5.0,
    ]  # fmt: skip
    with pytest.raises(OrchError, match="not an age"):
        parse_age("a week")


# -- item 12: what a run needs on its host ----------------------------------------------------


def facts(modules: dict[str, bool]) -> HostFacts:
    raw = json.loads((GOLDEN / "probe.result.json").read_text())
    raw["modules"] = modules
    return HostFacts.from_probe(ProbeResult.from_json(raw))


def test_host_without_its_engine_is_named() -> None:
    # aiohttp is not needed: the load generator's HTTP client is the agent's own
    f = facts({"aiohttp": False, "vllm": True, "sglang": False})
    (line,) = host_requirements("python3", f, engine="sglang")
    assert line.startswith("sglang is not importable by python3 (")
    assert host_requirements("python3", f, engine="vllm") == []
    ok = facts({"aiohttp": True, "vllm": True, "sglang": True})
    assert host_requirements("python3", ok, engine="vllm") == []
    assert host_requirements("python3", facts({}), engine="vllm") == []  # older agent: unknown


# -- item 13: two host entries, one machine and workdir ---------------------------------------


def test_entries_sharing_a_workdir_are_shown_once() -> None:
    a = HostServers("a", machine_id="m1", workdir="/home/u/.cache/orch")
    b = HostServers("b", machine_id="m1", workdir="/home/u/.cache/orch")
    c = HostServers("c", machine_id="m1", workdir="/scratch/orch")
    d = HostServers("d", machine_id="m2", workdir="/home/u/.cache/orch")
    e = HostServers("e", error="unreachable")
    out = same_place([a, b, c, d, e])
    assert [(x.host, x.also) for x in out] == [("a", ["b"]), ("c", []), ("d", []), ("e", [])]
