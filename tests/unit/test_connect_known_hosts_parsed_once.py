"""known_hosts is parsed once per content for a whole fan-out, and an edit is seen at once.

Every host of `orch hosts check` reads the same known_hosts files; parsing them again for each
connection made N hosts cost N² lines (benchmarks/fanout.py found it at 64 hosts).
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import asyncssh
import pytest

from orchestrator.transport import hostkeys
from orchestrator.transport.connect import Connector

KEY_A = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
KEY_B = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
TARGET = hostkeys.KeyTarget(name="gpu-1", host="127.0.0.1", port=2222)


def _trusted(known: asyncssh.SSHKnownHosts) -> list[bytes]:
    return [k.public_data for k in TARGET.match(known)]


def _write(path: Path, key: asyncssh.SSHKey) -> None:
    path.write_text(f"[127.0.0.1]:2222 {hostkeys.public_line(key)}\n")


@pytest.fixture
def connector(tmp_path: Path) -> Connector:
    return Connector(known_hosts=tmp_path / "kh", accept_new_host_keys=False, ssh_config=())


def test_the_same_files_are_parsed_once(tmp_path: Path, connector: Connector) -> None:
    _write(tmp_path / "kh", KEY_A)
    files = [tmp_path / "kh", tmp_path / "missing"]
    with mock.patch.object(hostkeys, "load_all", wraps=hostkeys.load_all) as load_all:
        first = [connector.known_hosts(files) for _ in range(64)]
    assert load_all.call_count == 1
    assert all(known is first[0] for known in first)
    assert _trusted(first[0]) == [KEY_A.public_data]


def test_an_edited_file_is_parsed_again(tmp_path: Path, connector: Connector) -> None:
    files = [tmp_path / "kh"]
    _write(tmp_path / "kh", KEY_A)
    assert _trusted(connector.known_hosts(files)) == [KEY_A.public_data]
    _write(tmp_path / "kh", KEY_B)  # same length, maybe the same mtime: the content decides
    assert _trusted(connector.known_hosts(files)) == [KEY_B.public_data]
    (tmp_path / "kh").unlink()
    assert _trusted(connector.known_hosts(files)) == []


def test_other_files_are_cached_apart(tmp_path: Path, connector: Connector) -> None:
    _write(tmp_path / "a", KEY_A)
    _write(tmp_path / "b", KEY_B)
    assert _trusted(connector.known_hosts([tmp_path / "a"])) == [KEY_A.public_data]
    assert _trusted(connector.known_hosts([tmp_path / "b"])) == [KEY_B.public_data]
    assert _trusted(connector.known_hosts([tmp_path / "a"])) == [KEY_A.public_data]


def test_a_broken_file_is_still_named_every_time(tmp_path: Path, connector: Connector) -> None:
    (tmp_path / "kh").write_text("@bogus 127.0.0.1 ssh-ed25519 AAAA\n")
    for _ in range(2):
        with pytest.raises(hostkeys.ConfigError) as caught:
            connector.known_hosts([tmp_path / "kh"])
        assert caught.value.file == str(tmp_path / "kh")
