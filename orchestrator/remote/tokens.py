"""Prompts for the load generator: the host's tokenizer, and random prompts of a set length.

The tokenizer is the model's own, loaded from local files by ``transformers`` when the engine's
interpreter has it (imported only inside :func:`load_tokenizer`: the agent itself stays
standard library only); without one, random prompts are counted in words and say so.
"""

from __future__ import annotations

import random
from typing import Any, List, Optional, Tuple

from .protocol import AgentFailure
from .wire import ErrorKind, PromptSource

_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force"
)
_WORDS = tuple(_WORD_TEXT.split())


class HostTokenizer:
    """The few tokenizer operations the load generator needs, without special tokens."""

    def __init__(self, hf: Any) -> None:
        self.hf = hf
        self.vocab_size = len(hf)
        self.special_ids = set(getattr(hf, "all_special_ids", []) or [])

    def encode(self, text: str) -> List[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: List[int]) -> str:
        return self.hf.decode(ids)

    def count(self, text: str) -> int:
        return len(self.encode(text))


def load_tokenizer(name: Optional[str]) -> Optional[HostTokenizer]:
    """The model's tokenizer from local files (HF cache or a path), or None if unavailable."""
    if not name:
        return None
    try:
        from transformers import AutoTokenizer  # the engine venv has it; imported only here

        return HostTokenizer(AutoTokenizer.from_pretrained(name, local_files_only=True))
    except Exception:  # noqa: BLE001 - no transformers, no cached files: fall back to words
        return None


def random_prompts(spec: PromptSource, tokenizer: Any, seed: Any) -> Tuple[List[str], str, int]:
    """``num`` random prompts of ``input_len`` tokens (±range_ratio): (items, source, n_exact).

    With a tokenizer the text is random token ids decoded and re-encoded until its length in
    tokens is exact (decode/encode round trips can merge or split tokens); without one the
    length is in words, and the source says so.
    """
    n, length, ratio = spec.num, spec.input_len, spec.range_ratio
    if n is None or length is None:
        raise AgentFailure(ErrorKind.BAD_SPEC, "loadgen: random prompts need 'num' and 'input_len'")
    if n < 1 or length < 1 or not 0 <= ratio < 1:
        raise AgentFailure(
            ErrorKind.BAD_SPEC,
            "loadgen: random prompts need num >= 1, input_len >= 1, 0 <= range_ratio < 1",
        )
    rng = random.Random(f"{seed}:prompts")
    low, high = max(1, int(length * (1 - ratio))), max(1, int(length * (1 + ratio)))
    lengths = [rng.randint(low, high) for _ in range(n)]
    if tokenizer is None:
        return [" ".join(rng.choice(_WORDS) for _ in range(k)) for k in lengths], "random:words", 0
    items, exact = [], 0
    for k in lengths:
        text, ok = _token_prompt(tokenizer, k, rng)
        items.append(text)
        exact += ok
    return items, "random:tokens", exact


def _token_prompt(tok: Any, length: int, rng: random.Random) -> Tuple[str, bool]:
    def draw(count: int) -> List[int]:
        ids: List[int] = []
        while len(ids) < count:
            i = rng.randrange(tok.vocab_size)
            if i not in tok.special_ids:
                ids.append(i)
        return ids

    text = tok.decode(draw(length))
    for _ in range(10):
        ids = tok.encode(text)
        if len(ids) == length:
            return text, True
        text = (
            tok.decode(ids[:length])
            if len(ids) > length
            else text + tok.decode(draw(length - len(ids)))
        )
    return text, len(tok.encode(text)) == length
