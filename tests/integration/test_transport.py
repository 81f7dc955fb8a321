"""The SSH transport against real OpenSSH sshd servers on 127.0.0.1 (no mocked SSH)."""

from __future__ import annotations

import asyncio
import json
import pwd
import socket
import sys
import time
from pathlib import Path

import pytest

from orchestrator.config import load_inventory
from orchestrator.errors import (
    AuthFailed,
    HostKeyMismatch,
    HostKeyUnknown,
    HostTimeout,
    HostUnreachable,
    NoFreeChannel,
    RemoteCommandError,
)
from orchestrator.transport import Connection, ConnectionPool, command_line
from orchestrator.transport.connect import split_host_port
from orchestrator.transport.hostkeys import KeyTarget
from orchestrator.transport.ssh import MAX_CHANNELS
from tests.fixtures.argv import AWKWARD, PRINT_ARGV
from tests.fixtures.procs import alive
from tests.fixtures.sshd import SshdFactory, SshdHost, free_port, keygen

pytestmark = pytest.mark.integration


def test_argv_items_reach_the_remote_process_unchanged(ssh_hosts, sshd_factory):
    host = ssh_hosts[0]

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            return await conn.run([sys.executable, "-c", PRINT_ARGV, *AWKWARD], check=True)

    result = asyncio.run(scenario())
    assert json.loads(result.stdout) == AWKWARD
    assert result.returncode == 0
    assert result.argv == [sys.executable, "-c", PRINT_ARGV, *AWKWARD]
    assert not Path("/tmp/orch-pwned").exists()


def test_run_reports_exit_code_and_stderr_and_check_raises(sshd_factory):
    host = sshd_factory.start()
    script = "import sys; print('out'); print('bad thing', file=sys.stderr); sys.exit(3)"

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            done = await conn.run([sys.executable, "-c", script])
            with pytest.raises(RemoteCommandError) as err:
                await conn.run([sys.executable, "-c", script], check=True)
            return done, err.value

    done, error = asyncio.run(scenario())
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "bad thing\n")
    assert error.host == host.name
    assert "exited with 3" in str(error) and "bad thing" in str(error)


def test_put_bytes_is_atomic_private_and_overwrites(sshd_factory):
    host = sshd_factory.start()
    target = f"{host.workdir}/specs/probe.json"

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            await conn.makedirs(f"{host.workdir}/specs")
            await conn.makedirs(f"{host.workdir}/specs")  # exists already: fine
            assert not await conn.exists(target)
            first = await conn.put_bytes(b'{"n": 1}', target)
            inode1 = (await conn.run(["stat", "-c", "%i %a", target], check=True)).stdout.split()
            second = await conn.put_bytes(b'{"n": 2, "more": true}', target, mode=0o640)
            inode2 = (await conn.run(["stat", "-c", "%i %a", target], check=True)).stdout.split()
            listing = (await conn.run(["ls", "-A", f"{host.workdir}/specs"], check=True)).stdout
            return first, second, inode1, inode2, listing, await conn.read_bytes(target), conn

    first, second, inode1, inode2, listing, data, conn = asyncio.run(scenario())
    assert (first, second) == (8, 22)
    assert conn.bytes_pushed == 30
    assert inode1[1] == "600" and inode2[1] == "640"
    assert inode1[0] != inode2[0]  # a new file renamed over the old one, not rewritten in place
    assert listing.split() == ["probe.json"]  # no temporary file left behind
    assert data == b'{"n": 2, "more": true}'
    assert (Path(target).stat().st_mode & 0o777) == 0o640


def test_sftp_errors_name_the_host_and_path(sshd_factory):
    host = sshd_factory.start()

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            with pytest.raises(RemoteCommandError) as missing:
                await conn.read_bytes(f"{host.workdir}/nope.json")
            with pytest.raises(RemoteCommandError) as no_dir:
                await conn.put_bytes(b"x", f"{host.workdir}/no/such/dir/f")
            return missing.value, no_dir.value, await conn.home()

    missing, no_dir, home = asyncio.run(scenario())
    assert missing.host == host.name and "nope.json" in str(missing)
    assert "no such file" in str(missing)
    assert "no/such/dir/f" in str(no_dir)
    # sshd starts SFTP in the login directory of the user's passwd entry; the client's $HOME
    # plays no part (CI systems often point it elsewhere)
    assert home == pwd.getpwnam(host.user).pw_dir


