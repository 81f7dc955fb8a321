"""hosts.yaml: the issue's example, precedence, GPU strings, selection, embedded hosts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from orchestrator.config import GpuSpec, HostConfig, Inventory, load_inventory
from orchestrator.config.inventory import Gpus
from orchestrator.errors import ConfigError

DATA = Path(__file__).parent / "data" / "config"
REPO = Path(__file__).resolve().parents[2]
VLLM_PY = "/opt/venvs/vllm/bin/python"
SGLANG_PY = "/opt/venvs/sglang/bin/python"


def test_issue_example_loads_exactly() -> None:
    file = DATA / "hosts-issue.yaml"
    inventory = load_inventory(file)
    assert inventory.hosts == {
        "a6000-1": HostConfig(
            name="a6000-1",
            address="10.0.0.11",
            user="bench",
            python=VLLM_PY,
            gpus=GpuSpec(2, "RTX A6000"),
            tags=("a6000", "lab"),
            connect_timeout=None,  # unset: the connection pool's default applies
            source=f"{file}:5",
        ),
        "a6000-2": HostConfig(
            name="a6000-2",
            address="gpu2",
            port=2222,
            user="bench",
            identity_file="~/.ssh/lab_ed25519",
            proxy_jump="bastion.lab.example",
            python=VLLM_PY,
            workdir="/scratch/orch",
            env={"HF_TOKEN": "${HF_TOKEN}"},
            gpus=GpuSpec(2, "RTX A6000"),
            connect_timeout=None,
            source=f"{file}:9",
        ),
    }
    assert inventory.groups == {}
    assert inventory.known_hosts is None
    assert inventory.ssh_config == Path("~/.ssh/config").expanduser()
    assert inventory.source_path == file
    # unset fields stay None so ~/.ssh/config can supply them; the name is the SSH target then
    assert inventory["a6000-1"].port is None
    assert inventory["a6000-2"].target == "gpu2"


def test_connect_timeout_is_none_unless_written(tmp_path: Path) -> None:
    """A value the user wrote must be told apart from no value, 15 (the default) included:
    the connection pool's own default applies only to hosts that set none."""
    file = tmp_path / "hosts.yaml"
    file.write_text(
        "groups: {slow: {hosts: [b], connect_timeout: 40}}\n"
        "hosts:\n"
        "  a: {connect_timeout: 15}\n"
        "  b: {}\n"
        "  c: {}\n"
    )
    inventory = load_inventory(file)
    assert [inventory[h].connect_timeout for h in "abc"] == [15.0, 40.0, None]
    file.write_text("defaults: {connect_timeout: 15}\nhosts: {a: {}}\n")
    assert load_inventory(file)["a"].connect_timeout == 15.0


def test_env_references_resolve_from_the_controller_environment() -> None:
    host = load_inventory(DATA / "hosts-issue.yaml")["a6000-2"]
    assert host.resolved_env({"HF_TOKEN": "hf_secret"}) == {"HF_TOKEN": "hf_secret"}
    assert host.secret_values({"HF_TOKEN": "hf_secret"}) == {"hf_secret"}
    assert host.env == {"HF_TOKEN": "${HF_TOKEN}"}  # the file's text is never replaced


def test_precedence_defaults_then_groups_in_declared_order_then_host() -> None:
    file = DATA / "hosts-precedence.yaml"
    inventory = load_inventory(file)
    assert list(inventory.hosts) == ["node-1", "node-2", "node-3", "sim"]
    assert inventory["node-1"] == HostConfig(
        name="node-1",
        address="10.0.0.1",
        port=22,
        user="lab",  # group lab overrides defaults
        python=SGLANG_PY,  # group sglang is declared after lab, so it wins
        env={"HF_HOME": "/data/hf", "LEVEL": "sglang", "LAB": "1"},
        gpus=GpuSpec(2, "A6000"),
        tags=("gpu", "lab", "rack-a", "sglang"),
        connect_timeout=5.0,
        source=f"{file}:20",
    )
    assert inventory["node-2"] == HostConfig(
        name="node-2",
        address="10.0.0.2",
        port=22,
        user="root",  # the host itself wins over its groups
        python=SGLANG_PY,
        env={"HF_HOME": "/data/hf", "LEVEL": "host", "LAB": "1", "OMP_NUM_THREADS": "8"},
        gpus=GpuSpec(8, "H100"),
        tags=("gpu", "lab", "rack-a", "sglang", "big"),
        connect_timeout=5.0,
        source=f"{file}:23",
    )
    assert inventory["node-3"] == HostConfig(
        name="node-3",
        port=22,
        user="bench",
        python=VLLM_PY,
        env={"HF_HOME": "/data/hf", "LEVEL": "defaults"},
        tags=("gpu",),
        connect_timeout=5.0,
        source=f"{file}:29",
    )
    assert inventory["sim"] == HostConfig(
        name="sim",
        port=22,
        user="bench",
        python=sys.executable,  # embedded: runs here; the defaults' remote venv does not apply
        env={"HF_HOME": "/data/hf", "LEVEL": "defaults"},
        gpus=GpuSpec(2),
        tags=("gpu",),
        transport="embedded",
        connect_timeout=5.0,
        source=f"{file}:30",
    )
    assert inventory.groups == {"lab": ("node-1", "node-2"), "sglang": ("node-2", "node-1")}
    assert inventory.tags == ["gpu", "lab", "rack-a", "sglang", "big"]
    assert inventory.known_hosts == DATA.resolve() / "keys" / "known_hosts"
    assert inventory.ssh_config == Path("/etc/orch/ssh_config")


