"""Slurm clusters in hosts.yaml: the design's example, located errors, selection beside hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.commands.run import RunPlan, plan_run
from orchestrator.config import HostConfig, json_schema, load_inventory
from orchestrator.config.cluster import check_slurm_time
from orchestrator.config.hostconfig import ClusterConfig
from orchestrator.doctor.findings import error, warning
from orchestrator.errors import ConfigError
from orchestrator.runner.preflight import from_login

EXAMPLE = """\
hosts:
  a6000-1: {address: 10.0.0.11, tags: [lab]}
clusters:
  hpc:
    login: {address: login.hpc.example, user: me, identity_file: ~/.ssh/hpc, proxy_jump: bastion}
    partition: gpu
    account: llm-bench
    qos: normal
    gres: a6000
    gpus_per_node: 2
    time_limit: "02:00:00"
    sbatch_options: ["--constraint=a6000", "--exclusive"]
    python: /shared/venvs/vllm/bin/python
    workdir: /shared/scratch/orch
    shared_fs: true
    env: {HF_HOME: /shared/hf, HF_TOKEN: "${HF_TOKEN}"}
    tags: [slurm, lab]
  small:
    login: {address: login.small.example}
    partition: debug
    python: /opt/venv/bin/python
    workdir: /scratch/orch
"""
# the smallest valid cluster, for error cases to add one broken line to (at line 7)
MINIMAL = """\
clusters:
  hpc:
    login: {address: login.hpc.example, user: me}
    partition: gpu
    python: /shared/venvs/vllm/bin/python
    workdir: /shared/scratch/orch