def test_unknown_host_key_refused_then_recorded_with_flag(sshd_factory, tmp_path):
    host = sshd_factory.start()
    known = tmp_path / "fresh" / ".ssh" / "known_hosts"  # neither file nor directory exist

    async def connect(accept_new: bool) -> Connection:
        async with sshd_factory.pool(known_hosts=known, accept_new_host_keys=accept_new) as pool:
            conn = await pool.get(host.host_config())
            assert (await conn.run(["echo", "hi"], check=True)).stdout == "hi\n"
            return conn

    with pytest.raises(HostKeyUnknown) as refused:
        asyncio.run(connect(accept_new=False))
    message = f"{refused.value} {refused.value.hint}"
    assert refused.value.host == host.name
    assert host.fingerprint in message and "ssh-ed25519" in message
    assert "--accept-new-host-keys" in message
    assert f"ssh-keyscan -p {host.port} 127.0.0.1" in message
    assert not known.exists()

    asyncio.run(connect(accept_new=True))
    assert known.read_text() == host.known_hosts_line() + "\n"
    assert known.stat().st_mode & 0o777 == 0o600
    assert known.parent.stat().st_mode & 0o777 == 0o700

    asyncio.run(connect(accept_new=False))  # strict mode now trusts the recorded key
    assert known.read_text() == host.known_hosts_line() + "\n"  # nothing appended twice


def test_accept_new_appends_next_to_existing_entries(sshd_factory, tmp_path):
    first, second = sshd_factory.start(), sshd_factory.start()
    known = sshd_factory.write_known_hosts([first], path=tmp_path / "known_hosts")
    known.write_text(known.read_text().rstrip("\n"))  # a file without a final newline

    async def scenario():
        async with sshd_factory.pool(known_hosts=known, accept_new_host_keys=True) as pool:
            await asyncio.gather(pool.get(first.host_config()), pool.get(second.host_config()))

    asyncio.run(scenario())
    assert known.read_text().splitlines() == [first.known_hosts_line(), second.known_hosts_line()]


def test_changed_host_key_is_refused_even_with_the_flag(sshd_factory):
    host = sshd_factory.start()
    known = sshd_factory.write_known_hosts([host])
    old_fingerprint = host.fingerprint
    host.regenerate_host_key()
    before = known.read_text()

    for accept_new in (False, True):

        async def scenario(accept_new: bool = accept_new) -> None:
            async with sshd_factory.pool(known_hosts=known, accept_new_host_keys=accept_new) as p:
                await p.get(host.host_config())

        with pytest.raises(HostKeyMismatch) as refused:
            asyncio.run(scenario())
        text = f"{refused.value} {refused.value.hint}"
        assert refused.value.host == host.name
        assert old_fingerprint in text and host.fingerprint in text
        assert str(refused.value).count(old_fingerprint) == 1
        assert f"{known}:1" in text  # the line to remove
        assert f"ssh-keygen -R '[127.0.0.1]:{host.port}'" in text
    assert known.read_text() == before


def test_unreachable_host_fails_alone_while_others_connect(ssh_hosts, sshd_factory):
    dead = ssh_hosts[0].host_config(name="dead", port=free_port())

    async def scenario():
        async with sshd_factory.pool() as pool:

            async def probe(cfg):
                conn = await pool.get(cfg)
                return (await conn.run(["echo", cfg.name], check=True)).stdout.strip()

            configs = [h.host_config() for h in ssh_hosts[1:]] + [dead]
            return await asyncio.gather(*(probe(c) for c in configs), return_exceptions=True)

    *ok, failed = asyncio.run(scenario())
    assert ok == [h.name for h in ssh_hosts[1:]]
    assert isinstance(failed, HostUnreachable)
    assert failed.host == "dead"
    assert f"127.0.0.1:{dead.port}" in str(failed) and "refused" in str(failed)


