"""Build the tiny local models that the real vLLM CPU test tier serves (issue 21).

    <real-vllm venv>/bin/python scripts/realvllm_models.py OUTDIR

Runs under the real vLLM venv's interpreter: standard library plus torch, transformers,
tokenizers and safetensors; nothing is downloaded. It writes into OUTDIR:

- ``tiny-model/``: a byte-level BPE tokenizer (vocab 1024) trained on a generated pseudo-English
  corpus, with a chat template, and a random 2-layer Llama (bf16, tied embeddings, eos id 2);
- ``tiny-draft/``: the same recipe with 1 layer and another seed, and byte-identical tokenizer
  files, so vLLM accepts it as a ``draft_model`` for the target;
- ``tiny-eagle3/``: a random EAGLE-3 head (``LlamaForCausalLMEagle3``; ``midlayer.*``, ``fc``,
  ``norm``, ``lm_head``, no embeddings) for the 2-layer target, configured the way published
  EAGLE-3 heads are, so the doctor reads the same fields as on a real one;
- ``MANIFEST.json``: what was built (shapes, parameter counts, seeds, file digests).

Everything is seeded: building twice gives byte-identical files, so the tier can cache by
content. Random weights are the point: at temperature 0 the target falls into loops, so vLLM
gives three acceptance regimes on demand (measured with vLLM 0.32, 64-token greedy
completions): ngram and the target as its own drafter near 100% (mean length ~4.2 and 4.00),
tiny-draft about half (~2.7 of 4, above orch's collapse floor), and the untrained EAGLE-3 head
0% (1.00: a collapse).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

import safetensors
import tokenizers
import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, PreTrainedTokenizerFast

VOCAB = 1024
SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|system|>"]
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2  # the specials' ids: the trainer puts them first, in order
CORPUS_SEED = 1234
CORPUS_SENTENCES = 6000
MAX_POSITIONS = 4096  # >= 2048: the tier's "KV cache too small for --max-model-len" case
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 256, 4, 2, 64, 512
INIT_STD = 0.02  # transformers' initializer_range for Llama
# EAGLE-3 captures hidden states at these target layer ids (vLLM's convention: 0 is the
# embedding output, i the output of layer i); vLLM's default (2, n//2, n-3) does not fit n = 2.
AUX_LAYER_IDS = [0, 1, 2]
MODELS = {  # name: (layers, seed)
    "tiny-model": (2, 0),
    "tiny-draft": (1, 1),
}
EAGLE3 = ("tiny-eagle3", 2)  # name, seed
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

# --- corpus and tokenizer --------------------------------------------------------------------

_WORDS = {
    "det": "the a this that every some one no each another",
    "adj": (
        "small large old new quiet bright dark cold warm early late quick slow green red blue "
        "heavy light simple strange clear open short long happy tired busy careful"
    ),
    "noun": (
        "river city engine model server window garden teacher student machine letter market "
        "road bridge mountain table kitchen village doctor station question answer signal "
        "morning evening winter summer paper number system story friend house forest"
    ),
    "verb": (
        "sees finds builds moves reads writes opens closes carries watches follows measures "
        "checks sends keeps leaves holds starts stops turns"
    ),
    "adv": "slowly quickly often rarely again already never always soon carefully",
    "prep": "in on near under over behind beside across through without",
    "name": "Anna Boris Clara David Elena Farid Greta Hugo Ines Jonas Kira Leo",
}
WORDS = {kind: words.split() for kind, words in _WORDS.items()}


def sentence(rng: random.Random) -> str:
    """One pseudo-English sentence: varied enough that BPE learns word pieces and numbers."""
    w = {k: rng.choice(v) for k, v in WORDS.items()}
    forms = [
        f"{w['det']} {w['adj']} {w['noun']} {w['verb']} {rng.choice(WORDS['det'])} {rng.choice(WORDS['noun'])}.",
        f"{w['name']} {w['adv']} {w['verb']} the {w['noun']} {w['prep']} the {rng.choice(WORDS['noun'])}.",
        f"In {rng.randint(1900, 2030)}, {w['name']} counted {rng.randint(2, 999)} {w['noun']}s.",
        f"Why does the {w['noun']} {w['verb'][:-1]} {w['adv']}?",
        f'"{w["adj"].capitalize()} {w["noun"]}," said {w["name"]}, "{w["verb"]} {rng.randint(0, 99)} times."',
        f"The {w['noun']} is {w['adj']}, and the {rng.choice(WORDS['noun'])} is not.",
    ]
    text = rng.choice(forms)
    return text[0].upper() + text[1:]


def corpus() -> list[str]:
    """Paragraphs of generated sentences, the same on every run (fixed seed)."""
    rng = random.Random(CORPUS_SEED)
    lines = []
    for _ in range(CORPUS_SENTENCES // 6):
        lines.append(" ".join(sentence(rng) for _ in range(6)))
    return lines


def train_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE (any text encodes) with the specials first, wrapped for transformers."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    assert [tok.token_to_id(s) for s in SPECIALS[:3]] == [PAD_ID, BOS_ID, EOS_ID]
    # a prompt starts with <|bos|>, as Llama tokenizers do; the chat template writes its own
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[("<|bos|>", BOS_ID)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        additional_special_tokens=SPECIALS[3:],
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITIONS,
    )


# --- weights ---------------------------------------------------------------------------------


def tensor(name: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """A bf16 weight drawn from its own generator, seeded by (seed, name): adding a tensor
    never changes another one. Norm weights are ones, as transformers initialises them."""
    if name.endswith("norm.weight"):
        return torch.ones(shape, dtype=torch.bfloat16)
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
    return (torch.randn(shape, generator=gen) * INIT_STD).to(torch.bfloat16)


def decoder_layer(prefix: str, attn_in: int) -> dict[str, tuple[int, ...]]:
    """A Llama decoder layer's weight shapes; ``attn_in`` is 2 x hidden in an EAGLE-3 head."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    return {
        f"{prefix}.self_attn.q_proj.weight": (q, attn_in),
        f"{prefix}.self_attn.k_proj.weight": (kv, attn_in),
        f"{prefix}.self_attn.v_proj.weight": (kv, attn_in),
        f"{prefix}.self_attn.o_proj.weight": (HIDDEN, q),
        f"{prefix}.mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
        f"{prefix}.mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
        f"{prefix}.mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
        f"{prefix}.input_layernorm.weight": (HIDDEN,),
        f"{prefix}.post_attention_layernorm.weight": (HIDDEN,),
    }


