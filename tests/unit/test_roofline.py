"""% of the memory-bandwidth roofline (issue 23): the decode shape from a model's config, the
bandwidth table and hosts.yaml's override, and a measurement's point, each figure by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import load_inventory
from orchestrator.doctor.host import estimate_parameters
from orchestrator.doctor.modelconfig import ModelConfig
from orchestrator.metrics.roofline import (
    DecodeShape,
    RooflineInputs,
    decode_shape,
    roofline_point,
    table_bandwidth,
)
from orchestrator.metrics.summary import Stats
from orchestrator.runner.roofline import roofline_figure
from tests.fixtures.run_results import request_stats

MODELS = Path(__file__).parents[2] / "orchestrator" / "sim" / "models"


def text(model: str) -> dict[str, Any]:
    return ModelConfig.from_json(json.loads((MODELS / model / "config.json").read_text())).text


@pytest.mark.parametrize(
    ("name", "gb_s", "key"),
    [
        ("NVIDIA RTX A6000", 768.0, "RTX A6000"),
        ("NVIDIA H100 PCIe", 2000.0, "H100 PCIe"),  # the longest key wins over "H100"
        ("NVIDIA H100 80GB HBM3", 3350.0, "H100"),
        ("NVIDIA H200", 4800.0, "H200"),
        ("NVIDIA GH200 480GB", 4000.0, "GH200"),  # not the H200 it contains
        ("NVIDIA A100-SXM4-80GB", 2039.0, "A100-SXM4-80GB"),
        ("NVIDIA L4", 300.0, "L4"),
    ],
)
def test_the_bandwidth_table_matches_what_nvidia_smi_names(
    name: str, gb_s: float, key: str
) -> None:
    assert table_bandwidth(name) == (gb_s, key)


def test_an_unknown_gpu_has_no_bandwidth() -> None:
    assert table_bandwidth("Tesla K80") is None and table_bandwidth(None) is None


def test_a_dense_models_step_reads_its_layers_and_lm_head() -> None:
    """Qwen3-8B: 36 layers of attention (32 heads, 8 KV heads of 128) and MLP (12288), the LM
    head (151936 x 4096, not tied), bf16; the input embedding is a lookup, not read."""
    shape = decode_shape(text("Qwen/Qwen3-8B"))
    attention = 4096 * 32 * 128 * 2 + 2 * 4096 * 8 * 128
    mlp = 3 * 4096 * 12288
    assert shape == DecodeShape(
        weight_bytes=2 * (36 * (attention + mlp) + 151936 * 4096),
        kv_bytes_per_token=36 * 2 * 8 * 128 * 2,
    )
    # 768 GB/s over 15.1 GB: the "about 47 tok/s" at batch 1, without speculation
    assert 768e9 / shape.weight_bytes == pytest.approx(50.7, abs=0.1)


def test_a_hybrid_models_step_reads_its_state_not_a_cache_of_linear_layers() -> None:
    """Qwen3.6-27B: 16 of 64 layers keep a KV cache (4 heads of 256); the 48 Gated DeltaNet
    layers read a fixed fp32 state (48 value heads x 128 x 128) per sequence."""
    t = text("Qwen/Qwen3.6-27B")
    shape = decode_shape(t)
    assert shape is not None
    assert shape.kv_bytes_per_token == 16 * 2 * 4 * 256 * 2
    assert shape.state_bytes_per_sequence == 48 * 48 * 128 * 128 * 4
    # the doctor's parameter count shares the layer shapes: 26.9 B, the model card's ~27 B
    assert estimate_parameters(ModelConfig.from_json({"text_config": t})) == pytest.approx(
        26.9e9, rel=0.01
    )


def test_fp8_kv_cache_sliding_windows_and_moe() -> None:
    base = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
            "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 4096}  # fmt: skip
    plain = decode_shape(base)
    fp8 = decode_shape(base, kv_cache_dtype="fp8_e4m3")
    assert plain and fp8 and fp8.kv_bytes_per_token * 2 == plain.kv_bytes_per_token
    sliding = {**base, "layer_types": ["sliding_attention", "full_attention"] * 2,
               "sliding_window": 100}  # fmt: skip
    window = decode_shape(sliding)
    assert window and window.window == 100
    per_layer = 2 * 2 * 128 * 2
    assert (window.kv_bytes_per_token, window.window_kv_bytes_per_token) == (2 * per_layer,) * 2
    # past the window, only the full layers read more
    assert window.step_bytes(1, 1000) - window.step_bytes(1, 500) == 500 * 2 * per_layer
    moe = {**base, "num_experts": 64, "num_experts_per_tok": 4, "moe_intermediate_size": 256}
    dense_mlp, moe_mlp = 3 * 1024 * 4096, 3 * 1024 * 4 * 256
    assert decode_shape(base).weight_bytes - decode_shape(moe).weight_bytes == 2 * 4 * (  # type: ignore[union-attr]
        dense_mlp - moe_mlp
    )
    int4 = decode_shape({**base, "quantization_config": {"bits": 4}})
    assert int4 and int4.weight_bytes * 4 == plain.weight_bytes


def test_a_config_without_sizes_has_no_shape() -> None:
    assert decode_shape({"model_type": "x"}) is None


def test_a_measurements_point_by_hand() -> None:
    """100 requests in 50 s, each decoding 1 s: 2 sequences decode together; their context is
    500 prompt tokens + half of 200 output tokens; a step of 20 ms on one 768 GB/s GPU."""
    shape = DecodeShape(weight_bytes=15_000_000_000, kv_bytes_per_token=147_456)
    point = roofline_point(
        RooflineInputs(shape, 1, 768.0, "table: RTX A6000"),
        step_ms=20.0,
        completed=100,
        duration_s=50.0,
        decode_ms_mean=1000.0,
        prompt_tokens=50_000,
        output_tokens=20_000,
    )
    assert point is not None
    step_bytes = 15e9 + 2 * 600 * 147_456
    assert (point.batch, point.context_tokens, point.bytes_per_step) == (2.0, 600.0, step_bytes)
    assert point.achieved_gb_s == pytest.approx(step_bytes / 0.020 / 1e9)
    assert point.pct == pytest.approx(100 * step_bytes / 0.020 / 768e9)


def test_no_point_without_a_step_or_decoding_requests() -> None:
    inputs = RooflineInputs(DecodeShape(10**9, 1000), 1, 768.0, "hosts.yaml")
    common = {"completed": 4, "duration_s": 2.0, "prompt_tokens": 40, "output_tokens": 40}
    assert roofline_point(inputs, step_ms=None, decode_ms_mean=100.0, **common) is None
    assert roofline_point(inputs, step_ms=20.0, decode_ms_mean=None, **common) is None


def test_a_figure_past_the_peak_is_not_given_but_explained() -> None:
    """A 15 GB model stepping every 5 ms would read 3 TB/s on one A6000: the shape or the
    bandwidth is wrong, and saying "390%" would be a wrong number."""
    inputs = RooflineInputs(DecodeShape(15 * 10**9, 1000), 1, 768.0, "table: RTX A6000")
    stats = request_stats(completed=4, ttft=Stats(mean=20.0)).model_copy(
        update={"itl_chunk_ms": Stats(median=5.0), "e2el_ms": Stats(mean=420.0)}
    )
    point, warnings = roofline_figure(inputs, stats)
    assert point is None
    (warning,) = warnings
    assert warning.kind == "roofline_implausible"
    assert "table: RTX A6000" in warning.message and "bandwidth_gb_s" in warning.message
    assert warning.details["pct"] == pytest.approx(391, abs=1)
    ok = stats.model_copy(update={"itl_chunk_ms": Stats(median=25.0)})
    point, warnings = roofline_figure(inputs, ok)
    assert point is not None and warnings == [] and point.pct == pytest.approx(78, abs=1)


def test_hosts_yaml_overrides_the_bandwidth(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        "hosts:\n"
        "  a: {gpus: 2 x RTX A6000}\n"
        "  b: {gpus: {count: 2, model: RTX A6000, bandwidth_gb_s: 700}}\n"
    )
    inventory = load_inventory(hosts)
    a, b = inventory.hosts["a"].gpus, inventory.hosts["b"].gpus
    assert a is not None and b is not None
    assert (a.bandwidth_gb_s, b.bandwidth_gb_s, b.count, b.model) == (None, 700.0, 2, "RTX A6000")
    hosts.write_text("hosts:\n  c: {gpus: {count: 1, bandwidth_gb_s: 0}}\n")
    with pytest.raises(Exception, match="bandwidth_gb_s"):
        load_inventory(hosts)


def test_a_batch_reads_more_of_an_moes_experts() -> None:
    """64 experts, 4 per token: one sequence reads 4 per layer, a batch of 8 about
    64 (1 - (60/64)^8) = 25.2 of them."""
    moe = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 2, "vocab_size": 1000, "num_experts": 64,
           "num_experts_per_tok": 4, "moe_intermediate_size": 256}  # fmt: skip
    shape = decode_shape(moe)
    assert shape is not None and shape.expert_bytes == 3 * 1024 * 256 * 4 * 2
    assert shape.more_experts(1) == 0.0
    touched = 64 * (1 - (60 / 64) ** 8)
    assert shape.step_bytes(8, 0) - shape.weight_bytes == pytest.approx(
        (touched - 4) * shape.expert_bytes
    )


def test_data_parallel_replicas_each_read_their_weights() -> None:
    shape = DecodeShape(weight_bytes=10**9, kv_bytes_per_token=1000)
    common = {"step_ms": 10.0, "completed": 100, "duration_s": 10.0, "decode_ms_mean": 400.0,
              "prompt_tokens": 0, "output_tokens": 0}  # fmt: skip
    one = roofline_point(RooflineInputs(shape, 2, 768.0, "x"), **common)
    two = roofline_point(RooflineInputs(shape, 2, 768.0, "x", replicas=2), **common)
    assert one is not None and two is not None
    assert two.bytes_per_step == pytest.approx(2 * one.bytes_per_step)  # batch 4: no context


def test_compressed_tensors_weights_count_their_bits() -> None:
    base = {"hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
            "vocab_size": 1000, "torch_dtype": "bfloat16"}  # fmt: skip
    fp8 = {**base, "quantization_config": {"quant_method": "compressed-tensors",
           "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}}}}  # fmt: skip
    bf16, q = decode_shape(base), decode_shape(fp8)
    assert bf16 and q and q.weight_bytes * 2 == bf16.weight_bytes
