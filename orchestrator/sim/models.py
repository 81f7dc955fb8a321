"""Find a model the way the engines do (local directory or Hugging Face cache) and read its configs.

Only ``config.json`` and ``tokenizer_config.json`` are read: the simulator needs shapes (layers,
hidden size, vocabulary, KV heads) to size memory and speed, the tokenizer's added tokens to judge
a drafter's mask token, and a drafter's DFlash fields to decide whether it fits its target.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ModelNotFound(Exception):
    """Neither a local directory nor a cached Hugging Face repository."""


def hub_cache(environ: Mapping[str, str]) -> Path:
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"])
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"]) / "hub"
    home = environ.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".cache" / "huggingface" / "hub"


def resolve_model(name: str, environ: Mapping[str, str]) -> Path:
    """A local directory with config.json, or the snapshot refs/main points at in the HF cache."""
    local = Path(name).expanduser()
    if (local / "config.json").is_file():
        return local.resolve()
    if name.startswith(("/", ".", "~")) or name.count("/") != 1:
        raise ModelNotFound(name)
    repo = hub_cache(environ) / ("models--" + name.replace("/", "--"))
    ref = repo / "refs" / "main"
    candidates: list[Path] = []
    if ref.is_file():
        candidates.append(repo / "snapshots" / ref.read_text().strip())
    if (repo / "snapshots").is_dir():
        candidates += sorted((repo / "snapshots").iterdir())
    for snap in candidates:
        if (snap / "config.json").is_file():
            return snap
    raise ModelNotFound(name)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class TargetModel:
    name: str  # as given on the command line
    path: Path
    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    full_attention_layers: int
    linear_attention_layers: int
    linear_k_dim: int  # Gated DeltaNet: key heads x key head dim
    linear_v_dim: int
    attn_output_gate: bool
    mtp_layers: int
    max_position_embeddings: int
    has_vision: bool
    tokenizer_len: int  # last added token id + 1 (ids past it decode to nothing)
    added_tokens: dict[int, str]

    @property
    def is_hybrid(self) -> bool:
        return self.linear_attention_layers > 0

    def params(self) -> int:
        """Weights, roughly as the checkpoint holds them (bf16 -> 2 bytes each)."""
        h, inter = self.hidden_size, self.intermediate_size
        q_out = self.num_heads * self.head_dim
        gate = 2 if self.attn_output_gate else 1
        attn = h * q_out * gate + 2 * h * self.num_kv_heads * self.head_dim + q_out * h
        k, v = self.linear_k_dim, self.linear_v_dim
        linear = h * (2 * k + v) + h * v + v * h
        mlp = 3 * h * inter
        layers = (
            self.full_attention_layers * (attn + mlp)
            + self.linear_attention_layers * (linear + mlp)
            + self.mtp_layers * (attn + mlp + 2 * h * h)
        )
        vision = 420_000_000 if self.has_vision else 0
        return layers + 2 * self.vocab_size * h + vision

    def kv_bytes_per_token(self) -> int:
        """KV cache bytes per token over all GPUs (full-attention layers only, bf16)."""
        return self.full_attention_layers * 2 * self.num_kv_heads * self.head_dim * 2


def load_target(name: str, path: Path) -> TargetModel:
    config = _read_json(path / "config.json")
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    layers = int(text.get("num_hidden_layers", 0))
    types = text.get("layer_types") or []
    linear = sum(1 for t in types if t == "linear_attention")
    heads = int(text.get("num_attention_heads", 1))
    hidden = int(text.get("hidden_size", 0))
    tok = _read_json(path / "tokenizer_config.json")
    added = {
        int(k): str(v.get("content", ""))
        for k, v in (tok.get("added_tokens_decoder") or {}).items()
        if isinstance(v, dict)
    }
    archs = config.get("architectures") or ["?"]
    mtp = int(
        text.get("mtp_num_hidden_layers")
        or text.get("num_nextn_predict_layers")
        or config.get("num_nextn_predict_layers")
        or 0
    )
    return TargetModel(
        name=name,
        path=path,
        architecture=str(archs[0]),
        model_type=str(config.get("model_type", "")),
        num_layers=layers,
        hidden_size=hidden,
        intermediate_size=int(text.get("intermediate_size", 4 * hidden)),
        vocab_size=int(text.get("vocab_size", config.get("vocab_size", 0))),
        num_heads=heads,
        num_kv_heads=int(text.get("num_key_value_heads", heads)),
        head_dim=int(text.get("head_dim") or (hidden // max(heads, 1))),
        full_attention_layers=layers - linear,
        linear_attention_layers=linear,
        linear_k_dim=int(text.get("linear_key_head_dim", 0))
        * int(text.get("linear_num_key_heads", 0)),
        linear_v_dim=int(text.get("linear_value_head_dim", 0))
        * int(text.get("linear_num_value_heads", 0)),
        attn_output_gate=bool(text.get("attn_output_gate", False)),
        mtp_layers=mtp,
        max_position_embeddings=int(text.get("max_position_embeddings", 32768)),
        has_vision="vision_config" in config,
        tokenizer_len=(max(added) + 1) if added else int(text.get("vocab_size", 0)),
        added_tokens=added,
    )


@dataclass(frozen=True)
class DraftModel:
    name: str
    path: Path
    architecture: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    block_size: int | None
    mask_token_id: int | None
    target_layer_ids: tuple[int, ...] | None
    num_target_layers: int | None
    layer_types: tuple[str, ...]
    params: int

    @property
    def mixes_sliding_and_full(self) -> bool:
        return "sliding_attention" in self.layer_types and "full_attention" in self.layer_types


def load_draft(name: str, path: Path) -> DraftModel:
    config = _read_json(path / "config.json")
    nested = config.get("dflash_config")
    dflash: dict[str, Any] = nested if isinstance(nested, dict) else {}
    block = dflash.get("block_size", config.get("block_size"))
    mask = dflash.get("mask_token_id", config.get("mask_token_id"))
    ids = dflash.get("target_layer_ids", config.get("target_layer_ids"))
    hidden = int(config.get("hidden_size", 0))
    layers = int(config.get("num_hidden_layers", 1))
    inter = int(config.get("intermediate_size", 4 * hidden))
    archs = config.get("architectures") or ["?"]
    captures = len(ids) if isinstance(ids, list) else 1
    return DraftModel(
        name=name,
        path=path,
        architecture=str(archs[0]),
        num_layers=layers,
        hidden_size=hidden,
        vocab_size=int(config.get("vocab_size", 0)),
        block_size=int(block) if isinstance(block, int) else None,
        mask_token_id=int(mask) if isinstance(mask, int) else None,
        target_layer_ids=tuple(int(i) for i in ids) if isinstance(ids, list) else None,
        num_target_layers=config.get("num_target_layers"),
        layer_types=tuple(str(t) for t in config.get("layer_types") or ()),
        params=layers * (3 * hidden * inter + 4 * hidden * hidden) + captures * hidden * hidden,
    )