def llama_shapes(layers: int) -> dict[str, tuple[int, ...]]:
    """LlamaForCausalLM's checkpoint names; lm_head is tied to embed_tokens, so absent."""
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i in range(layers):
        shapes.update(decoder_layer(f"model.layers.{i}", HIDDEN))
    shapes["model.norm.weight"] = (HIDDEN,)
    return shapes


def eagle3_shapes() -> dict[str, tuple[int, ...]]:
    """The EAGLE-3 checkpoint layout vLLM's llama_eagle3.py loads: one ``midlayer`` whose
    attention reads [embeddings; hidden] (2 x hidden), ``fc`` folding the target's aux hidden
    states, its own ``lm_head``; no embed_tokens (vLLM shares the target's)."""
    shapes = decoder_layer("midlayer", 2 * HIDDEN)
    shapes["midlayer.hidden_norm.weight"] = (HIDDEN,)
    shapes["fc.weight"] = (HIDDEN, HIDDEN * len(AUX_LAYER_IDS))
    shapes["norm.weight"] = (HIDDEN,)
    shapes["lm_head.weight"] = (VOCAB, HIDDEN)
    return shapes


def write_weights(folder: Path, shapes: dict[str, tuple[int, ...]], seed: int) -> int:
    """model.safetensors (names sorted, fixed metadata: byte-identical on every build)."""
    weights = {name: tensor(name, shape, seed) for name, shape in sorted(shapes.items())}
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return sum(t.numel() for t in weights.values())


# --- configs and folders ---------------------------------------------------------------------


