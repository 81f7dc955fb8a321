"""Prompt sources for a workload, resolved on the controller, and the ``loadgen`` verb's spec.

``workload.prompts`` is one of:

- ``builtin:chat`` | ``builtin:code`` | ``builtin:math`` | ``builtin:mixed`` (the three
  together): small sets of real prompts shipped in ``orchestrator/loadgen/data/``;
- a path to a ``.jsonl`` or ``.json`` file (relative to the playbook's directory), one prompt
  per line in any of these shapes: ``{"prompt": str}``, ``{"text": str}``, ``{"messages":
  [...]}`` (OpenAI chat), ShareGPT ``{"conversations": [{"from": "human", "value": ...}, ...]}``
  (the first human turn is the prompt; entries without one are skipped and counted), or a bare
  JSON string. A file holding one JSON array of such records (how ShareGPT dumps ship) is read
  too: the content decides, not the file name, and errors name the line the record starts on;
- ``random``: random prompts of ``input_len`` tokens, made on the host where the model's
  tokenizer is (so this returns only the recipe).

Files are read here and the sampled prompts are sent inside the spec, so hosts need no copy.
Sampling is a seeded shuffle cycled as often as needed, so a seed always gives the same
prompts in the same order, and ``num_prompts`` larger than the set repeats it evenly.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from orchestrator.config.playbook import WorkloadSpec
from orchestrator.engines.base import CacheReset
from orchestrator.errors import ConfigError
from orchestrator.remote.wire import CacheResetSpec, LoadgenSpec, PromptSource, TelemetrySpec

Item = str | dict[str, Any]  # plain text, or {"messages": [...]}
BUILTIN_SETS = ("chat", "code", "math")
BUILTIN_NAMES = (*BUILTIN_SETS, "mixed")
RANDOM_POOL = 512  # distinct random prompts for a duration-bound run (cycled after that)
_SHAPES = "'prompt', 'text', 'messages' or 'conversations' (ShareGPT)"
_LAYOUT = "one JSON record per line (JSONL), or a single JSON array of records"
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


@dataclass(frozen=True)
class PromptSet:
    """Where prompts come from: ``items`` for builtin/file sets, ``input_len`` for random."""

    source: str  # "builtin:<name>" | "file:<path>" | "random"
    items: tuple[Item, ...] = ()
    input_len: int | None = None
    skipped: int = 0  # records with no usable prompt (ShareGPT entries without a human turn)
    # SHA-256 of the bytes read (a file, or a built-in set's files in order): what a resume pins
    # and what results record, so a rewritten file under the same name is never the same
    # workload; None for random prompts (their recipe is the playbook's)
    sha256: str | None = None

    @property
    def is_random(self) -> bool:
        return self.source == "random"

    def sample(self, n: int, *, seed: int | str) -> list[Item]:
        return sample_items(self.items, n, seed=seed)


def load_prompts(workload: WorkloadSpec, *, base_dir: Path | str) -> PromptSet:
    """The workload's prompt set; ConfigError naming the file and line for a bad file."""
    source = workload.prompts or "builtin:mixed"
    if source == "random":
        input_len = workload.input_len
        if input_len is None or input_len < 1:
            raise ConfigError(
                f"random prompts need input_len (a positive number of tokens), got {input_len!r}",
                path="workload.input_len",
            )
        return PromptSet(source="random", input_len=input_len)
    if source.startswith("builtin:"):
        return load_builtin(source.split(":", 1)[1])
    path = Path(source).expanduser()
    if not path.is_absolute():
        path = Path(base_dir) / path
    return load_file(path)


def load_builtin(name: str) -> PromptSet:
    if name not in BUILTIN_NAMES:
        raise ConfigError(
            f"unknown built-in prompt set {name!r}",
            path="workload.prompts",
            hint=f"use one of: {', '.join('builtin:' + n for n in BUILTIN_NAMES)}",
        )
    items: list[Item] = []
    digest = hashlib.sha256()
    for part in BUILTIN_SETS if name == "mixed" else (name,):
        resource = resources.files("orchestrator.loadgen") / "data" / f"{part}.jsonl"
        data = resource.read_bytes()
        digest.update(data)
        parsed, _ = parse_prompt_lines(data.decode("utf-8").splitlines(), file=str(resource))
        items.extend(parsed)
    return PromptSet(source=f"builtin:{name}", items=tuple(items), sha256=digest.hexdigest())


