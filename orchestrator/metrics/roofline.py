"""How close a measurement's decode ran to the GPUs' memory-bandwidth limit (% of roofline).

A decode step of a transformer is memory-bound: each step reads every weight of the model once
(whatever the batch) and, for every sequence in the batch, its KV cache (and, in linear-attention
layers, its recurrent state). So::

    bytes per step = W + B x (C x K + S)
    % of roofline  = bytes per step / step time / (GPUs x bandwidth per GPU)

- ``W``: weight bytes read per step: every decoder layer (attention or linear attention, MLP; of
  an MoE, the experts one token uses) and the LM head, x bytes per parameter (the checkpoint's
  dtype or quantization). The input embedding is a row lookup, not a read of the matrix.
- ``K``: KV-cache bytes per token of context: 2 (K and V) x KV heads x head dim x bytes per
  element (``--kv-cache-dtype fp8`` -> 1, else the model's dtype), summed over the layers that
  keep a cache; a sliding-window layer reads at most its window.
- ``S``: recurrent-state bytes per sequence of linear-attention layers (Gated DeltaNet: value
  heads x key dim x value dim, in the state's dtype).
- ``B``: sequences decoding together, by Little's law from the measurement: completed requests
  per second x mean time each spent decoding (end-to-end latency minus TTFT). Data-parallel
  replicas each read their own weights for their share of the batch; an MoE's batch reads
  E (1 - (1 - k/E)^B) of its E experts per layer (k per token) where one token reads k. A
  pipeline-parallel server has no figure: its stages read in turn, not at once.
- ``C``: mean context of a decoding sequence: mean prompt tokens + half the mean output tokens.
- step time: the median time between two token chunks of a request (one engine step per chunk,
  speculative or not).

The drafter's own reads (a draft model, EAGLE or MTP head) are not counted: on a speculative run
the figure is the target model's share, a lower bound of what the GPUs moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict

GB = 1e9
# A decode cannot read faster than the GPUs' peak: past it (with the estimate's few percent of
# slack) the model's shape or the bandwidth assumed is wrong, and no figure is given.
ROOFLINE_MAX_PCT = 105.0

# Peak memory bandwidth per GPU (GB/s, the vendors' datasheets), matched by the longest key
# found in the GPU's name as nvidia-smi reports it. A host's `gpus: {bandwidth_gb_s: ...}`
# in hosts.yaml overrides it (another memory clock, a model missing here).
GPU_BANDWIDTH_GB_S: dict[str, float] = {
    "RTX A6000": 768.0,
    "RTX 6000 Ada": 960.0,
    "RTX PRO 6000": 1792.0,
    "A100-SXM4-80GB": 2039.0,
    "A100 80GB PCIe": 1935.0,
    "A100-PCIE-40GB": 1555.0,
    "A100-SXM4-40GB": 1555.0,
    "A100": 1555.0,
    "A40": 696.0,
    "A10": 600.0,
    "L40S": 864.0,
    "L40": 864.0,
    "L4": 300.0,
    "H100 PCIe": 2000.0,
    "H100 NVL": 3900.0,
    "H100": 3350.0,
    "H200": 4800.0,
    "GH200": 4000.0,
    "B200": 8000.0,
    "RTX 5090": 1792.0,
    "RTX 4090": 1008.0,
    "RTX 3090": 936.0,
    "V100": 900.0,
    "T4": 320.0,
}


def table_bandwidth(gpu_name: str | None) -> tuple[float, str] | None:
    """(GB/s per GPU, the table's key) for a GPU name, the longest matching key winning
    (``H100 PCIe`` before ``H100``); None for a name the table does not know."""
    if not gpu_name:
        return None
    name = gpu_name.lower()
    found = [key for key in GPU_BANDWIDTH_GB_S if key.lower() in name]
    if not found:
        return None
    key = max(found, key=len)
    return GPU_BANDWIDTH_GB_S[key], key


# --- the model's decode shape, from its config.json -----------------------------------------


@dataclass(frozen=True)
class DecodeShape:
    """What one decode step must read, from the model's config (see the module docstring)."""

    weight_bytes: int
    kv_bytes_per_token: int  # layers with a full cache
    window_kv_bytes_per_token: int = 0  # sliding-window layers, up to ``window`` tokens
    window: int | None = None
    state_bytes_per_sequence: int = 0  # linear-attention layers' recurrent state
    # an MoE: ``weight_bytes`` holds the experts one token uses; a batch touches more of them
    experts: int = 0
    experts_per_token: int = 0
    expert_bytes: int = 0  # one expert, over every layer

    def step_bytes(self, batch: float, context: float) -> float:
        windowed = min(context, self.window) if self.window else context
        per_sequence = (
            context * self.kv_bytes_per_token
            + windowed * self.window_kv_bytes_per_token
            + self.state_bytes_per_sequence
        )
        return self.weight_bytes + self.more_experts(batch) + batch * per_sequence

    def more_experts(self, batch: float) -> float:
        """Bytes of the experts a batch reads beyond one token's: with E experts and k per
        token routed at random, a batch of B touches E (1 - (1 - k/E)^B) of them per layer."""
        e, k = self.experts, self.experts_per_token
        if not (e > k > 0) or batch <= 1:
            return 0.0
        touched = e * (1 - (1 - k / e) ** batch)
        return max(0.0, touched - k) * self.expert_bytes


def _pos_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def bytes_per_parameter(text: Mapping[str, Any]) -> float:
    """A weight's bytes: the quantization's bits, else the checkpoint's dtype (bf16: 2)."""
    quant = text.get("quantization_config")
    if isinstance(quant, Mapping):
        bits = _pos_int(quant.get("bits")) or _pos_int(quant.get("w_bit")) or _group_bits(quant)
        if bits:
            return bits / 8
        method = str(quant.get("quant_method", "")).lower()
        if "fp8" in method or method == "fbgemm_fp8":
            return 1.0
        if "fp4" in method or "mxfp4" in method:
            return 0.5
    return _dtype_bytes(text.get("torch_dtype") or text.get("dtype"), default=2.0)


def _group_bits(quant: Mapping[str, Any]) -> int | None:
    """The weights' bits of a compressed-tensors checkpoint (``config_groups``: the widest)."""
    groups = quant.get("config_groups")
    if not isinstance(groups, Mapping):
        return None
    bits = [
        _pos_int(g.get("weights", {}).get("num_bits"))
        for g in groups.values()
        if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)
    ]
    known = [b for b in bits if b]
    return max(known) if known else None