def llama_config(layers: int, **extra: object) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        dtype="bfloat16",
        **extra,
    )


def build_llama(out: Path, name: str, layers: int, seed: int, tokenizer_from: Path) -> dict:
    """A random LlamaForCausalLM folder with the shared tokenizer files copied in."""
    folder = out / name
    folder.mkdir(parents=True)
    config = llama_config(layers, architectures=["LlamaForCausalLM"], tie_word_embeddings=True)
    config.save_pretrained(folder)
    params = write_weights(folder, llama_shapes(layers), seed)
    for f in sorted(tokenizer_from.iterdir()):
        shutil.copyfile(f, folder / f.name)
    return {"architecture": "LlamaForCausalLM", "layers": layers, "seed": seed, "params": params}


def build_eagle3(out: Path, name: str, seed: int) -> dict:
    """A random EAGLE-3 head whose config carries the fields published heads carry
    (draft_vocab_size, target_hidden_size, eagle_config's aux layer ids)."""
    folder = out / name
    folder.mkdir(parents=True)
    config = llama_config(
        1,
        architectures=["LlamaForCausalLMEagle3"],
        tie_word_embeddings=False,
        draft_vocab_size=VOCAB,
        target_hidden_size=HIDDEN,
        eagle_config={
            "eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS,
            "use_aux_hidden_state": True,
        },
    )
    config.save_pretrained(folder)
    params = write_weights(folder, eagle3_shapes(), seed)
    return {
        "architecture": "LlamaForCausalLMEagle3",
        "layers": 1,
        "seed": seed,
        "params": params,
        "target": "tiny-model",
        "aux_layer_ids": AUX_LAYER_IDS,
    }


def check_target(folder: Path) -> None:
    """Load the target with transformers: a misnamed or missing weight fails the build here,
    not thirty seconds into a vLLM start."""
    from transformers import LlamaForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    model, info = LlamaForCausalLM.from_pretrained(folder, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        raise SystemExit(f"{folder}: the checkpoint does not load cleanly: {bad}")
    ids = torch.tensor([[BOS_ID, 100, 200, 300]])
    if not torch.isfinite(model(ids).logits).all():
        raise SystemExit(f"{folder}: non-finite logits")


def digests(out: Path) -> dict[str, str]:
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def build(out: Path) -> dict:
    """Every folder of OUTDIR, then MANIFEST.json describing them."""
    torch.manual_seed(0)  # nothing below draws from the global generator; belt and braces
    with tempfile.TemporaryDirectory(prefix="tiny-tokenizer-") as tmp:
        train_tokenizer().save_pretrained(tmp)
        built = {
            name: build_llama(out, name, layers, seed, Path(tmp))
            for name, (layers, seed) in MODELS.items()
        }
    built[EAGLE3[0]] = build_eagle3(out, *EAGLE3)
    check_target(out / "tiny-model")
    manifest = describe(out, built)
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def describe(out: Path, built: dict) -> dict:
    """MANIFEST.json's content: no time stamps, so it is byte-identical across builds too."""
    return {
        "built_by": "scripts/realvllm_models.py",
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "safetensors": safetensors.__version__,
        },
        "tokenizer": {
            "kind": "byte-level BPE",
            "vocab_size": VOCAB,
            "specials": {s: i for i, s in enumerate(SPECIALS)},
            "corpus_seed": CORPUS_SEED,
            "corpus_sentences": CORPUS_SENTENCES,
        },
        "shape": {
            "hidden_size": HIDDEN,
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
            "head_dim": HEAD_DIM,
            "intermediate_size": INTERMEDIATE,
            "max_position_embeddings": MAX_POSITIONS,
            "dtype": "bfloat16",
            "init_std": INIT_STD,
        },
        "models": built,
        "files": digests(out),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    if out.exists() and any(out.iterdir()):
        print(f"{out} is not empty: build into a new folder", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    manifest = build(out)
    for name, m in manifest["models"].items():
        print(f"{name}: {m['architecture']}, {m['layers']} layer(s), {m['params']:,} params")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
