"""The fan-out benchmark keeps working (`--smoke`: 1 and 2 sshd hosts, orch and parallel ssh),
and leaves no sshd nor any process started through one behind.

Not a measurement: no figure is compared with another, only that each was taken.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from benchmarks.collect import collect
from tests.fixtures.benchsmoke import smoke

pytestmark = pytest.mark.integration

TITLE = "## Fan-out of `orch hosts check` against ssh and Ansible"


def _sshd_installed() -> bool:
    return shutil.which("sshd") is not None or os.access("/usr/sbin/sshd", os.X_OK)


def _processes_mentioning(text: str) -> list[int]:
    """Running processes whose command line or environment holds ``text``."""
    tag, found = text.encode(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            seen = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if tag in seen:
            found.append(int(entry.name))
    return found


def test_fanout_benchmark_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not _sshd_installed():
        if os.geteuid() != 0:
            pytest.skip("OpenSSH sshd is not installed (apt-get install openssh-server)")
        pytest.fail("sshd is missing: run `make test`, which installs openssh-server")
    scratch = tmp_path / "scratch"  # the benchmark's hosts live here, so we can look for them
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    data = smoke("fanout", tmp_path)

    assert data["smoke"] is True and data["name"] == "fanout"
    assert data["columns"] == ["what", "1 host", "2 hosts"]
    rows = {row[0]: row[1:] for row in data["rows"]}
    assert len(rows) == len(data["rows"]) == 12
    for label in (
        "`orch hosts check`, warm: wall s",
        "… orch's CPU s (the controller)",
        "… the ssh processes' CPU s",
        "`orch hosts check`, cold (agent pushed): wall s",
        "`ssh host true`, N at once: wall s",
        "… the hosts' CPU s (sshd, agent, probe)",
    ):
        assert all(value > 0 for value in rows[label]), label
    # the peers that take minutes are left to the full run
    assert rows["orch one host at a time (N invocations): wall s"] == [None, None]
    assert rows["`ansible all -m ping`, forks = N, warm: wall s"] == [None, None]
    assert [(t["name"], t["limit"], t["unit"]) for t in data["targets"]] == [
        ("orch: 2 hosts against 1 (warm wall time)", 3.0, "×")
    ]
    assert data["machine"]["cores"] == os.cpu_count()
    assert (tmp_path / "fanout.md").read_text().startswith(TITLE)
    assert f"{TITLE}\n\nNot measured yet." in collect(tmp_path)  # a smoke run is never shown

    assert list(scratch.iterdir()) == []  # its temporary directory is gone
    assert _processes_mentioning(str(scratch)) == []  # and so is every process it started
