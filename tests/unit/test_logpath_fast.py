"""The log path a batch at a time (see ``benchmarks/logpath.py``) gives exactly what one line
at a time gave: the lines of each read of the log as one wire event, their text as decoding
each line gave it, masking (only the lines that need it go through ``mask``), parsing, and
``_follow``'s one write per batch to server.log and events.jsonl."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.agent.fake import FakeAgent, FakeLog
from orchestrator.config import RunSpec
from orchestrator.config.hostconfig import Secrets, mask, mask_lines
from orchestrator.engines import engine_for
from orchestrator.engines.logs import LogFollower
from orchestrator.metrics.sglang_log import DecodeBatchEvent
from orchestrator.metrics.vllm_log import SpecDecodeEvent
from orchestrator.remote import codec, lifecycle
from orchestrator.remote import main as agent_main
from orchestrator.remote.wire import (
    CONTRACT_VERSION,
    TailHeartbeat,
    TailLines,
    TailSpec,
    WireError,
)
from orchestrator.results.store import AppendLog
from orchestrator.runner.execute import _follow
from orchestrator.runner.progress import LatestAcceptance, RecordingObserver
from orchestrator.runner.server import Server
from orchestrator.runner.state import LiveState, RunJob

V = CONTRACT_VERSION
STATS = (
    "(APIServer pid={}) INFO 12-02 10:57:11 [loggers.py:123] Engine 000: Avg prompt throughput: "
    "1234.5 tokens/s, Avg generation throughput: 567.8 tokens/s, Running: 12 reqs, Waiting: 0 "
    "reqs, GPU KV cache usage: 34.5%, Prefix cache hit rate: 12.3%"
)
SPEC = (
    "INFO 12-02 10:57:11 [metrics.py:1] SpecDecoding metrics: Mean acceptance length: 2.50, "
    "Accepted: 30 tokens, Drafted: 40 tokens, Per-position acceptance rate: 0.800, 0.700"
)
RECEIVED = (
    "INFO 12-02 10:57:11 [logger.py:41] Received request chatcmpl-5b3c: prompt: 'Hi', params: "
    "SamplingParams(n=1, temperature=0.7, stop=[], stop_token_ids=[], max_tokens=256)"
)
ACCESS = 'INFO:     127.0.0.1:40334 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
LONG = "hf_Zx81LongSecretValue"  # 8+ characters: hidden wherever it appears


class Recorder:
    """A stream that keeps every write and flush, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def write(self, text: str) -> None:
        self.calls.append(("write", text))

    def flush(self) -> None:
        self.calls.append(("flush", ""))


# -- the wire ----------------------------------------------------------------------------------


def test_flat_records_decode_and_encode_as_the_general_walk_does() -> None:
    assert TailHeartbeat.from_json({"offset": 3}) == TailHeartbeat(offset=3)
    assert TailHeartbeat(offset=3).to_json() == {"offset": 3}
    raw = {"workdir": "/w", "run_id": "r", "idle_timeout_s": 5, "poll_interval_s": 1}
    spec = TailSpec.from_json(raw)
    assert spec == codec._decode(TailSpec, raw, "TailSpec")
    assert type(spec.idle_timeout_s) is float and type(spec.poll_interval_s) is float
    assert spec.to_json() == {
        "workdir": "/w",
        "run_id": "r",
        "offset": 0,
        "follow": False,
        "until_exit": False,
        "idle_timeout_s": 5.0,
        "poll_interval_s": 1.0,
    }
    assert TailSpec.from_json({"workdir": "/w", "run_id": "r"}).idle_timeout_s is None


def test_a_batch_of_lines_round_trips() -> None:
    raw = {"offset": 10, "next": 25, "lines": ["INFO é", ""]}
    batch = TailLines.from_json(raw)
    assert batch == TailLines(offset=10, next=25, lines=["INFO é", ""])
    assert batch.to_json() == raw and batch.lines is not raw["lines"]
    assert TailLines.from_json({"offset": 0, "next": 0, "lines": []}).lines == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"offset": "1", "next": 2, "lines": ["t"]}, "TailLines.offset: expected an integer, got the string '1'"),
        ({"offset": 1, "next": 2, "lines": ["t", 3]}, "TailLines.lines[1]: expected a string, got the number 3"),
        ({"offset": 1, "next": 2, "lines": [None]}, "TailLines.lines[0]: expected a string, got null"),
        ({"offset": 1, "next": 2, "lines": "t"}, "TailLines.lines: expected an array, got the string 't'"),
        ({"offset": 1, "next": 2}, "TailLines: missing field 'lines'"),
        ({"offset": 1, "next": 2, "lines": [], "x": 0}, "TailLines: unknown field 'x'"),
        ([1, 2, ["t"]], "TailLines: expected an object, got an array"),
    ],
)  # fmt: skip
def test_a_batch_that_does_not_fit_is_refused_naming_the_field(raw: Any, message: str) -> None:
    with pytest.raises(WireError) as caught:
        TailLines.from_json(raw)
    assert str(caught.value) == message