def test_wrong_key_is_auth_failed_naming_user_and_key(sshd_factory, tmp_path):
    host = sshd_factory.start()
    stranger = keygen(tmp_path / "stranger_ed25519", comment="stranger")

    async def scenario():
        async with sshd_factory.pool() as pool:
            await pool.get(host.host_config(identity_file=str(stranger)))

    with pytest.raises(AuthFailed) as refused:
        asyncio.run(scenario())
    assert refused.value.host == host.name
    assert repr(host.user) in str(refused.value) and str(stranger) in str(refused.value)


def test_missing_identity_file_is_auth_failed(sshd_factory, tmp_path):
    host = sshd_factory.start()

    async def scenario():
        async with sshd_factory.pool() as pool:
            await pool.get(host.host_config(identity_file=str(tmp_path / "nope")))

    with pytest.raises(AuthFailed, match="cannot load identity file .*nope"):
        asyncio.run(scenario())


def test_silent_server_times_out(sshd_factory):
    with socket.socket() as listener:  # accepts TCP, never speaks SSH
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        host = sshd_factory.start()

        async def scenario():
            async with sshd_factory.pool(connect_timeout=0.5) as pool:  # the host sets none
                await pool.get(host.host_config(name="mute", port=port, connect_timeout=None))

        with pytest.raises(HostTimeout) as timed_out:
            asyncio.run(scenario())
    # the message names the timeout that was applied: the pool's, as the host sets none
    assert timed_out.value.host == "mute" and "0.5s" in str(timed_out.value)


def test_connect_timeout_written_in_hosts_yaml_wins_over_the_pools(sshd_factory, tmp_path):
    """15 (HostConfig's old default) written by the user is the user's: not replaced."""
    with socket.socket() as listener:  # accepts TCP, never speaks SSH
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        hosts = tmp_path / "hosts.yaml"
        hosts.write_text(
            f"defaults: {{address: 127.0.0.1, port: {port}}}\n"
            "hosts:\n"
            "  own: {connect_timeout: 15}\n"
            "  unset: {}\n"
        )
        inventory = load_inventory(hosts)

        async def scenario():
            async with sshd_factory.pool(connect_timeout=0.4) as pool:
                chosen = pool.timeout_for(inventory["own"]), pool.timeout_for(inventory["unset"])
                with pytest.raises(HostTimeout) as unset:
                    await pool.get(inventory["unset"])
                with pytest.raises(asyncio.TimeoutError):  # still waiting, well past 0.4 s
                    await asyncio.wait_for(pool.get(inventory["own"]), 1.5)
                return chosen, unset.value

        chosen, unset = asyncio.run(scenario())
    assert chosen == (15.0, 0.4)
    assert unset.host == "unset" and "within 0.4s" in str(unset)


def test_remove_deletes_a_file_and_tolerates_a_missing_one(sshd_factory):
    host = sshd_factory.start()
    target = f"{host.workdir}/specs/launch.json"

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            await conn.makedirs(f"{host.workdir}/specs")
            await conn.put_bytes(b"{}", target)
            removed = await conn.remove(target)
            gone = not await conn.exists(target)
            again = await conn.remove(target)  # already gone: not an error
            with pytest.raises(RemoteCommandError) as not_a_file:
                await conn.remove(f"{host.workdir}/specs")
            return removed, gone, again, not_a_file.value

    removed, gone, again, not_a_file = asyncio.run(scenario())
    assert (removed, gone, again) == (True, True, False)
    assert not_a_file.host == host.name
    assert str(not_a_file).startswith(f"{host.name}: removing {host.workdir}/specs: ")
    assert (host.workdir / "specs").is_dir()


def test_command_timeout(sshd_factory):
    host = sshd_factory.start()

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            with pytest.raises(HostTimeout) as timed_out:
                await conn.run(["sleep", "5"], timeout=0.3)
            after = await conn.run(["echo", "still usable"], check=True)
            return timed_out.value, after.stdout

    error, after = asyncio.run(scenario())
    assert error.host == host.name and "sleep 5" in str(error)
    assert after == "still usable\n"