def load_file(path: Path) -> PromptSet:
    try:
        data = path.read_bytes()
        # newlines as text mode reads them (a JSON string holds no raw CR)
        text = data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    except FileNotFoundError as exc:
        raise ConfigError(
            f"prompt file {path} does not exist",
            file=str(path),
            path="workload.prompts",
            hint="paths are relative to the playbook's directory",
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read prompt file {path}: {exc}", file=str(path)) from exc
    if text.lstrip(" \t\n\r").startswith("["):
        items, skipped = _parse_array(text, file=str(path))
    else:
        # not splitlines(): it also splits at U+2028 and other characters JSON strings may hold
        items, skipped = parse_prompt_lines(text.split("\n"), file=str(path))
    if not items:
        raise ConfigError(
            f"prompt file {path} holds no usable prompt ({skipped} entries skipped)",
            file=str(path),
            hint=f"each record needs {_SHAPES}",
        )
    digest = hashlib.sha256(data).hexdigest()
    return PromptSet(source=f"file:{path}", items=tuple(items), skipped=skipped, sha256=digest)


def parse_prompt_lines(lines: Iterable[str], *, file: str) -> tuple[list[Item], int]:
    """Pure JSONL parser: (items, skipped); blank lines are ignored."""
    items: list[Item] = []
    skipped = 0
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:  # its own "line 1" is this line: name the column only
            raise ConfigError(
                f"not valid JSON: {exc.msg} (column {exc.colno})",
                file=file,
                line=line_no,
                hint=f"the file needs {_LAYOUT}",
            ) from exc
        item = parse_prompt_record(obj, file=file, line=line_no)
        if item is None:
            skipped += 1
        else:
            items.append(item)
    return items, skipped


def _parse_array(text: str, *, file: str) -> tuple[list[Item], int]:
    """A file holding one JSON array of records: (items, skipped).

    Decoded record by record (``raw_decode``) rather than with one ``json.loads``, so that an
    error names the line its record starts on, as for JSONL.
    """
    decoder = json.JSONDecoder()
    lines = _LineCounter(text)
    items: list[Item] = []
    skipped = index = 0
    pos = _skip_space(text, text.index("[") + 1)
    closed = text.startswith("]", pos)  # an empty array has no records
    if closed:
        pos = _skip_space(text, pos + 1)
    while not closed:
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"not valid JSON: {exc.msg} (column {exc.colno})", file=file, line=exc.lineno
            ) from exc
        item = parse_prompt_record(obj, file=file, line=lines.at(pos), where=f"item {index}")
        if item is None:
            skipped += 1
        else:
            items.append(item)
        pos = _skip_space(text, end)
        closed = text.startswith("]", pos)
        if not closed and not text.startswith(",", pos):
            raise ConfigError(
                f"not valid JSON: expected ',' or ']' after item {index}",
                file=file,
                line=lines.at(pos),
            )
        pos = _skip_space(text, pos + 1)  # past the ',' or the ']'
        index += 1
    if pos < len(text):
        raise ConfigError(
            "not valid JSON: more data after the array's closing ']'",
            file=file,
            line=lines.at(pos),
            hint=f"the file needs {_LAYOUT}",
        )
    return items, skipped


def _skip_space(text: str, pos: int) -> int:
    """The offset of the first non-whitespace character at or after ``pos``."""
    match = _SPACE.match(text, pos)
    return match.end() if match else pos  # the pattern matches the empty string: never None


class _LineCounter:
    """1-based line of an offset, for offsets asked in increasing order (linear overall)."""

    def __init__(self, text: str) -> None:
        self.text, self.line, self.pos = text, 1, 0

    def at(self, pos: int) -> int:
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


