"""Prompt sources: every JSONL shape, ShareGPT (JSONL and .json arrays), errors with file and line,
seeded sampling, and the open-loop concurrency cap in the ``loadgen`` spec."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from orchestrator.config.playbook import WorkloadSpec
from orchestrator.errors import ConfigError
from orchestrator.loadgen.prompts import (
    BUILTIN_NAMES,
    RANDOM_POOL,
    build_loadgen_spec,
    load_prompts,
    parse_prompt_lines,
    sample_items,
)
from orchestrator.remote.wire import LoadgenSpec, PromptSource


def workload_of(**fields: object) -> WorkloadSpec:
    return WorkloadSpec.model_validate(fields)


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]

SHAPES = [
    ({"prompt": "What is 2+2?"}, "What is 2+2?"),
    ({"text": "Once upon a time"}, "Once upon a time"),
    ({"messages": MESSAGES}, {"messages": MESSAGES}),
    (
        {
            "conversations": [
                {"from": "human", "value": "first"},
                {"from": "gpt", "value": "reply"},
                {"from": "human", "value": "second"},
            ]
        },
        "first",
    ),
    (
        {
            "conversations": [
                {"from": "system", "value": "sys"},
                {"from": "gpt", "value": "hello"},
                {"from": "human", "value": "question"},
            ]
        },
        "question",
    ),
    ({"id": "x", "conversations": [{"from": "user", "value": "as user"}]}, "as user"),
    ("a bare JSON string", "a bare JSON string"),
]


@pytest.mark.parametrize(("record", "expected"), SHAPES)
def test_each_record_shape(tmp_path: Path, record, expected):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(record) + "\n")
    ps = load_prompts(workload_of(prompts="p.jsonl"), base_dir=tmp_path)
    assert ps.items == (expected,)
    assert ps.source == f"file:{path}"
    assert not ps.is_random


def test_mixed_file_with_blank_lines_and_sharegpt_without_human_turn(tmp_path: Path):
    lines = [json.dumps(r) for r, _ in SHAPES[:4]]
    lines.insert(2, "")
    lines.append(json.dumps({"conversations": [{"from": "gpt", "value": "no question here"}]}))
    (tmp_path / "mixed.jsonl").write_text("\n".join(lines) + "\n")
    ps = load_prompts(workload_of(prompts=str(tmp_path / "mixed.jsonl")), base_dir="/nonexistent")
    assert ps.items == tuple(expected for _, expected in SHAPES[:4])
    assert ps.skipped == 1


def test_sharegpt_json_array_file(tmp_path: Path):
    data = [
        {
            "id": "a",
            "conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"}],
        },
        {"id": "b", "conversations": [{"from": "human", "value": "q2"}]},
    ]
    (tmp_path / "sg.json").write_text(json.dumps(data, indent=2))
    assert load_prompts(workload_of(prompts="sg.json"), base_dir=tmp_path).items == ("q1", "q2")


BAD_FILES = [
    ('{"prompt": "ok"}\n{"prompt": "ok too"}\n{"prompt": "unterminated\n', 3, "not valid JSON"),
    ('{"prompt": "ok"}\n{"question": "where?"}\n', 2, "no prompt found among keys ['question']"),
    ('{"prompt": ""}\n', 1, "'prompt' must be a non-empty string"),
    ('\n\n{"messages": []}\n', 3, "'messages' must be a non-empty list"),
    ('{"messages": [{"role": "user"}]}\n', 1, "messages[0] must be an object"),
    ('{"conversations": "human: hi"}\n', 1, "'conversations' must be a list"),
    ("[1, 2]\n", 1, "item 0: expected a JSON object, got int"),
    ("42\n", 1, "expected a JSON object, got int"),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD_FILES)
def test_bad_file_names_file_and_line(tmp_path: Path, text, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_prompts(workload_of(prompts="bad.jsonl"), base_dir=tmp_path)
    err = info.value
    assert err.file == str(path)
    assert err.line == line
    assert message in err.message
    if line is not None:
        assert str(err).startswith(f"{path}:{line}: ")


# a .json file holding one array: every error names the line its record starts on
ARRAY_BAD_FILES = [
    (
        '[\n  {"prompt": "one"},\n  {"prompt": "two"},\n  {"question": "three"}\n]\n',
        4,
        "item 2: no prompt found among keys ['question']",
    ),
    (
        '[\n  {"prompt": "one"},\n  {\n    "messages": []\n  }\n]',
        3,
        "item 1: 'messages' must be a non-empty list",
    ),
    ('[\n  {"prompt": "a"},\n  {"prompt": "b",\n]\n', 4, "not valid JSON: Expecting property name"),
    ('[\n  {"prompt": "a"}\n  {"prompt": "b"}\n]\n', 3, "expected ',' or ']' after item 0"),
    ('[\n  {"prompt": "a"},\n', 3, "not valid JSON: Expecting value"),
    ('[{"prompt": "a"}]\n\n{"prompt": "b"}\n', 3, "more data after the array's closing ']'"),
    ('[\n  {"prompt": "a"},\n]', 3, "not valid JSON: Expecting value"),
]


@pytest.mark.parametrize(("text", "line", "message"), ARRAY_BAD_FILES)
def test_bad_json_array_names_file_and_line(tmp_path: Path, text, line, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_prompts(workload_of(prompts="bad.json"), base_dir=tmp_path)
    assert (info.value.file, info.value.line) == (str(path), line)
    assert message in info.value.message
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_json_file_is_read_by_its_content(tmp_path: Path):
    """``.json`` may hold JSONL (one record per line) or an array; ``.jsonl`` an array too."""
    records = [{"prompt": "p1"}, {"messages": MESSAGES}, {"conversations": [{"from": "gpt"}]}]
    expected = ("p1", {"messages": MESSAGES})
    (tmp_path / "lines.json").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "array.jsonl").write_text("\n  " + json.dumps(records, indent=1))
    (tmp_path / "bom.json").write_text(json.dumps(records), encoding="utf-8-sig")
    for name in ("lines.json", "array.jsonl", "bom.json"):
        ps = load_prompts(workload_of(prompts=name), base_dir=tmp_path)
        assert (ps.items, ps.skipped) == (expected, 1), name
    (tmp_path / "empty.json").write_text(" [ ] ")
    with pytest.raises(ConfigError, match=r"holds no usable prompt \(0 entries skipped\)"):
        load_prompts(workload_of(prompts="empty.json"), base_dir=tmp_path)
    (tmp_path / "object.json").write_text('{\n  "prompt": "pretty-printed"\n}\n')
    with pytest.raises(ConfigError, match="not valid JSON") as info:
        load_prompts(workload_of(prompts="object.json"), base_dir=tmp_path)
    assert info.value.line == 1 and "single JSON array of records" in info.value.hint


def test_line_separators_inside_json_strings_do_not_split_records(tmp_path: Path):
    """U+2028 and friends are legal raw inside JSON strings; only "\\n" ends a JSONL record."""
    prompts = ["a\u2028b", "c\x85d\u2029e", "f\x1cg"]
    text = "".join(json.dumps({"prompt": p}, ensure_ascii=False) + "\r\n" for p in prompts)
    (tmp_path / "seps.jsonl").write_text(text, encoding="utf-8", newline="")
    assert load_prompts(workload_of(prompts="seps.jsonl"), base_dir=tmp_path).items == tuple(
        prompts
    )


def test_missing_and_empty_files(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_prompts(workload_of(prompts="nope.jsonl"), base_dir=tmp_path)
    assert info.value.file == str(tmp_path / "nope.jsonl")
    assert "relative to the playbook" in info.value.hint
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ConfigError, match="holds no usable prompt"):
        load_prompts(workload_of(prompts="empty.jsonl"), base_dir=tmp_path)


def test_builtin_sets_are_real_and_varied():
    sizes = {}
    for name in BUILTIN_NAMES:
        ps = load_prompts(workload_of(prompts=f"builtin:{name}"), base_dir=".")
        assert ps.source == f"builtin:{name}"
        assert len(set(map(json.dumps, ps.items))) == len(ps.items)  # no duplicates
        sizes[name] = len(ps.items)
    assert all(20 <= sizes[n] <= 30 for n in ("chat", "code", "math"))
    assert sizes["mixed"] == sizes["chat"] + sizes["code"] + sizes["math"]
    lengths = [
        len(json.dumps(i))
        for i in load_prompts(workload_of(prompts="builtin:mixed"), base_dir=".").items
    ]
    assert max(lengths) > 5 * min(lengths)
    chat = load_prompts(workload_of(prompts="builtin:chat"), base_dir=".").items
    assert any(isinstance(i, dict) for i in chat) and any(isinstance(i, str) for i in chat)


def test_unknown_builtin_and_random_without_length():
    with pytest.raises(ConfigError, match="unknown built-in prompt set 'poetry'") as info:
        load_prompts(workload_of(prompts="builtin:poetry"), base_dir=".")
    assert "builtin:mixed" in info.value.hint
    with pytest.raises(ConfigError, match="input_len"):
        load_prompts(workload_of(prompts="random"), base_dir=".")
    ps = load_prompts(workload_of(prompts="random", input_len=128), base_dir=".")
    assert ps.is_random and ps.input_len == 128 and ps.items == ()


def test_sampling_is_seeded_and_cycles_evenly():
    items = tuple(f"p{i}" for i in range(7))
    a = sample_items(items, 21, seed=3)
    assert a == sample_items(items, 21, seed=3)
    assert a != sample_items(items, 21, seed=4)
    assert Counter(a) == Counter({i: 3 for i in items})
    assert a[:7] == a[7:14] == a[14:]  # one shuffle, cycled
    assert sorted(a[:7]) == sorted(items)
    assert sample_items((), 5, seed=0) == []


def test_parse_lines_is_pure():
    items, skipped = parse_prompt_lines(['{"prompt": "a"}', "", '{"text": "b"}'], file="<mem>")
    assert (items, skipped) == (["a", "b"], 0)


def test_build_loadgen_spec_from_a_list():
    workload = workload_of(
        prompts="builtin:math",
        num_prompts=40,
        warmup=2,
        seed=7,
        concurrency=4,
        max_tokens=256,
        temperature=0.0,
        ignore_eos=True,
        api="completions",
        chat_template_kwargs={"enable_thinking": False},
    )
    ps = load_prompts(workload, base_dir=".")
    spec = build_loadgen_spec(
        workload, ps, port=8123, served_name="qwen", tokenizer="Qwen/Qwen3.6-27B", api_key="sk-1"
    )
    assert spec == LoadgenSpec(
        base_url="http://127.0.0.1:8123",
        model="qwen",
        api="completions",
        prompts=PromptSource(kind="list", items=sample_items(ps.items, 42, seed=7)),
        num_prompts=40,
        duration_s=None,
        warmup=2,
        concurrency=4,
        request_rate=None,
        burstiness=1.0,
        max_tokens=256,
        temperature=0.0,
        ignore_eos=True,
        seed=7,
        chat_template_kwargs={"enable_thinking": False},
        timeout_s=600.0,
        tokenizer="Qwen/Qwen3.6-27B",
        api_key="sk-1",
        metrics_path="/metrics",
    )
    assert LoadgenSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_build_loadgen_spec_random_and_duration():
    workload = workload_of(
        prompts="random",
        input_len=512,
        duration_s=30,
        request_rate=5.0,
        burstiness=0.5,
        warmup=1,
    )
    spec = build_loadgen_spec(
        workload, load_prompts(workload, base_dir="."), port=1, served_name="m"
    )
    assert spec.prompts == PromptSource(
        kind="random", input_len=512, num=1 + RANDOM_POOL, tokenizer=None, range_ratio=0.0
    )
    assert (spec.num_prompts, spec.duration_s, spec.request_rate, spec.burstiness) == (
        None,
        30,
        5.0,
        0.5,
    )
    assert spec.concurrency is None  # an open loop the run did not cap
    assert spec.api_key is None


def test_build_loadgen_spec_from_the_playbook_model(tmp_path: Path):
    (tmp_path / "mine.jsonl").write_text('{"prompt": "one"}\n{"prompt": "two"}\n')
    closed = WorkloadSpec.model_validate(
        {"prompts": "mine.jsonl", "num_prompts": 3}, context={"base_dir": str(tmp_path)}
    )
    ps = load_prompts(closed, base_dir="/elsewhere")  # the model already made the path absolute
    assert ps.items == ("one", "two")
    spec = build_loadgen_spec(closed, ps, port=9, served_name="m")
    assert (spec.concurrency, spec.request_rate, spec.num_prompts) == (1, None, 3)
    assert len(spec.prompts.items) == closed.warmup + 3
    # open loop: the closed-loop default concurrency of 1 must not cap it; a written one does
    open_loop = WorkloadSpec.model_validate({"request_rate": 4.0, "duration_s": 10})
    spec = build_loadgen_spec(
        open_loop, load_prompts(open_loop, base_dir="."), port=9, served_name="m"
    )
    assert (spec.concurrency, spec.request_rate, spec.num_prompts, spec.duration_s) == (
        None,
        4.0,
        None,
        10,
    )
    capped = WorkloadSpec.model_validate({"request_rate": 4.0, "concurrency": 2})
    spec = build_loadgen_spec(capped, load_prompts(capped, base_dir="."), port=9, served_name="m")
    assert (spec.concurrency, spec.num_prompts) == (2, 64)


def test_build_loadgen_spec_caps_an_open_loop_only_with_the_runs_own_concurrency(tmp_path: Path):
    from orchestrator.config import load_playbook

    (tmp_path / "p.yaml").write_text(
        "name: p\n"
        "defaults: {workload: {concurrency: 8, num_prompts: 5}}\n"
        "runs:\n"
        "  - {name: closed, engine: vllm, model: m}\n"
        "  - {name: open, engine: vllm, model: m, workload: {request_rate: 50}}\n"
        "  - {name: capped, engine: vllm, model: m, workload: {request_rate: 50, concurrency: 2}}\n"
    )
    specs = {}
    for run in load_playbook(tmp_path / "p.yaml").expand():
        ps = load_prompts(run.workload, base_dir=tmp_path)
        spec = build_loadgen_spec(run.workload, ps, port=9, served_name="m")
        specs[run.name] = (spec.concurrency, spec.request_rate)
    assert specs == {"closed": (8, None), "open": (None, 50), "capped": (2, 50)}
