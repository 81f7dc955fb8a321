"""A local tokenizer for the peers' clients, written by hand: no download, no network.

AIPerf and GuideLLM load a Hugging Face tokenizer to make prompts and count tokens. The
simulator's generated text is one short English word per token (``orchestrator.sim.openai_api``),
so a word-level tokenizer whose vocabulary holds those words counts the simulator's tokens
exactly: a peer that counts tokens from the text gets the server's count. ``tokenizer.json``
(the ``tokenizers`` library's format) and ``tokenizer_config.json`` are plain JSON, loaded by
``transformers.AutoTokenizer.from_pretrained(folder)`` with ``HF_HUB_OFFLINE=1``.

The folder is laid out as a Hugging Face cache (``HF_HOME/hub/models--ORG--NAME/snapshots/
REV``, ``refs/main`` naming REV): AIPerf, offline, looks a tokenizer up in the cache by its
id only (a plain path fails there), so the peers get the id ``REPO_ID`` with ``HF_HOME`` set.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.sim.openai_api import token_texts

SPECIALS = ("[UNK]", "[PAD]", "<s>", "</s>")
# common English words, so that prompts the peers make from their own corpora mostly tokenize
# to words rather than [UNK] (the simulator's cost of a prompt does not depend on its words)
COMMON = """
a about after all also an and any are as at back be because been before being but by can
come could day did do does down each even first for from get give go good great had has have
he her here him his how i if in into is it its just know like little long look made make man
many may me more most much must my never new no not now of on one only or other our out over
people said say see she should so some take than that the their them then there these they
thing think this those time to two up upon us use very was way we well were what when where
which while who will with work would year you your
"""


def vocabulary() -> list[str]:
    """Specials first, then every word the simulator generates, common words, digits and
    punctuation: sorted, each once."""
    # the simulator picks word (seed + 7i + i^2) mod |vocabulary|: every seed below 64 together
    # reach each of its words
    keys = [f"{seed:08x}" for seed in range(64)]
    generated = {t.strip() for key in keys for t in token_texts(key, 0, 64)}
    punctuation = set(".,;:!?'\"()[]{}-_/\\@#$%^&*+=<>|~`")
    words = generated | set(COMMON.split()) | set("0123456789") | punctuation
    return [*SPECIALS, *sorted(words - set(SPECIALS))]


def tokenizer_json(vocab: list[str]) -> dict[str, object]:
    """A ``tokenizers`` WordLevel tokenizer: split on whitespace and punctuation, one id per
    word, [UNK] for any other; decoding joins words with spaces."""
    ids = {word: i for i, word in enumerate(vocab)}
    added = [
        {
            "id": ids[s],
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for s in SPECIALS
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": ids, "unk_token": "[UNK]"},
    }


REPO_ID = "orch-bench/sim-words"
REVISION = "0" * 40


def build_tokenizer(hf_home: Path) -> Path:
    """Write the tokenizer into the cache at ``hf_home`` (files kept when already the same);
    returns its snapshot folder, which ``AutoTokenizer`` also loads by path."""
    repo = hf_home / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    folder = repo / "snapshots" / REVISION
    folder.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    if not (repo / "refs" / "main").is_file():
        (repo / "refs" / "main").write_text(REVISION, encoding="utf-8")
    files = {
        "tokenizer.json": tokenizer_json(vocabulary()),
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 131072,
            "unk_token": "[UNK]",
            "pad_token": "[PAD]",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "clean_up_tokenization_spaces": False,
        },
        "special_tokens_map.json": {
            "unk_token": "[UNK]",
            "pad_token": "[PAD]",
            "bos_token": "<s>",
            "eos_token": "</s>",
        },
    }
    for name, data in files.items():
        text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
        path = folder / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    return folder