def test_ssh_config_alias_supplies_hostname_port_user_and_key(sshd_factory):
    host = sshd_factory.start()
    sshd_factory.ssh_config_path.write_text(
        f"Host gpu-alias\n"
        f"    HostName 127.0.0.1\n"
        f"    Port {host.port}\n"
        f"    User {host.user}\n"
        f"    IdentityFile {host.client_key}\n"
        f"    IdentitiesOnly yes\n"
    )
    aliased = host.host_config(name="aliased", address="gpu-alias", port=None, user=None,
                               identity_file=None)  # fmt: skip

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(aliased)
            return (await conn.run(["sh", "-c", 'echo "$HOME"'], check=True)).stdout.strip()

    assert asyncio.run(scenario()) == str(host.home)


def test_proxy_jump_through_another_sshd(sshd_factory):
    bastion, inner = sshd_factory.start("bastion"), sshd_factory.start("inner")
    sshd_factory.ssh_config_path.write_text(
        f"Host jumpbox\n"
        f"    HostName 127.0.0.1\n"
        f"    Port {bastion.port}\n"
        f"    User {bastion.user}\n"
        f"    IdentityFile {bastion.client_key}\n"
    )

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(inner.host_config(proxy_jump="jumpbox"))
            out = (await conn.run(["sh", "-c", 'echo "$HOME"'], check=True)).stdout.strip()
            return out, len(bastion.session_pids())

    out, bastion_sessions = asyncio.run(scenario())
    assert out == str(inner.home)
    assert bastion_sessions == 1  # the only way we reached `inner` was through `bastion`


def test_proxy_jump_host_key_is_checked_too(sshd_factory):
    bastion, inner = sshd_factory.start("bastion"), sshd_factory.start("inner")
    known = sshd_factory.write_known_hosts([inner])  # the jump host is not trusted

    async def scenario():
        async with sshd_factory.pool(known_hosts=known) as pool:
            await pool.get(inner.host_config(proxy_jump=f"{bastion.user}@127.0.0.1:{bastion.port}"))

    with pytest.raises(HostKeyUnknown) as refused:
        asyncio.run(scenario())
    assert refused.value.host == "inner"
    assert f"127.0.0.1:{bastion.port}" in str(refused.value)
    assert bastion.fingerprint in str(refused.value)


def test_stream_yields_lines_as_they_are_printed(sshd_factory, tmp_path):
    """The command prints `first`, then waits for a file that the test creates only once it
    has read `first`: a stream that held lines back until the command ended would see the
    command give up waiting instead."""
    host = sshd_factory.start()
    go = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        "print('first', flush=True)\n"
        "deadline = time.monotonic() + 60\n"
        f"while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        f"print('second' if os.path.exists({str(go)!r}) else 'no go')\n"
    )

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            seen = []
            async for line in conn.stream([sys.executable, "-c", script]):
                seen.append(line)
                go.touch()
            return seen

    assert asyncio.run(scenario()) == ["first", "second"]


def test_stream_raises_on_failure_with_stderr_tail(sshd_factory):
    host = sshd_factory.start()
    script = (
        "import sys; print('partial'); sys.stderr.write('boom: model not found\\n'); sys.exit(4)"
    )

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            seen = []
            with pytest.raises(RemoteCommandError) as failed:
                async for line in conn.stream([sys.executable, "-c", script]):
                    seen.append(line)
            return seen, failed.value

    seen, error = asyncio.run(scenario())
    assert seen == ["partial"]
    assert "exited with 4" in str(error) and "boom: model not found" in str(error)


def test_leaving_a_stream_early_ends_the_remote_command(sshd_factory, tmp_path):
    host = sshd_factory.start()
    pid_file = tmp_path / "pid"
    script = (
        "import os, sys, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "i = 0\n"
        "while True:\n"
        "    print(i, flush=True); i += 1; time.sleep(0.05)\n"
    )

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            async with conn.open_stream([sys.executable, "-c", script]) as lines:
                async for line in lines:
                    if line == "3":
                        break
            return (await conn.run(["echo", "next"], check=True)).stdout

    assert asyncio.run(scenario()) == "next\n"
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_connection_is_created_once_and_reused(sshd_factory):
    host = sshd_factory.start()

    async def scenario():
        async with sshd_factory.pool() as pool:
            cfg = host.host_config()
            together = await asyncio.gather(*(pool.get(cfg) for _ in range(5)))
            again = await pool.get(cfg)
            await asyncio.gather(*(c.run(["true"], check=True) for c in together))
            return together, again, len(host.session_pids())

    together, again, sessions = asyncio.run(scenario())
    assert all(c is again for c in together)
    assert sessions == 1