def _dtype_bytes(dtype: Any, *, default: float) -> float:
    name = str(dtype or "").lower()
    if "float32" in name or name == "fp32":
        return 4.0
    if "fp8" in name or "float8" in name:
        return 1.0
    if "16" in name:
        return 2.0
    return default


def attention_params(text: Mapping[str, Any], hidden: int) -> int:
    """One softmax-attention layer: Q (x2 with an output gate), K, V and O projections."""
    heads = _pos_int(text.get("num_attention_heads"))
    if not heads:
        return 4 * hidden * hidden
    head_dim = _pos_int(text.get("head_dim")) or hidden // heads
    kv_heads = _pos_int(text.get("num_key_value_heads")) or heads
    gate = 2 if text.get("attn_output_gate") else 1
    return hidden * heads * head_dim * (gate + 1) + 2 * hidden * kv_heads * head_dim


def _linear_dims(text: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
    """(key heads, key head dim, value heads, value head dim) of a Gated DeltaNet layer; None
    without one."""
    dims = tuple(
        _pos_int(text.get(f"linear_{name}"))
        for name in ("num_key_heads", "key_head_dim", "num_value_heads", "value_head_dim")
    )
    if not all(dims):
        return None
    k_heads, k_dim, v_heads, v_dim = (int(d or 0) for d in dims)
    return k_heads, k_dim, v_heads, v_dim


def linear_attention_params(text: Mapping[str, Any], hidden: int) -> int:
    """One linear-attention (Gated DeltaNet) layer: QKV, gate and output projections."""
    dims = _linear_dims(text)
    if dims is None:
        return attention_params(text, hidden)
    k_heads, k_dim, v_heads, v_dim = dims
    k, v = k_heads * k_dim, v_heads * v_dim
    return hidden * (2 * k + v) + 2 * hidden * v


def mlp_params(text: Mapping[str, Any], hidden: int, *, active_only: bool = False) -> int:
    """One layer's MLP (gate, up, down); of an MoE every expert, or with ``active_only`` the
    experts one token is routed to, plus the shared experts."""
    experts = _pos_int(text.get("num_experts")) or _pos_int(text.get("n_routed_experts"))
    width = _pos_int(text.get("moe_intermediate_size"))
    if experts and width:
        shared = _pos_int(text.get("shared_expert_intermediate_size")) or 0
        shared += (_pos_int(text.get("n_shared_experts")) or 0) * width
        used = _pos_int(text.get("num_experts_per_tok")) if active_only else None
        return 3 * hidden * ((used or experts) * width + shared)
    return 3 * hidden * (_pos_int(text.get("intermediate_size")) or 4 * hidden)


def layer_kinds(text: Mapping[str, Any]) -> tuple[int, int, int]:
    """(full attention, sliding-window attention, linear attention) layers of the stack."""
    layers = _pos_int(text.get("num_hidden_layers")) or 0
    types = text.get("layer_types")
    if not isinstance(types, list) or len(types) != layers:
        return layers, 0, 0
    linear = sum(1 for t in types if t == "linear_attention")
    sliding = sum(1 for t in types if t == "sliding_attention")
    return layers - linear - sliding, sliding, linear


def decode_shape(
    text: Mapping[str, Any], *, kv_cache_dtype: str | None = None
) -> DecodeShape | None:
    """The bytes a decode step reads, from a model's language-model config fields (a
    multimodal model's ``text_config`` merged over its top level); None when the config lacks
    the sizes."""
    hidden, vocab = _pos_int(text.get("hidden_size")), _pos_int(text.get("vocab_size"))
    full, sliding, linear = layer_kinds(text)
    if not hidden or not (full + sliding + linear):
        return None
    mlp = mlp_params(text, hidden, active_only=True)
    params = (full + sliding) * (attention_params(text, hidden) + mlp)
    params += linear * (linear_attention_params(text, hidden) + mlp) + (vocab or 0) * hidden
    heads = _pos_int(text.get("num_attention_heads")) or 1
    head_dim = _pos_int(text.get("head_dim")) or hidden // heads
    kv_heads = _pos_int(text.get("num_key_value_heads")) or heads
    weight = bytes_per_parameter(text)
    fp8 = bool(kv_cache_dtype) and "fp8" in str(kv_cache_dtype).lower()
    element = (
        1.0 if fp8 else _dtype_bytes(text.get("torch_dtype") or text.get("dtype"), default=2.0)
    )
    per_layer = int(2 * kv_heads * head_dim * element)
    dims = _linear_dims(text) if linear else None
    state = 0
    if dims is not None:
        _k_heads, k_dim, v_heads, v_dim = dims
        state_bytes = _dtype_bytes(text.get("mamba_ssm_dtype"), default=4.0)
        state = int(linear * v_heads * k_dim * v_dim * state_bytes)
    window = _pos_int(text.get("sliding_window")) if sliding else None
    experts = _pos_int(text.get("num_experts")) or _pos_int(text.get("n_routed_experts")) or 0
    per_token = _pos_int(text.get("num_experts_per_tok")) or 0
    width = _pos_int(text.get("moe_intermediate_size")) or 0
    expert = int(3 * hidden * width * (full + sliding + linear) * weight) if experts else 0
    return DecodeShape(
        experts=experts if per_token and width else 0,
        experts_per_token=per_token,
        expert_bytes=expert,
        weight_bytes=int(params * weight),
        kv_bytes_per_token=full * per_layer + (0 if window else sliding * per_layer),
        window_kv_bytes_per_token=sliding * per_layer if window else 0,
        window=window,
        state_bytes_per_sequence=state,
    )


# --- one measurement against the roofline ---------------------------------------------------


@dataclass(frozen=True)
class RooflineInputs:
    """What the measurer knows before the load: the model's shape and the GPUs' bandwidth."""

    shape: DecodeShape
    gpus: int
    bandwidth_gb_s: float  # per GPU
    bandwidth_source: str  # "table: RTX A6000" | "hosts.yaml"
    replicas: int = 1  # data-parallel copies of the model, each reading its own weights


@dataclass(frozen=True)
class RooflinePoint:
    """One measurement's decode against the bandwidth limit (see the module docstring).

    Also the persisted record (``RunResult.roofline``), validated by pydantic as it stands."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    pct: float  # of the GPUs' aggregate peak bandwidth
    achieved_gb_s: float
    peak_gb_s: float  # GPUs x bandwidth per GPU
    bytes_per_step: float
    step_ms: float
    batch: float  # sequences decoding together (Little's law)
    context_tokens: float  # mean context of a decoding sequence
    weight_bytes: int
    kv_bytes_per_token: int
    state_bytes_per_sequence: int
    bandwidth_source: str


def roofline_point(
    inputs: RooflineInputs,
    *,
    step_ms: float | None,
    completed: int,
    duration_s: float,
    decode_ms_mean: float | None,
    prompt_tokens: int,
    output_tokens: int,
) -> RooflinePoint | None:
    """The measurement's point, or None when it lacks a step time or decoding requests."""
    if not step_ms or step_ms <= 0 or completed <= 0 or duration_s <= 0 or not decode_ms_mean:
        return None
    batch = max(1.0, completed / duration_s * decode_ms_mean / 1000.0)
    context = prompt_tokens / completed + output_tokens / completed / 2.0
    replicas = max(1, inputs.replicas)  # each steps with its share of the batch
    step_bytes = replicas * inputs.shape.step_bytes(batch / replicas, context)
    achieved = step_bytes / (step_ms / 1000.0) / GB
    peak = inputs.gpus * inputs.bandwidth_gb_s
    return RooflinePoint(
        pct=100.0 * achieved / peak,
        achieved_gb_s=achieved,
        peak_gb_s=peak,
        bytes_per_step=step_bytes,
        step_ms=step_ms,
        batch=batch,
        context_tokens=context,
        weight_bytes=inputs.shape.weight_bytes,
        kv_bytes_per_token=inputs.shape.kv_bytes_per_token + inputs.shape.window_kv_bytes_per_token,
        state_bytes_per_sequence=inputs.shape.state_bytes_per_sequence,
        bandwidth_source=inputs.bandwidth_source,
    )
