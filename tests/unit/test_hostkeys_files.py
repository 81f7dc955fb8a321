"""Which known_hosts files are read, as OpenSSH picks them, and @revoked lines (issue 9, 21)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncssh
import pytest

from orchestrator.transport import hostkeys
from orchestrator.transport.connect import Connector

KEY_A = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
KEY_B = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
HOME_KH = hostkeys.DEFAULT_KNOWN_HOSTS.expanduser()
HOME_KH2 = Path("~/.ssh/known_hosts2").expanduser()
ETC = [Path("/etc/ssh/ssh_known_hosts"), Path("/etc/ssh/ssh_known_hosts2")]


def _files(tmp_path: Path, config: str, known_hosts: Path) -> tuple[Path, list[Path]]:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(config)

    async def options() -> asyncssh.SSHClientConnectionOptions:
        return await asyncssh.SSHClientConnectionOptions.construct(host="gpu", config=[str(cfg)])

    connector = Connector(known_hosts=known_hosts, accept_new_host_keys=False, ssh_config=())
    return connector.known_hosts_files(asyncio.run(options()))


@pytest.mark.parametrize(
    ("config", "explicit", "record", "read"),
    [
        ("", False, HOME_KH, [HOME_KH, HOME_KH2, *ETC]),
        ("GlobalKnownHostsFile /g1 /g2\n", False, HOME_KH, [HOME_KH, HOME_KH2, Path("/g1"), Path("/g2")]),
        ("UserKnownHostsFile /u1 /u2\n", False, Path("/u1"), [Path("/u1"), Path("/u2"), *ETC]),
        ("Host gpu\n  UserKnownHostsFile /u1\n  GlobalKnownHostsFile /g\n", False, Path("/u1"), [Path("/u1"), Path("/g")]),
        ("Host other\n  UserKnownHostsFile /u1\n", False, HOME_KH, [HOME_KH, HOME_KH2, *ETC]),
        # --known-hosts replaces UserKnownHostsFile; the global files are still read
        ("UserKnownHostsFile /u1\nGlobalKnownHostsFile /g\n", True, Path("/x/kh"), [Path("/x/kh"), Path("/g")]),
        ("", True, Path("/x/kh"), [Path("/x/kh"), *ETC]),
    ],
)  # fmt: skip
def test_known_hosts_files_as_openssh_picks_them(
    tmp_path: Path, config: str, explicit: bool, record: Path, read: list[Path]
) -> None:
    known_hosts = Path("/x/kh") if explicit else HOME_KH
    assert _files(tmp_path, config, known_hosts) == (record, read)


def _line(key: asyncssh.SSHKey) -> str:
    return hostkeys.public_line(key)


TARGET = hostkeys.KeyTarget(name="gpu-1", host="10.0.0.5", port=2222)
TARGET22 = hostkeys.KeyTarget(name="gpu-1", host="10.0.0.5", port=22)


@pytest.mark.parametrize(
    ("user", "glob", "target", "trusted", "revoked_a"),
    [
        ([f"[10.0.0.5]:2222 {_line(KEY_A)}"], [], TARGET, [KEY_A], False),
        ([], [f"[10.0.0.5]:2222 {_line(KEY_A)}"], TARGET, [KEY_A], False),
        # revoked under [host]:port with nothing trusted there (asyncssh's match drops it)
        ([], [f"@revoked [10.0.0.5]:2222 {_line(KEY_A)}"], TARGET, [], True),
        ([f"[10.0.0.5]:2222 {_line(KEY_B)}"], [f"@revoked [10.0.0.5]:2222 {_line(KEY_A)}"], TARGET, [KEY_B], True),
        ([], [f"@revoked 10.0.0.5 {_line(KEY_A)}"], TARGET22, [], True),
        ([], [f"@revoked * {_line(KEY_A)}"], TARGET, [], True),
        ([], [f"@revoked [10.0.0.5]:2222 {_line(KEY_B)}"], TARGET, [], False),
        ([], [f"@revoked [10.0.0.6]:2222 {_line(KEY_A)}"], TARGET, [], False),
        ([], [f"@cert-authority *.lab,10.0.0.5 {_line(KEY_B)}"], TARGET22, [KEY_B], False),
    ],
)  # fmt: skip
def test_every_file_counts_and_revoked_lines_apply(
    tmp_path: Path,
    user: list[str],
    glob: list[str],
    target: hostkeys.KeyTarget,
    trusted: list[asyncssh.SSHKey],
    revoked_a: bool,
) -> None:
    (tmp_path / "u").write_text("".join(line + "\n" for line in user))
    (tmp_path / "g").write_text("".join(line + "\n" for line in glob))
    known = hostkeys.load_all([tmp_path / "u", tmp_path / "g", tmp_path / "missing"])
    assert [k.public_data for k in target.match(known)] == [k.public_data for k in trusted]
    assert target.is_revoked(known, KEY_A) is revoked_a


def test_a_broken_global_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "g").write_text("@bogus 10.0.0.5 ssh-ed25519 AAAA\n")
    with pytest.raises(hostkeys.ConfigError) as caught:
        hostkeys.load_all([tmp_path / "u", tmp_path / "g"])
    assert caught.value.file == str(tmp_path / "g")


def test_revoked_error_says_so_and_never_to_remove_the_line() -> None:
    err = hostkeys.revoked_error(TARGET, KEY_A, [Path("/etc/ssh/ssh_known_hosts")])
    assert str(err) == (
        f"gpu-1: REVOKED HOST KEY for 10.0.0.5:2222: the server offered the ssh-ed25519 key "
        f"{hostkeys.fingerprint(KEY_A)}, which known_hosts marks @revoked "
        "(/etc/ssh/ssh_known_hosts). orch refuses it and never records it, even with "
        "--accept-new-host-keys."
    )