def test_a_batch_that_cannot_be_sent_is_refused() -> None:
    with pytest.raises(WireError) as caught:
        TailLines(offset=0, next=2, lines=["a", b"b"]).to_json()  # type: ignore[list-item]
    assert str(caught.value) == "TailLines.lines[1]: expected a string, got bytes"


def test_the_tail_verb_sends_each_read_of_the_log_as_one_event(tmp_path: Path) -> None:
    log = tmp_path / "work" / "runs" / "r1" / "server.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"one\r\ntwo\n\nthree")  # no server.json: nothing writes to it any more
    spec = tmp_path / "tail.json"
    spec.write_text(json.dumps({"v": V, "workdir": str(tmp_path / "work"), "run_id": "r1"}))
    out = Recorder()
    assert agent_main.run_verb(["tail", str(spec)], out) == 0
    writes = [json.loads(text) for kind, text in out.calls if kind == "write"]
    assert writes == [
        {"v": V, "event": "lines", "offset": 0, "next": 10, "lines": ["one", "two", ""]},
        {"v": V, "event": "lines", "offset": 10, "next": 15, "lines": ["three"]},
        {"v": V, "event": "result", "data": {"offset": 15, "reason": "exited", "exit": None}},
    ]
    assert [kind for kind, _ in out.calls] == ["write", "flush"] * 3


def test_a_line_cut_by_the_read_waits_for_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []
    rest, offset = lifecycle._emit_lines(b"ab\ncd", 7, sent.append)
    assert (rest, offset, sent) == (b"cd", 10, [TailLines(offset=7, next=10, lines=["ab"])])
    rest, offset = lifecycle._emit_lines(rest + b"e", offset, sent.append)
    assert (rest, offset, len(sent)) == (b"cde", 10, 1)  # no complete line: nothing sent