def test_many_concurrent_commands_share_one_connection(sshd_factory):
    host = sshd_factory.start()  # OpenSSH's default MaxSessions is 10 per connection

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            runs = [conn.run(["sh", "-c", f"sleep 0.1; echo {i}"], check=True) for i in range(25)]
            return [r.stdout.strip() for r in await asyncio.gather(*runs)]

    assert asyncio.run(scenario()) == [str(i) for i in range(25)]


def test_every_channel_busy_refuses_a_background_stream_at_once(sshd_factory):
    """SFTP plus MAX_CHANNELS long-lived commands fit OpenSSH's MaxSessions (10); a background
    stream (the session agent, a spare) then fails at once instead of waiting, which could
    deadlock with the runs' streams; with a channel free again it opens."""
    host = sshd_factory.start()

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            await conn.home()  # SFTP's channel
            held = [conn.open_stream(["cat"], check=False) for _ in range(MAX_CHANNELS)]
            for stream in held:
                await stream.__aenter__()
            background = conn.open_stream(["cat"], check=False, background=True)
            started = time.monotonic()
            with pytest.raises(NoFreeChannel):
                await background.__aenter__()
            refused_after = time.monotonic() - started
            await held.pop().__aexit__(None, None, None)
            async with conn.open_stream(["echo", "spare"], background=True) as spare:
                lines = [line async for line in spare]
            for stream in held:
                await stream.__aexit__(None, None, None)
            return refused_after, lines

    refused_after, lines = asyncio.run(scenario())
    assert refused_after < 1.0
    assert lines == ["spare"]


def test_dropped_connection_is_reported_and_the_pool_reconnects(sshd_factory):
    host = sshd_factory.start()
    proxy = sshd_factory.proxy(host)
    cfg = host.host_config(port=proxy.port)
    script = "import time\nfor i in range(100):\n    print(i, flush=True); time.sleep(0.05)\n"

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(cfg)
            seen = []
            with pytest.raises(HostUnreachable) as dropped:
                async for line in conn.stream([sys.executable, "-c", script]):
                    seen.append(line)
                    if line == "2":
                        assert proxy.cut() == 1
            assert conn.closed
            with pytest.raises(HostUnreachable):
                await conn.run(["true"])
            fresh = await pool.get(cfg)
            out = (await fresh.run(["echo", "back"], check=True)).stdout
            return seen, dropped.value, fresh is conn, out

    seen, error, same, out = asyncio.run(scenario())
    assert seen[:3] == ["0", "1", "2"] and len(seen) < 100
    assert error.host == host.name and "connection lost" in str(error)
    assert not same and out == "back\n"


def test_killed_sshd_session_is_reported(sshd_factory):
    host = sshd_factory.start()

    async def scenario():
        async with sshd_factory.pool() as pool:
            conn = await pool.get(host.host_config())
            with pytest.raises(HostUnreachable) as dropped:
                async for line in conn.stream(["sh", "-c", "echo up; sleep 30"]):
                    assert line == "up"
                    assert host.kill_sessions() == 1
            return dropped.value

    error = asyncio.run(scenario())
    assert error.host == host.name


def test_fixture_hosts_have_sandbox_tools_on_path(ssh_hosts, sshd_factory):
    query = "--query-gpu=index,name,memory.total,memory.used,utilization.gpu"

    async def scenario():
        async with sshd_factory.pool() as pool:
            outs = []
            for host in ssh_hosts:
                conn = await pool.get(host.host_config())
                path = await conn.run(["sh", "-c", 'echo "$PATH"'], check=True)
                smi = await conn.run(
                    ["nvidia-smi", query, "--format=csv,noheader,nounits"], check=True
                )
                outs.append((path.stdout.strip(), smi.stdout.splitlines()))
            return outs

    for host, (path, smi) in zip(ssh_hosts, asyncio.run(scenario()), strict=True):
        assert path.split(":")[0] == str(host.root / "sandbox" / "bin")
        assert [line.split(", ")[:3] for line in smi] == [
            ["0", "NVIDIA RTX A6000", "49140"],
            ["1", "NVIDIA RTX A6000", "49140"],
        ]
    assert len({h.port for h in ssh_hosts}) == 3