def test_embedded_host_keeps_a_python_set_on_itself(tmp_path: Path) -> None:
    file = tmp_path / "hosts.yaml"
    file.write_text(
        "defaults: {python: /opt/venv/bin/python}\n"
        "hosts:\n"
        "  sim: {transport: embedded, python: /usr/bin/python3.11}\n"
        "  real: {}\n"
    )
    inventory = load_inventory(file)
    assert inventory["sim"].python == "/usr/bin/python3.11"
    assert inventory["real"].python == "/opt/venv/bin/python"


def test_repository_hosts_yaml_defines_two_embedded_a6000_hosts() -> None:
    inventory = load_inventory(REPO / "hosts.yaml")
    assert [
        (h.name, h.transport, h.python, h.gpus, h.tags, h.workdir) for h in inventory.hosts.values()
    ] == [
        (
            "sim-a6000-1",
            "embedded",
            sys.executable,
            GpuSpec(2, "RTX A6000"),
            ("a6000", "sim"),
            "~/.cache/orch",
        ),
        (
            "sim-a6000-2",
            "embedded",
            sys.executable,
            GpuSpec(2, "RTX A6000"),
            ("a6000", "sim"),
            "~/.cache/orch",
        ),
    ]


@pytest.mark.parametrize(
    ("written", "count", "model"),
    [
        ("2 x RTX A6000", 2, "RTX A6000"),
        ("2xA6000", 2, "A6000"),
        ("2X A6000", 2, "A6000"),
        (" 8 × H100 80GB HBM3 ", 8, "H100 80GB HBM3"),
        ("4*L40S", 4, "L40S"),
        ("2", 2, None),
        (2, 2, None),
        ({"count": 1, "model": "RTX 4090"}, 1, "RTX 4090"),
        ({"count": 3}, 3, None),
    ],
)
def test_gpus_forms(written: object, count: int, model: str | None) -> None:
    parsed = TypeAdapter(Gpus).validate_python(written)
    assert parsed is not None
    assert (parsed.count, parsed.model) == (count, model)


@pytest.mark.parametrize("written", ["RTX A6000", "2 x", "x A6000", "two x A6000", True, 1.5, [2]])
def test_gpus_forms_rejected(written: object) -> None:
    with pytest.raises(ValueError, match="expected '<count> x <model>'"):
        TypeAdapter(Gpus).validate_python(written)


def test_gpu_spec_prints_as_written() -> None:
    assert str(GpuSpec(2, "RTX A6000")) == "2 x RTX A6000"
    assert str(GpuSpec(2)) == "2"


@pytest.fixture(scope="module")
def precedence() -> Inventory:
    return load_inventory(DATA / "hosts-precedence.yaml")


@pytest.mark.parametrize(
    ("selectors", "names"),
    [
        (None, ["node-1", "node-2", "node-3", "sim"]),
        ([], ["node-1", "node-2", "node-3", "sim"]),
        (["all"], ["node-1", "node-2", "node-3", "sim"]),
        ("gpu", ["node-1", "node-2", "node-3", "sim"]),  # a tag from defaults
        (["lab"], ["node-1", "node-2"]),  # a group name acts as a tag
        (["rack-a"], ["node-1", "node-2"]),  # a tag set by a group
        (["big"], ["node-2"]),  # a tag of the host itself
        (["node-3"], ["node-3"]),  # a host name
        (["node-3", "big"], ["node-2", "node-3"]),  # inventory order, not selector order
        (["sglang", "node-1", "lab"], ["node-1", "node-2"]),  # no duplicates
    ],
)
def test_select(precedence: Inventory, selectors: list[str] | str | None, names: list[str]) -> None:
    assert [h.name for h in precedence.select(selectors)] == names


def test_select_unknown_names_the_known_ones(precedence: Inventory) -> None:
    with pytest.raises(ConfigError) as info:
        precedence.select(["node-1", "rack-b"])
    err = info.value
    assert (err.file, err.line, err.message) == (
        str(DATA / "hosts-precedence.yaml"),
        None,
        "unknown host or tag 'rack-b' (did you mean 'rack-a'?); "
        "hosts: node-1, node-2, node-3, sim; tags: gpu, lab, rack-a, sglang, big",
    )


def test_env_marks_do_not_change_equality() -> None:
    a = load_inventory(DATA / "hosts-issue.yaml")["a6000-2"]
    assert set(a.env_marks) == {"HF_TOKEN"}
    assert (a.env_marks["HF_TOKEN"].line, a.env_marks["HF_TOKEN"].column) == (17, 17)
    assert a == HostConfig(**{**a.__dict__, "env_marks": {}})