def _one_by_one(data: bytes) -> list[str]:
    """What the agent sent before batches: each line decoded on its own."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    return [line.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r") for line in lines]


PIECES = [b"a", b"\n", b"\r", b"\xe2\x82", b"\xac", b"\xff", "é".encode()]


@given(st.lists(st.sampled_from(PIECES), min_size=1))  # the agent never sends an empty read
@settings(max_examples=300, deadline=None)
def test_a_read_decoded_at_once_gives_each_line_as_decoded_alone(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    assert lifecycle._texts(data) == _one_by_one(data)


# -- masking -----------------------------------------------------------------------------------

SECRETS = Secrets({"1", "false", LONG, "zz9"}, standalone={"abc", "sk-standalone-key"})
FRAGMENTS = [
    "a", "x1", " ", "  ", ":", "=", "'", '"', "[", "]", ",", "-", "--api-key", "api_key",
    "hf_token", "API_KEY", "3KEY", "stop_token_ids", "password", "name", "abc", "1", "false",
    LONG, LONG[:6], "zz9", "sk-standalone-key", "é", "\t", "(", ")", "GOOGLE_CREDENTIALS",
    "db_Secret", "PASSWD", "İ",
]  # fmt: skip


@given(st.lists(st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join), max_size=8))
@settings(max_examples=500, deadline=None)
def test_masking_a_batch_gives_what_masking_each_line_gives(lines: list[str]) -> None:
    assert mask_lines(lines, SECRETS) == [mask(line, SECRETS) for line in lines]


NAMED = st.tuples(
    st.sampled_from(["", "İ", "é ", "args: {", "x=", "a_", "9"]),
    st.sampled_from(
        ["api_key", "GOOGLE_CREDENTIALS", "db_Secret", "PASSWD", "hf_token", "stop_token_ids",
         "max_tokens", "keyboard", "3KEY", "key_" + "x" * 300, "x" * 300 + "_key", "name"]
    ),
    st.sampled_from([":", "=", " : ", "'=", '": ', "\t=\t"]),
    st.sampled_from(["'v'", '"v"', "[]", "['a']", '["a", 2]', "[1", "'open", "None", "[1, 'b'"]),
    st.sampled_from(["", "]", ", x='y'", " '"]),
).map("".join)  # fmt: skip


@given(st.lists(NAMED, max_size=6))
@settings(max_examples=500, deadline=None)
def test_masking_a_batch_of_named_values_gives_what_masking_each_gives(lines: list[str]) -> None:
    assert mask_lines(lines, SECRETS) == [mask(line, SECRETS) for line in lines]


@pytest.mark.parametrize(
    ("line", "masked"),
    [
        (RECEIVED, RECEIVED),  # secret-looking stop_token_ids, but nothing quoted in its list
        (STATS.format(7), STATS.format(7)),
        (ACCESS, ACCESS),
        ("args: {'api_key': ['sk-x'], 'stop_token_ids': []}", "args: {'api_key': ['***'], 'stop_token_ids': []}"),
        ("hf_token = \"hf_abc\" model='m'", "hf_token = \"***\" model='m'"),
        (f"token {LONG} again {LONG}", "token *** again ***"),
        ("abc", "***"),
        ("--api-key=sk-standalone-key", "--api-key=***"),
        ("--api-key=abc and more", "--api-key=abc and more"),
        ('api_key=["a", 2]', 'api_key=["***", 2]'),
        ("api_key_" + "x" * 300 + "='v'", "api_key_" + "x" * 300 + "='***'"),  # a long name
        ("x" * 300 + "_api_key='v'", "x" * 300 + "_api_key='***'"),
        ("y" * 300 + ": 'v'", "y" * 300 + ": 'v'"),
    ],
)  # fmt: skip
def test_a_batch_masks_what_mask_masks(line: str, masked: str) -> None:
    assert mask(line, SECRETS) == masked
    assert mask_lines(["plain", line, ACCESS], SECRETS) == ["plain", masked, ACCESS]


def test_masking_an_empty_batch() -> None:
    assert mask_lines([], SECRETS) == []
    assert mask_lines(["abc"], Secrets()) == ["abc"]


# -- parsing -----------------------------------------------------------------------------------


def test_a_batch_parses_as_its_lines_one_by_one() -> None:
    sglang = "[2026-07-30 13:35:13 TP0] Decode batch, #running-req: 3, #token: 90, gen throughput (token/s): 50.00"
    lines = [
        ACCESS,
        STATS.format(1),
        "\x1b[32mINFO\x1b[0m " + SPEC,
        RECEIVED,
        "Avg prompt throughput: x",
        sglang,
    ]
    for engine in ("vllm", "sglang", "auto"):
        whole, alone = LogFollower(engine=engine), LogFollower(engine=engine)
        records = whole.feed_lines(lines)
        assert records == [r for line in lines if (r := alone.feed_line(line)) is not None]
        assert whole.summary() == alone.summary() and whole.line_no == alone.line_no == 6
    vllm = LogFollower(engine="vllm").feed_lines(lines)
    assert [(r.kind, r.line_no) for r in vllm] == [
        ("engine_stats", 2),
        ("spec_decode", 3),
        ("malformed", 5),
    ]
    coloured = sglang.replace("Decode batch", "\x1b[1mDecode\x1b[0m batch")
    [decode] = LogFollower(engine="sglang").feed_lines([ACCESS, coloured])
    assert isinstance(decode, DecodeBatchEvent) and decode.running_reqs == 3


def test_events_as_dicts_keep_the_shape_asdict_gave() -> None:
    spec = SpecDecodeEvent(line_no=4, accepted_tokens=3, per_position_acceptance=(0.5, None))
    decode = DecodeBatchEvent(line_no=9, running_reqs=2, cuda_graph=True, graph_backend="npu")
    for event in (spec, decode):
        wanted = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(event).items()}
        assert event.to_dict() == wanted
        assert list(event.to_dict()) == [f.name for f in fields(event)]
    assert spec.to_dict()["per_position_acceptance"] == [0.5, None]


# -- the controller's follow -------------------------------------------------------------------


class Writes:
    """An AppendLog that keeps each batch written."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def write_lines(self, lines: list[str]) -> None:
        self.batches.append(list(lines))


def test_follow_masks_writes_and_parses_a_batch_at_a_time() -> None:
    texts = [
        STATS.format(1),
        f"INFO api_key='{LONG}' ok",
        ACCESS,
        ACCESS,
        SPEC,
        STATS.format(2),
        "INFO done",
    ]
    run = RunSpec.model_validate({"name": "r1", "engine": "vllm", "model": "Qwen/Qwen3-8B"})
    agent = FakeAgent().always("tail", FakeLog(texts, per_event=3))
    server = Server(agent, host=agent.host, run=run, run_id="r1", port=8000, engine=engine_for(run))
    state = LiveState(follower=LogFollower(engine="vllm"), secrets=Secrets({LONG}))
    server_log, events = Writes(), Writes()
    observer = RecordingObserver()
    job = cast(RunJob, SimpleNamespace(key="k"))
    logs = cast(AppendLog, server_log), cast(AppendLog, events)
    asyncio.run(_follow(server, state, *logs, observer, job))
    masked = [texts[0], "INFO api_key='***' ok", *texts[2:]]
    assert server_log.batches == [masked[0:3], masked[3:6], masked[6:7]]
    assert state.head_lines == masked
    assert [[json.loads(row)["line_no"] for row in batch] for batch in events.batches] == [
        [1],
        [5, 6],
    ]
    assert [json.loads(row)["kind"] for row in events.batches[1]] == ["spec_decode", "engine_stats"]
    assert events.batches[1][0] == json.dumps(
        state.follower.events[1].to_dict(), ensure_ascii=False
    )
    assert observer.events == [LatestAcceptance("k", None), LatestAcceptance("k", 2.5)]
    assert server.tail_offset == sum(len(t.encode()) + 1 for t in texts)