def test_factory_teardown_leaves_nothing_running(tmp_path, ssh_client_key):
    from tests.fixtures.sshd import sshd_binary

    factory = SshdFactory(tmp_path / "s", ssh_client_key, sshd_binary() or "/usr/sbin/sshd")
    try:
        host: SshdHost = factory.start()

        async def scenario():
            async with factory.pool() as pool:
                conn = await pool.get(host.host_config())
                # a detached process, as the agent starts engines: own session, outliving us
                detached = "exec sleep 60 </dev/null >/dev/null 2>&1"
                await conn.run(["setsid", "-f", "sh", "-c", detached], check=True)

        asyncio.run(scenario())
        assert host.process is not None
        listener = host.process.pid
        assert host.leftover_pids()  # the detached sleep survived the connection
    finally:
        factory.close()
    assert not alive(listener) and host.leftover_pids() == []


def test_pool_rejects_nothing_escapes_as_asyncssh_error(sshd_factory):
    """Every failure mode above is an orchestrator error; spot-check the base class too."""
    from orchestrator.errors import HostError

    async def scenario():
        async with ConnectionPool(
            known_hosts=sshd_factory.write_known_hosts([]), ssh_config=[]
        ) as p:
            await p.get(sshd_factory.start().host_config(address="no-such-host.invalid"))

    with pytest.raises(HostError) as failed:
        asyncio.run(scenario())
    assert isinstance(failed.value, HostUnreachable) and "no-such-host.invalid" in str(failed.value)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("bastion", ("bastion", None)),
        ("bastion:2222", ("bastion", 2222)),
        ("10.0.0.1:22", ("10.0.0.1", 22)),
        ("[fe80::1]:2200", ("fe80::1", 2200)),
        ("[fe80::1]", ("fe80::1", None)),
        ("fe80::1", ("fe80::1", None)),
    ],
)
def test_jump_host_specs_split_like_openssh(spec, expected):
    assert split_host_port(spec) == expected


@pytest.mark.parametrize(
    ("host", "port", "pattern"),
    [("10.0.0.11", 22, "10.0.0.11"), ("127.0.0.1", 2222, "[127.0.0.1]:2222"), ("gpu", 22, "gpu")],
)
def test_known_hosts_pattern(host, port, pattern):
    assert KeyTarget(name="x", host=host, port=port).pattern == pattern


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["echo", "a b"], "echo 'a b'"),
        (["python", "-c", "print('x')"], "python -c 'print('\"'\"'x'\"'\"')'"),
        (["ls", "$(x)", ""], "ls '$(x)' ''"),
    ],
)
def test_command_line_quotes_every_item(argv, line):
    assert command_line(argv) == line


@pytest.mark.parametrize("argv", [[], ["echo", "nul\0byte"], ["echo", 3]])
def test_command_line_rejects_what_cannot_be_sent(argv):
    with pytest.raises(ValueError):
        command_line(argv)


def test_host_down_behind_proxy_then_back(sshd_factory):
    host = sshd_factory.start()
    proxy = sshd_factory.proxy(host)
    cfg = host.host_config(port=proxy.port)

    async def scenario():
        async with sshd_factory.pool() as pool:
            proxy.refuse()
            with pytest.raises(HostUnreachable) as down:
                await pool.get(cfg)
            proxy.accept()
            conn = await pool.get(cfg)
            return down.value, (await conn.run(["echo", "up"], check=True)).stdout

    down, out = asyncio.run(scenario())
    assert down.host == host.name and f"127.0.0.1:{proxy.port}" in str(down)
    assert out == "up\n" and proxy.connections_seen == 2
