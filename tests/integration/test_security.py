"""Hostile hosts over real OpenSSH (issue 9): what runs is what orch pushed (item 15)."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import zipapp
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from orchestrator.agent.bundle import build_bundle
from orchestrator.agent.client import Agent
from orchestrator.agent.verify import UnsafeRemotePath
from orchestrator.config.hostconfig import HostConfig
from orchestrator.errors import HostKeyMismatch
from orchestrator.remote.wire import EchoSpec
from orchestrator.transport import ConnectionPool
from tests.fixtures.sshd import SshdFactory, SshdHost

pytestmark = pytest.mark.integration

T = TypeVar("T")
NOBODY = 65534


@pytest.fixture
def host(sshd_factory: SshdFactory) -> SshdHost:
    return sshd_factory.start("sec-a")


def with_agent(
    factory: SshdFactory, config: HostConfig, body: Callable[[Agent], Awaitable[T]]
) -> T:
    async def scenario() -> T:
        pool = factory.pool()
        try:
            return await body(Agent(await pool.get(config), config))
        finally:
            await pool.close()

    return asyncio.run(scenario())


def plant(workdir: Path, marker: Path) -> Path:
    """A zip at the agent's path that, if ever run, creates ``marker``."""
    src = workdir.parent / f"{workdir.name}-src"
    src.mkdir()
    (src / "__main__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    pyz = workdir / build_bundle().filename
    zipapp.create_archive(src, pyz)
    return pyz


def workdir_for(host: SshdHost, name: str, mode: int) -> Path:
    workdir = host.home / name
    (workdir / "specs").mkdir(parents=True, mode=0o700)
    os.chmod(workdir / "specs", 0o700)
    os.chmod(workdir, mode)
    return workdir


def test_a_group_writable_workdir_is_refused_and_nothing_runs(
    sshd_factory: SshdFactory, host: SshdHost, tmp_path: Path
) -> None:
    workdir = workdir_for(host, "shared-gw", 0o775)
    marker = tmp_path / "planted-ran"
    plant(workdir, marker)
    config = host.host_config(workdir=str(workdir))
    with pytest.raises(UnsafeRemotePath) as caught:
        with_agent(sshd_factory, config, lambda a: a.echo(EchoSpec()))
    err = caught.value
    assert err.host == "sec-a"
    assert err.message.startswith(f"refusing to use {workdir}: others can write to it (")
    assert "drwxrwxr-x" in err.message
    assert err.hint == f"run `chmod go-w {workdir}` on the host (or `chmod 700 {workdir}`)"
    assert not marker.exists()
    assert list((workdir / "specs").iterdir()) == []  # no spec was written there either


def test_an_agent_file_of_another_user_is_refused_and_not_run(
    sshd_factory: SshdFactory, host: SshdHost, tmp_path: Path
) -> None:
    workdir = workdir_for(host, "planted-other", 0o700)
    marker = tmp_path / "planted-ran"
    pyz = plant(workdir, marker)
    os.chown(pyz, NOBODY, NOBODY)
    config = host.host_config(workdir=str(workdir))
    with pytest.raises(UnsafeRemotePath) as caught:
        with_agent(sshd_factory, config, lambda a: a.echo(EchoSpec()))
    assert caught.value.message.startswith(
        f"refusing to run {pyz}: it belongs to another user (owner uid {NOBODY}, mode -rw-r--r--"
    )
    assert not marker.exists()


def test_an_agent_file_with_other_content_is_replaced_then_verified(
    sshd_factory: SshdFactory, host: SshdHost, tmp_path: Path
) -> None:
    workdir = workdir_for(host, "planted-own", 0o700)
    marker = tmp_path / "planted-ran"
    pyz = plant(workdir, marker)
    config = host.host_config(workdir=str(workdir))
    bundle = build_bundle()

    async def body(agent: Agent) -> tuple[int, object]:
        pushed = await agent.ensure()
        return pushed, (await agent.echo(EchoSpec(payload="hi"))).payload

    pushed, payload = with_agent(sshd_factory, config, body)
    assert payload == "hi"  # the pushed agent answers
    assert pushed == len(bundle.data)  # the planted file did not count as the agent
    assert pyz.read_bytes() == bundle.data
    assert not marker.exists()


def test_a_workdir_orch_creates_is_private_whatever_the_umask(
    sshd_factory: SshdFactory, host: SshdHost
) -> None:
    workdir = host.home / "fresh" / "orch"
    config = host.host_config(workdir=str(workdir))
    with_agent(sshd_factory, config, lambda a: a.ensure())
    assert oct(workdir.stat().st_mode & 0o777) == oct(0o700)
    assert oct((workdir / "specs").stat().st_mode & 0o777) == oct(0o700)


# -- host keys: every known_hosts file OpenSSH reads, and its @revoked lines (item 21) -----------


def _pool_with_global(
    host: SshdHost, tmp_path: Path, global_lines: list[str], user_lines: list[str], accept: bool
) -> tuple[ConnectionPool, Path]:
    glob = tmp_path / "ssh_known_hosts"
    glob.write_text("".join(line + "\n" for line in global_lines))
    user = tmp_path / "known_hosts"
    user.write_text("".join(line + "\n" for line in user_lines))
    config = tmp_path / "ssh_config"
    config.write_text(f"GlobalKnownHostsFile {glob}\n")
    pool = ConnectionPool(
        known_hosts=user, accept_new_host_keys=accept, connect_timeout=5.0, ssh_config=[config]
    )
    return pool, user


def _connect(pool: ConnectionPool, config: HostConfig) -> None:
    async def scenario() -> None:
        try:
            await pool.get(config)
        finally:
            await pool.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("accept_new", [True, False])
def test_a_key_revoked_in_the_global_known_hosts_is_refused_and_never_recorded(
    host: SshdHost, tmp_path: Path, accept_new: bool
) -> None:
    line = host.known_hosts_line()
    # accept-new with nothing recorded; or the key also trusted in the user's own file
    pool, user = _pool_with_global(
        host, tmp_path, [f"@revoked {line}"], [] if accept_new else [line], accept_new
    )
    with pytest.raises(HostKeyMismatch) as caught:
        _connect(pool, host.host_config())
    err = caught.value
    assert err.message.startswith(f"REVOKED HOST KEY for 127.0.0.1:{host.port}: the server offered")
    assert host.fingerprint in err.message and str(tmp_path / "ssh_known_hosts") in err.message
    assert user.read_text() == ("" if accept_new else line + "\n")  # nothing recorded


def test_a_key_trusted_only_in_the_global_known_hosts_is_accepted(
    host: SshdHost, tmp_path: Path
) -> None:
    pool, user = _pool_with_global(host, tmp_path, [host.known_hosts_line()], [], False)
    _connect(pool, host.host_config())
    assert user.read_text() == ""


# -- item 15 through the CLI: `orch hosts check` refuses, names the fix, runs nothing -------------


def hosts_check(factory: SshdFactory, host: SshdHost, workdir: Path, tmp_path: Path) -> str:
    """`orch hosts check` on ``host`` with ``workdir``: its exit status must be 1; returns the
    console (stdout and stderr, rich's wrapping undone)."""
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "known_hosts": str(factory.write_known_hosts()),
                "ssh_config": str(factory.ssh_config_path),
                "hosts": {"sec-a": {**host.inventory_entry(), "workdir": str(workdir)}},
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "hosts", "check", "--hosts", str(inventory)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(done.stdout + done.stderr)
    console = squash(done.stdout + done.stderr)
    assert done.returncode == 1, console
    assert "Traceback" not in console
    return console


def squash(text: str) -> str:
    """Text without whitespace nor the table's box lines: rich wraps long paths mid-word and
    table cells across lines off a terminal."""
    return "".join(c for c in text if not c.isspace() and not "\u2500" <= c <= "\u257f")


def test_hosts_check_refuses_a_group_writable_workdir_naming_path_mode_and_fix(
    sshd_factory: SshdFactory, host: SshdHost, tmp_path: Path
) -> None:
    workdir = workdir_for(host, "cli-gw", 0o775)
    marker = tmp_path / "planted-ran"
    plant(workdir, marker)
    console = hosts_check(sshd_factory, host, workdir, tmp_path)
    # the table's narrow column may elide the path; the fix below names it in full
    assert squash("agent failed: refusing to use") in console
    assert squash(f"others can write to it (owner uid {os.getuid()}, mode drwxrwxr-x (0775))") in (
        console
    )
    assert squash(f"sec-a: run `chmod go-w {workdir}` on the host") in console
    assert not marker.exists()  # the planted agent never ran


@pytest.mark.parametrize("mode", [0o770, 0o707])
def test_hosts_check_refuses_a_specs_folder_others_can_write_to(
    sshd_factory: SshdFactory, host: SshdHost, tmp_path: Path, mode: int
) -> None:
    workdir = workdir_for(host, f"cli-specs-{mode:o}", 0o700)
    specs = workdir / "specs"
    os.chmod(specs, mode)
    marker = tmp_path / "planted-ran"
    plant(workdir, marker)
    console = hosts_check(sshd_factory, host, workdir, tmp_path)
    assert squash("agent failed: refusing to use") in console
    shown = f"mode {stat.filemode(stat.S_IFDIR | mode)} ({mode:04o})"
    assert squash(f"others can write to it (owner uid {os.getuid()}, {shown})") in console
    assert squash(f"sec-a: run `chmod go-w {specs}` on the host") in console
    assert not marker.exists()
    assert list(specs.iterdir()) == []  # no spec was written there