"""
TIME_FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
NOT_ABSOLUTE = (
    "expected an absolute path on the cluster (compute nodes do not expand '~' or resolve "
    "relative paths like a login shell); found"
)
LOGIN_KEYS = (
    "address, port, user, identity_file, proxy_jump, python, env, connect_timeout, agent_timeout_s"
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    return path


def test_the_design_example_loads_exactly(tmp_path: Path) -> None:
    file = write(tmp_path, EXAMPLE)
    inventory = load_inventory(file)
    assert list(inventory.hosts) == ["a6000-1"]
    assert inventory.clusters["hpc"] == ClusterConfig(
        name="hpc",
        login=HostConfig(
            name="hpc",
            address="login.hpc.example",
            user="me",
            identity_file="~/.ssh/hpc",
            proxy_jump="bastion",
            python="python3",
            workdir="/shared/scratch/orch",
            source=f"{file}:4",
        ),
        partition="gpu",
        account="llm-bench",
        qos="normal",
        gres="a6000",
        gpus_per_node=2,
        time_limit="02:00:00",
        sbatch_options=("--constraint=a6000", "--exclusive"),
        python="/shared/venvs/vllm/bin/python",
        workdir="/shared/scratch/orch",
        shared_fs=True,
        env={"HF_HOME": "/shared/hf", "HF_TOKEN": "${HF_TOKEN}"},
        tags=("slurm", "lab"),
        source=f"{file}:4",
    )
    small = inventory.clusters["small"]
    assert (small.account, small.qos, small.gres, small.gpus_per_node, small.time_limit) == (
        None,
        None,
        None,
        1,
        None,
    )
    assert (small.gres_request, inventory.clusters["hpc"].gres_request) == ("gpu:1", "gpu:a6000:2")
    assert (small.sbatch_options, small.shared_fs, small.tags) == ((), True, ())


def test_cluster_env_resolves_and_masks_like_a_hosts(tmp_path: Path) -> None:
    file = write(tmp_path, EXAMPLE)
    hpc = load_inventory(file).clusters["hpc"]
    environ = {"HF_TOKEN": "hf_cluster_secret"}
    assert hpc.resolved_env(environ) == {"HF_HOME": "/shared/hf", "HF_TOKEN": "hf_cluster_secret"}
    assert hpc.secret_values(environ) == {"hf_cluster_secret"}
    with pytest.raises(ConfigError) as info:
        hpc.resolved_env({})
    err = info.value
    assert (err.file, err.line, err.message) == (
        str(file),
        16,
        "env HF_TOKEN of cluster 'hpc' references ${HF_TOKEN}, which is not set in this shell",
    )


def test_hosts_may_be_left_out_when_there_is_a_cluster(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path, MINIMAL))
    assert (inventory.hosts, list(inventory.clusters)) == ({}, ["hpc"])
    assert load_inventory(write(tmp_path, "hosts: {}\n" + MINIMAL)).hosts == {}


def test_neither_hosts_nor_clusters_is_one_located_error(tmp_path: Path) -> None:
    file = write(tmp_path, "known_hosts: kh\nhosts: {}\nclusters: {}\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(file)
    err = info.value
    assert (err.line, err.column, err.path, err.message, err.hint) == (
        2,
        8,
        "hosts",
        "no hosts and no clusters: orch needs at least one of them",
        "declare a host under `hosts:` or a Slurm cluster under `clusters:` "
        "(see README: 'Describe your hosts')",
    )


@pytest.mark.parametrize(
    ("text", "line", "column", "path", "message"),
    [
        (
            MINIMAL + "    partiton: x\n",
            7,
            5,
            "clusters.hpc.partiton",
            "unknown key 'partiton' (did you mean 'partition'?)",
        ),
        (
            MINIMAL.replace("user: me}", "user: me, gpus: 2}"),
            3,
            51,
            "clusters.hpc.login.gpus",
            f"unknown key 'gpus'; allowed: {LOGIN_KEYS}",
        ),
        (
            MINIMAL.replace("user: me}", "user: me, transport: embedded}"),
            3,
            51,
            "clusters.hpc.login.transport",
            "unknown key 'transport' (did you mean 'port'?)",
        ),
        (
            MINIMAL + "    gpus_per_node: 0\n",
            7,
            20,
            "clusters.hpc.gpus_per_node",
            "must be >= 1, found 0",
        ),
        (
            MINIMAL + "    time_limit: 2h\n",
            7,
            17,
            "clusters.hpc.time_limit",
            f"time_limit must be a Slurm time ({TIME_FORMATS}, e.g. '02:00:00' or '1-12'); "
            "found '2h'",
        ),
        (
            MINIMAL + "    time_limit: 1-25\n",
            7,
            17,
            "clusters.hpc.time_limit",
            "time_limit '1-25': the hours after 'D-' must be below 24",
        ),
        (
            MINIMAL + "    sbatch_options: [exclusive]\n",
            7,
            22,
            "clusters.hpc.sbatch_options[0]",
            "each sbatch option is one argv item starting with '-' (e.g. '--constraint=a6000'); "
            "found 'exclusive'",
        ),
        (
            MINIMAL + "    sbatch_options: ['--exclusive', '--partition=cpu']\n",
            7,
            37,
            "clusters.hpc.sbatch_options[1]",
            "sbatch option '--partition=cpu' is not allowed here: set `partition:` instead",
        ),
        (
            MINIMAL + "    sbatch_options: ['-Jmine']\n",
            7,
            22,
            "clusters.hpc.sbatch_options[0]",
            "sbatch option '-Jmine' is not allowed here: orch manages it for every job",
        ),
        (
            MINIMAL + "    sbatch_options: ['--part=cpu']\n",  # sbatch reads it as --partition
            7,
            22,
            "clusters.hpc.sbatch_options[0]",
            "sbatch option '--part=cpu' is not allowed here: set `partition:` instead",
        ),
        (
            MINIMAL + "    sbatch_options: ['--gpus=4']\n",
            7,
            22,
            "clusters.hpc.sbatch_options[0]",
            "sbatch option '--gpus=4' is not allowed here: set `gres and gpus_per_node:` instead",
        ),
        (
            MINIMAL + "    sbatch_options: ['--array=1-3']\n",
            7,
            22,
            "clusters.hpc.sbatch_options[0]",
            "sbatch option '--array=1-3' is not allowed here: orch manages it for every job",
        ),
        (
            MINIMAL.replace("python: /shared", "python: shared"),
            5,
            13,
            "clusters.hpc.python",
            f"{NOT_ABSOLUTE} 'shared/venvs/vllm/bin/python'",
        ),
        (
            MINIMAL.replace("workdir: /shared/scratch/orch", "workdir: ~/orch"),
            6,
            14,
            "clusters.hpc.workdir",
            f"{NOT_ABSOLUTE} '~/orch'",
        ),
        (
            MINIMAL.replace("partition: gpu", "partition: 'gpu,cpu'"),
            4,
            16,
            "clusters.hpc.partition",
            "expected one Slurm name (letters, digits, '.', '_', '-'); found 'gpu,cpu'",
        ),
        (
            MINIMAL + "    gres: 'gpu:a6000'\n",
            7,
            11,
            "clusters.hpc.gres",
            "gres is the GPU type alone (e.g. 'a6000'; orch adds 'gpu:' and the count); "
            "found 'gpu:a6000'",
        ),
        (
            MINIMAL.replace("  hpc:", "  'hpc 1':"),
            2,
            3,
            "clusters.hpc 1",
            "cluster names may only contain letters, digits, '.', '_' and '-'; found 'hpc 1'",
        ),
        (
            "hosts: {hpc: {}}\n" + MINIMAL,
            3,
            3,
            "clusters.hpc",
            "cluster 'hpc' has the same name as a host",
        ),
        (
            "hosts: {a: {}}\ngroups: {hpc: {hosts: [a]}}\n" + MINIMAL,
            4,
            3,
            "clusters.hpc",
            "cluster 'hpc' has the same name as a group",
        ),
        (
            "clusters:\n  hpc:\n    login: {}\n    partition: gpu\n    workdir: /w\n",
            3,
            5,
            "clusters.hpc.python",
            "missing required key 'python'",
        ),
    ],
)
def test_broken_cluster_gives_one_located_error(
    tmp_path: Path, text: str, line: int, column: int, path: str, message: str
) -> None:
    file = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_inventory(file)
    err = info.value
    assert (err.file, err.line, err.column, err.path, err.message) == (
        str(file),
        line,
        column,
        path,
        message,
    )


@pytest.mark.parametrize(
    ("written", "loaded"),
    [
        ("90", "90"),  # minutes
        ("'90'", "90"),
        ("2:00:00", "2:00:00"),  # YAML 1.1 reads it as 7200: the text is what counts
        ("1:30", "1:30"),
        ("02:00:00", "02:00:00"),
        ("1-12", "1-12"),
        ("1-12:30", "1-12:30"),
        ("'2-00:00:00'", "2-00:00:00"),
    ],
)
def test_time_limit_is_taken_as_written(tmp_path: Path, written: str, loaded: str) -> None:
    file = write(tmp_path, MINIMAL + f"    time_limit: {written}\n")
    assert load_inventory(file).clusters["hpc"].time_limit == loaded


@pytest.mark.parametrize(
    "value", ["0", "30", "30:15", "12:00:00", "100:00:00", "7-0", "1-23", "1-2:3", "1-02:03:04"]
)
def test_slurm_times_sbatch_accepts(value: str) -> None:
    assert check_slurm_time(value) == value


@pytest.mark.parametrize("value", ["", "2h", "1:60", "1:2:3:4", "1-24", "-1", "1-", "1-2-3", "1.5"])
def test_times_sbatch_would_refuse(value: str) -> None:
    with pytest.raises(ValueError, match="time_limit"):
        check_slurm_time(value)


def test_select_clusters_by_name_or_tag_and_hosts_ignore_them(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path, EXAMPLE))
    names = lambda clusters: [c.name for c in clusters]  # noqa: E731
    assert names(inventory.select_clusters(None)) == ["hpc", "small"]
    assert names(inventory.select_clusters("all")) == ["hpc", "small"]
    assert names(inventory.select_clusters(["small"])) == ["small"]
    assert names(inventory.select_clusters(["slurm"])) == ["hpc"]
    assert names(inventory.select_clusters(["a6000-1"])) == []  # a host: not a cluster's name
    # a tag shared by a host and a cluster selects both, each by its own method
    assert names(inventory.select_clusters(["lab"])) == ["hpc"]
    assert [h.name for h in inventory.select(["lab"])] == ["a6000-1"]
    # a selector naming only a cluster selects no host, and is no error
    assert inventory.select(["hpc"]) == []
    assert inventory.select(["slurm", "a6000-1"]) == [inventory["a6000-1"]]
    assert [h.name for h in inventory.select(None)] == ["a6000-1"]


def test_an_unknown_selector_lists_clusters_too(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path, EXAMPLE))
    with pytest.raises(ConfigError) as info:
        inventory.select(["hcp"])
    assert info.value.message == (
        "unknown host, cluster or tag 'hcp' (did you mean 'hpc'?); hosts: a6000-1; "
        "clusters: hpc, small; tags: lab, slurm"
    )
    only_clusters = load_inventory(write(tmp_path, MINIMAL))
    with pytest.raises(ConfigError) as info:
        only_clusters.select(["x"])
    assert info.value.message == (
        "unknown host, cluster or tag 'x'; hosts: (none); clusters: hpc; tags: (none)"
    )


def test_json_schema_has_the_clusters_section() -> None:
    schema = json_schema("hosts")
    defs = schema["$defs"]
    assert schema["properties"]["clusters"]["anyOf"][0] == {
        "additionalProperties": {"$ref": "#/$defs/ClusterFields"},
        "type": "object",
    }
    assert defs["ClusterFields"]["required"] == ["login", "partition", "python", "workdir"]
    assert defs["ClusterFields"]["additionalProperties"] is False
    assert list(defs["LoginFields"]["properties"]) == LOGIN_KEYS.split(", ")
    assert defs["ClusterFields"]["properties"]["gpus_per_node"]["minimum"] == 1
    assert defs["ClusterFields"]["properties"]["time_limit"]["anyOf"][0] == {
        "type": ["string", "integer"]
    }
    for model in ("ClusterFields", "LoginFields"):
        for field, prop in defs[model]["properties"].items():
            assert prop.get("description"), f"{model}.{field} has no description"


def test_the_readme_cluster_example_loads(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### Slurm clusters") :]
    example = section[section.index("```yaml\n") + 8 : section.index("```\n")]
    hpc = load_inventory(write(tmp_path, example)).clusters["hpc"]
    assert (hpc.partition, hpc.gres_request, hpc.time_limit, hpc.sbatch_options) == (
        "gpu",
        "gpu:a6000:2",
        "02:00:00",
        ("--constraint=a6000", "--exclusive"),
    )


CLUSTER_HOSTS = (
    "hosts:\n  box: {address: 10.0.0.5}\n"
    "clusters:\n  hpc:\n    login: {address: 127.0.0.1}\n    partition: gpu\n"
    "    gpus_per_node: 2\n    time_limit: '01:00:00'\n    python: /opt/venv/bin/python\n"
    "    workdir: /shared/orch\n    tags: [slurm]\n"
)


def plan_on(
    tmp_path: Path, selector: str, *, hosts: str = CLUSTER_HOSTS, only: list[str] | None = None
) -> RunPlan:

    hosts_file = tmp_path / "hosts.yaml"
    hosts_file.write_text(hosts)
    book = tmp_path / "pb.yaml"
    book.write_text(
        f"name: pb\nhosts: [{selector}]\nruns:\n"
        "  - {name: plain, engine: vllm, model: Qwen/Qwen3-8B}\n"
    )
    return plan_run(book, hosts_file, only)


@pytest.mark.parametrize(
    ("selector", "only", "placed"),
    [
        ("hpc", None, ["hpc"]),
        ("slurm", None, ["hpc"]),  # a cluster's tag
        ("all", None, ["box"]),  # `all` is every host, never a cluster
        ("box, hpc", None, ["box", "hpc"]),
        ("box, hpc", ["hpc"], ["hpc"]),  # --only names a cluster like a host
    ],
)
def test_a_playbook_places_runs_on_the_clusters_it_names(
    tmp_path: Path, selector: str, only: list[str] | None, placed: list[str]
) -> None:
    plans = plan_on(tmp_path, selector, only=only).plans
    assert [p.host.name for p in plans] == placed
    for plan in plans:
        cluster = plan.host.cluster
        assert (cluster is not None) == (plan.host.name == "hpc")
        if cluster is not None:  # the compute nodes' Python and the shared workdir
            assert (plan.host.python, plan.host.workdir) == (
                "/opt/venv/bin/python",
                "/shared/orch",
            )
            assert plan.host.gpus is not None and plan.host.gpus.count == 2


@pytest.mark.parametrize(
    ("shared", "login_workdir"), [("true", "/shared/orch"), ("false", "~/.cache/orch")]
)
def test_the_login_keeps_its_files_in_the_shared_workdir_or_its_own(
    tmp_path: Path, shared: str, login_workdir: str
) -> None:
    """Without a shared workdir the login node's files (job script, agent) stay in its own;
    the runs' workdir is the cluster's, on the compute nodes."""
    (plan,) = plan_on(tmp_path, "hpc", hosts=CLUSTER_HOSTS + f"    shared_fs: {shared}\n").plans
    assert plan.host.cluster is not None
    assert plan.host.cluster.login.workdir == login_workdir
    assert plan.host.workdir == "/shared/orch"


@pytest.mark.parametrize(("selector", "severity"), [("hpc", "warning"), ("box", "error")])
def test_model_files_missing_from_a_login_node_are_checked_again_on_the_node(
    tmp_path: Path, selector: str, severity: str
) -> None:
    """A cluster's node may have the model on its own disk: not found from the login node is a
    warning there (the doctor looks again inside the allocation); on a host it is an error."""
    (plan,) = plan_on(tmp_path, selector).plans
    found = from_login(error("model_files", "the target 'm' was not found on the host"), plan)
    assert (found.check, found.severity) == ("model_files", severity)
    assert found.message.startswith("the target 'm' was not found on the host")
    assert ("checked again on the node" in found.message) == (selector == "hpc")
    kept = warning("model_files", "w")
    assert from_login(kept, plan) == kept


def test_a_run_needing_more_gpus_than_a_node_has_is_refused_at_its_line(tmp_path: Path) -> None:
    hosts_file = tmp_path / "hosts.yaml"
    hosts_file.write_text(CLUSTER_HOSTS)
    book = tmp_path / "pb.yaml"
    book.write_text(
        "name: pb\nhosts: [hpc]\nruns:\n"
        "  - {name: big, engine: vllm, model: Qwen/Qwen3-8B, tensor_parallel: 4}\n"
    )
    with pytest.raises(ConfigError) as caught:
        plan_run(book, hosts_file, None)
    assert caught.value.message == (
        "run 'big' needs 4 GPUs (tensor_parallel 4) but the Slurm cluster hpc gives 2 per node "
        "(hosts.yaml: gpus_per_node), and orch asks for one node per run"
    )
    assert caught.value.line == 4
