"""manifest.json as one typed, versioned record (``results/manifest.py``): the manifests this
orch writes round-trip, an unversioned one (written before ``manifest_version``) still reads,
and a file that is no manifest is one error that names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.results.manifest import (
    MANIFEST_VERSION,
    LoadgenManifest,
    Manifest,
    ManifestError,
    PromptsRead,
    load_manifest,
    parse_manifest,
)

# a real manifest written by `orch run` before manifest_version (test_run_hosts' shared-GPU
# run on the golden probe's host), its local paths replaced
V0_RUN = Path(__file__).parents[1] / "fixtures" / "manifests" / "v0-run.json"


def test_an_unversioned_manifest_reads_as_version_1() -> None:
    got = load_manifest(V0_RUN)
    assert isinstance(got, Manifest)
    assert got.manifest_version == MANIFEST_VERSION == 1
    assert (got.run_id, got.host, got.port, got.gpu_ids) == ("two-1f3008f0", "a", 8102, [1])
    assert got.host_facts is not None and got.host_facts.driver_version == "535.183.01"
    assert [g.name for g in got.host_facts.gpus] == ["NVIDIA RTX A6000"] * 2
    assert got.prompts == PromptsRead(
        source="builtin:math",
        sha256="0c18d0e9a66eacf18d7603779e4647486275a20e105669f7619bd6ed82d59e04",
        count=26,
    )
    assert got.spec("speculative", "method") == "none"
    assert got.spec("workload", "no such key") is None
    assert got.env == {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_the_unversioned_file_is_kept_whole() -> None:
    """Migrating adds the version, nothing else: the file's shape is the one written today."""
    written = json.loads(V0_RUN.read_text())
    got = load_manifest(V0_RUN)
    assert got is not None
    assert got.to_json() == {"manifest_version": 1, **written}
    unshared = got.model_copy(update={"gpu_ids": None}).to_json()
    assert "gpu_ids" not in unshared and unshared["engine_version"] == "0.33.0"


def test_a_manifest_round_trips(tmp_path: Path) -> None:
    v0 = load_manifest(V0_RUN)
    assert isinstance(v0, Manifest)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(v0.to_json()))
    assert load_manifest(path) == v0
    loadgen = LoadgenManifest(
        command="orch loadgen --url http://h:8000",
        url="http://h:8000",
        loadgen_spec={"api_key": "***", "max_tokens": 32},
        prompts=PromptsRead(source="random", count=0, input_len=128),
    )
    path.write_text(json.dumps(loadgen.to_json()))
    assert load_manifest(path) == loadgen


def test_no_manifest_file_is_none(tmp_path: Path) -> None:
    assert load_manifest(tmp_path / "manifest.json") is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"run_id": 3}', "run_id"),
        ('{"run_id": "r", "hostname": "x"}', "hostname"),  # a key no manifest has
        ('{"host_facts": {"hostname": "x"}}', "host_facts"),  # facts of another shape
        ('{"manifest_version": 9}', "newer than this orch reads"),
        ('{"manifest_version": "1"}', "not a version number"),
        ('{"manifest_version": -1}', "not a version number"),
    ],
)
def test_a_malformed_manifest_is_one_error_naming_the_file(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "run" / "manifest.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(ManifestError, match=why) as caught:
        load_manifest(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_parse_names_where_the_object_came_from() -> None:
    with pytest.raises(ManifestError, match="^plan/manifest-2.json: not a run manifest"):
        parse_manifest({"argv": "vllm serve"}, where="plan/manifest-2.json")


def test_a_cluster_runs_manifest_reads_with_its_job_and_moved_port() -> None:
    """What ``with_slurm`` and a moved port (``backends/clusterrun.py``) add is declared."""
    from orchestrator.backends.clusterrun import with_slurm
    from orchestrator.config.hostconfig import ClusterConfig, HostConfig
    from orchestrator.slurm.jobs import Allocation

    base = load_manifest(V0_RUN)
    assert isinstance(base, Manifest) and base.host_facts is not None
    cluster = ClusterConfig(name="hpc", login=HostConfig(name="hpc"), partition="gpu")
    given = Allocation(job_id=41, nodes=("node-3",), gpus=(0, 1), cpus=16, memory_mib=64000)
    record = with_slurm(base.to_json(), cluster, job_id=41, allocation=given, facts=base.host_facts)
    record = {**record, "port": 8103, "port_planned": 8102}
    got = parse_manifest(record)
    assert isinstance(got, Manifest) and got.slurm is not None
    assert (got.slurm.job_id, got.slurm.nodes, got.slurm.gpus) == (41, ["node-3"], [0, 1])
    assert (got.port, got.port_planned, got.engine_version) == (8103, 8102, "0.33.0")
    assert got.to_json()["slurm"] == record["slurm"]
