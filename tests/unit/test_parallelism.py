"""A server's GPU count is the product of its parallel sizes (issue 20, item 10): read by the
engine object from the argv it builds (every spelling the engine's parser takes), used by the
plan, the doctor's GPU and memory checks and the result; a bad size is refused at its item."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.commands.run import plan_run
from orchestrator.config import RunSpec
from orchestrator.doctor import HostProbe, run_host_checks
from orchestrator.doctor.modelconfig import ModelConfig
from orchestrator.engines import engine_for
from orchestrator.engines.parallel import Parallelism
from orchestrator.errors import ConfigError, SpecError
from orchestrator.remote.wire import GpuInfo
from orchestrator.runner.summarize import run_settings
from tests.unit.test_runner_slots import HOSTS

A6000 = ("NVIDIA RTX A6000", 49140, 0)


def run(engine: str, *extra: str, tp: int = 1, **fields: Any) -> RunSpec:
    data = {"name": "r", "engine": engine, "model": "m", "tensor_parallel": tp}
    return RunSpec.model_validate({**data, "extra_args": list(extra), **fields})


@pytest.mark.parametrize(
    ("engine", "tp", "extra", "sizes", "gpus"),
    [
        ("vllm", 2, [], Parallelism(2), 2),
        ("vllm", 1, ["--pipeline-parallel-size", "2"], Parallelism(1, pipeline=2), 2),
        ("vllm", 2, ["-pp", "2"], Parallelism(2, pipeline=2), 4),
        ("vllm", 1, ["--pipeline_parallel_size=3"], Parallelism(1, pipeline=3), 3),
        ("vllm", 2, ["-dp", "2"], Parallelism(2, data=2), 4),
        ("vllm", 1, ["--pipeline-par", "2"], Parallelism(1, pipeline=2), 2),  # an abbreviation
        # expert parallel shards the experts over the tp x dp GPUs: it adds none
        ("vllm", 2, ["-dp", "2", "--enable-expert-parallel"], Parallelism(2, data=2, expert=4), 4),
        ("vllm", 2, ["-ep", "--no-enable-expert-parallel"], Parallelism(2), 2),
        ("vllm", 1, ["-pp", "2", "-pp", "4"], Parallelism(1, pipeline=4), 4),  # the last wins
        ("sglang", 2, ["--pp-size", "2"], Parallelism(2, pipeline=2), 4),
        ("sglang", 1, ["--dp-size", "2"], Parallelism(1, data=2), 2),
        ("sglang", 2, ["--data-parallel-size=2", "--pp", "2"], Parallelism(2, 2, 2), 8),
        # SGLang's dp attention keeps its dp ranks, and --ep-size, inside the tp group
        (
            "sglang",
            4,
            ["--dp-size", "4", "--enable-dp-attention", "--ep-size", "4"],
            Parallelism(4, data=4, expert=4, data_within_tensor=True),
            4,
        ),
    ],
)
def test_the_gpu_count_is_the_product_of_the_sizes_the_engine_reads(
    engine: str, tp: int, extra: list[str], sizes: Parallelism, gpus: int
) -> None:
    spec = run(engine, *extra, tp=tp)
    adapter = engine_for(spec)
    assert adapter.parallelism(spec) == sizes
    assert adapter.gpus_needed(spec) == sizes.gpus == gpus
    settings = run_settings(spec)
    assert settings.gpu_count == gpus
    assert settings.parallelism is not None
    assert settings.parallelism.model_dump() == sizes.to_json()


@pytest.mark.parametrize(
    ("engine", "extra", "index", "shown"),
    [
        ("vllm", ["-pp", "0"], 0, "-pp"),
        ("vllm", ["--max-num-seqs", "8", "--data-parallel-size=two"], 2, "--data-parallel-size"),
        ("sglang", ["--dp", "-1"], 0, "--dp (read as --data-parallel-size)"),
        ("sglang", ["--ep-size"], 0, "--ep-size"),
    ],
)
def test_a_size_that_is_not_a_positive_integer_is_refused_at_its_item(
    engine: str, extra: list[str], index: int, shown: str
) -> None:
    spec = run(engine, *extra)
    with pytest.raises(SpecError) as info:
        engine_for(spec).validate(spec)
    assert info.value.field == ("extra_args", index)
    assert f"extra_args sets {shown} to " in str(info.value)
    assert "a parallel size is a whole number of at least 1" in str(info.value)


def test_a_shared_host_refuses_a_run_whose_pipeline_needs_more_gpus_than_it_has(
    tmp_path: Path,
) -> None:
    (tmp_path / "hosts.yaml").write_text(HOSTS)  # emb-1: 2 x RTX A6000
    (tmp_path / "play.yaml").write_text(
        "name: p\nshare_gpus: true\nhosts: [emb-1]\n"
        "defaults: {model: Qwen/Qwen3-8B, engine: vllm, workload: {num_prompts: 2}}\n"
        "runs:\n  - name: deep\n    extra_args: [-pp, '2', -dp, '2']\n"
    )
    with pytest.raises(ConfigError) as info:
        plan_run(tmp_path / "play.yaml", tmp_path / "hosts.yaml", None)
    assert info.value.message == (
        "run 'deep' needs 4 GPUs (tensor_parallel 1 x pipeline 2 x data 2) but host emb-1 has 2 "
        "(hosts.yaml: gpus: 2 x RTX A6000): with share_gpus it could never get them"
    )


# -- the doctor ----------------------------------------------------------------------------

BIG = ModelConfig.from_json({"num_parameters": 27_000_000_000, "torch_dtype": "bfloat16"})


def host(gpus: int) -> HostProbe:
    return HostProbe(
        gpus=[GpuInfo(i, *A6000, None) for i in range(gpus)],
        driver_version="570.124.06",
        engines={"vllm": "0.33.0"},
        checked_ports={8000},
        free_ports={8000},
    )


def findings(spec: RunSpec, gpus: int) -> dict[str, tuple[str, str]]:
    found = run_host_checks(
        host=host(gpus),
        engine="vllm",
        method=None,
        tensor_parallel=spec.tensor_parallel,
        parallelism=engine_for(spec).parallelism(spec),
        port=8000,
        target=BIG,
    )
    return {f.check: (f.severity, f.message) for f in found}


def test_the_doctor_splits_the_weights_over_the_pipeline_too() -> None:
    """54 GB of weights: more than one A6000's 90% budget, half of it fits (the issue's 27B
    model refused when split over two GPUs by --pipeline-parallel-size 2)."""
    alone = findings(run("vllm"), 2)
    assert alone["gpu_memory"][0] == "error"
    assert (
        "the weights need about 50.3 GiB per GPU with tensor_parallel 1," in alone["gpu_memory"][1]
    )
    assert findings(run("vllm", "-pp", "2"), 2)["gpu_memory"] == (
        "ok",
        "every GPU has its 90% budget free; weights about 25.1 GiB per GPU.",
    )


def test_a_data_parallel_replica_holds_all_the_weights_and_needs_gpus_of_its_own() -> None:
    found = findings(run("vllm", "-dp", "2"), 2)
    assert found["gpu_count"] == ("ok", "2 GPU(s) for 2 (tensor_parallel 1 x data 2).")
    assert found["gpu_memory"][0] == "error"  # each replica holds a full copy
    short = findings(run("vllm", "-pp", "2", "-dp", "2"), 2)
    assert short["gpu_count"] == (
        "error",
        "the run needs 4 GPU(s) (tensor_parallel 1 x pipeline 2 x data 2) but the host has 2. "
        "Fix: lower the parallel sizes (tensor_parallel, and the pipeline and data parallel "
        "sizes in extra_args) to 2 GPU(s) or run on a host with more GPUs.",
    )