def parse_prompt_record(obj: Any, *, file: str, line: int | None, where: str = "") -> Item | None:
    """One record -> a prompt, None for a ShareGPT entry without a human turn."""

    def bad(message: str) -> ConfigError:
        prefix = f"{where}: " if where else ""
        return ConfigError(
            prefix + message, file=file, line=line, hint=f"each record needs {_SHAPES}"
        )

    if isinstance(obj, str) and obj:
        return obj
    if not isinstance(obj, dict):
        raise bad(f"expected a JSON object, got {type(obj).__name__}")
    if "messages" in obj:
        return {"messages": _check_messages(obj["messages"], bad)}
    for key in ("prompt", "text"):
        if key in obj:
            value = obj[key]
            if not isinstance(value, str) or not value:
                raise bad(f"{key!r} must be a non-empty string, got {value!r:.60}")
            return value
    if "conversations" in obj:
        turns = obj["conversations"]
        if not isinstance(turns, list):
            raise bad("'conversations' must be a list of {'from', 'value'} turns")
        for turn in turns:
            if isinstance(turn, dict) and turn.get("from") in ("human", "user"):
                value = turn.get("value")
                return value if isinstance(value, str) and value else None
        return None
    raise bad(f"no prompt found among keys {sorted(obj)}")


def _check_messages(messages: Any, bad: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty list of {'role', 'content'} objects")
    for i, message in enumerate(messages):
        ok = (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), (str, list))
        )
        if not ok:
            raise bad(f"messages[{i}] must be an object with a string 'role' and a 'content'")
    return messages


def sample_items(items: tuple[Item, ...] | list[Item], n: int, *, seed: int | str) -> list[Item]:
    """``n`` prompts: one seeded shuffle of ``items``, cycled."""
    if not items:
        return []
    order = list(range(len(items)))
    random.Random(f"{seed}:prompts").shuffle(order)
    return [items[order[k % len(order)]] for k in range(n)]


def build_loadgen_spec(
    workload: WorkloadSpec,
    prompts: PromptSet,
    *,
    port: int,
    served_name: str,
    tokenizer: str | None = None,
    api_key: str | None = None,
    timeout_s: float = 600.0,
    metrics_path: str | None = "/metrics",
    host: str = "127.0.0.1",
    cache_reset: CacheReset | None = None,
    telemetry: TelemetrySpec | None = None,
) -> LoadgenSpec:
    """The ``loadgen`` verb's spec (see ``orchestrator/remote/loadgen.py``) for one run.

    ``duration_s`` replaces ``num_prompts`` when set. With a ``request_rate`` (open loop) the
    concurrency is a cap on requests in flight only when the run wrote one (see
    ``WorkloadSpec.open_loop_cap``): a closed-loop setting must not throttle the rate.

    ``tokenizer`` (the run's model id or path) lets the host make random prompts of an exact
    token length and count tokens when the server sends no per-chunk usage.

    ``cache_reset`` (``Engine.cache_reset``): the request that empties the server's prefix cache
    before this measurement's first request; the result's ``cache_reset`` says how it went.

    ``telemetry``: the GPUs to sample around the window (the result's ``telemetry``).
    """
    w = workload
    num_prompts = None if w.duration_s is not None else w.num_prompts
    if prompts.is_random:
        num = w.warmup + (num_prompts or RANDOM_POOL)
        source = PromptSource(
            kind="random",
            input_len=prompts.input_len,
            num=num,
            tokenizer=tokenizer,
            range_ratio=0.0,
        )
    else:
        num = w.warmup + (num_prompts or len(prompts.items))
        source = PromptSource(kind="list", items=list(prompts.sample(num, seed=w.seed)))
    return LoadgenSpec(
        base_url=f"http://{host}:{port}",
        api=w.api,
        model=served_name,
        prompts=source,
        num_prompts=num_prompts,
        duration_s=w.duration_s,
        concurrency=w.point_concurrency if w.request_rate is None else w.open_loop_cap,
        request_rate=w.point_rate,
        burstiness=w.burstiness,
        ramp_s=w.ramp_s,
        max_tokens=w.max_tokens,
        temperature=w.temperature,
        ignore_eos=w.ignore_eos,
        chat_template_kwargs=w.chat_template_kwargs,
        warmup=w.warmup,
        seed=w.seed,
        timeout_s=timeout_s,
        api_key=api_key or None,
        tokenizer=tokenizer,
        metrics_path=metrics_path,
        cache_reset=(
            None
            if cache_reset is None
            else CacheResetSpec(path=cache_reset.path, method=cache_reset.method)
        ),
        telemetry=telemetry,
    )
