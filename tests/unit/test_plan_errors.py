"""Errors found while planning `orch run` (engine rules, prompt sources) point into the playbook:
file:line:column of the most specific value, key path ``runs[i]...`` by the playbook's own run
index, and what is wrong, like the schema's errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.commands.run import plan_run
from orchestrator.config import load_playbook
from orchestrator.engines.plan import spec_fields
from orchestrator.errors import ConfigError, SpecError

HOSTS = "hosts:\n  emb-1: {transport: embedded, gpus: 2 x RTX A6000}\n"
HEAD = "name: p\nhosts: [emb-1]\n"
GOOD = "  - name: ok\n    engine: vllm\n    model: m\n"

# (name, playbook text after HEAD, line, column, path, message)
CASES: list[tuple[str, str, int, int, str, str]] = [
    (
        "sglang-dflash-without-drafter",
        "runs:\n" + GOOD + "  - name: a\n"
        "    engine: sglang\n"
        "    model: m\n"
        "    speculative:\n"
        "      method: dflash\n"
        "      num_draft_tokens: 4\n",
        11,
        7,
        "runs[1].speculative",
        "DFLASH on SGLang needs a draft model path: set speculative.draft_model",
    ),
    (
        "vllm-mtp-with-drafter",
        "runs:\n"
        "  - name: a\n"
        "    engine: vllm\n"
        "    model: m\n"
        "    speculative: {method: mtp, num_draft_tokens: 2, draft_model: d}\n",
        7,
        66,
        "runs[0].speculative.draft_model",
        "speculative method 'mtp' on vllm uses the target model's own MTP head: remove "
        "speculative.draft_model",
    ),
    (
        "method-lacks-drafter",
        "runs:\n"
        "  - name: a\n"
        "    engine: vllm\n"
        "    model: m\n"
        "    speculative: {method: eagle, num_draft_tokens: 3}\n",
        7,
        27,
        "runs[0].speculative.method",
        "speculative method 'eagle' needs speculative.draft_model (the drafter's model id or path)",
    ),
    (
        "extra-args-typed-flag",
        "runs:\n"
        "  - name: a\n"
        "    engine: vllm\n"
        "    model: m\n"
        "    extra_args: [--max-num-seqs, '4', --tensor-parallel-size=2]\n",
        7,
        39,
        "runs[0].extra_args[2]",
        "extra_args sets --tensor-parallel-size, which orch sets from `tensor_parallel`",
    ),
    (
        "extra-args-host",
        "runs:\n" + GOOD + "  - name: a\n"
        "    engine: sglang\n"
        "    model: m\n"
        "    extra_args:\n"
        "      - --host\n"
        "      - 0.0.0.0\n",
        11,
        9,
        "runs[1].extra_args[0]",
        "extra_args sets --host 0.0.0.0: engines always bind 127.0.0.1 (orch reaches them "
        "through the host's loopback)",
    ),
    (
        "options-clash",
        "runs:\n"
        "  - name: a\n"
        "    engine: vllm\n"
        "    model: m\n"
        "    speculative:\n"
        "      method: ngram\n"
        "      num_draft_tokens: 3\n"
        "      options: {num_speculative_tokens: 4}\n",
        10,
        41,
        "runs[0].speculative.options.num_speculative_tokens",
        "speculative.options.num_speculative_tokens is set by orch from "
        "speculative.num_draft_tokens",
    ),
    (
        "lookup-on-wrong-method",
        "runs:\n"
        "  - name: a\n"
        "    engine: vllm\n"
        "    model: m\n"
        "    speculative: {method: eagle, draft_model: d, num_draft_tokens: 3,\n"
        "                  prompt_lookup_min: 2}\n",
        8,
        38,
        "runs[0].speculative.prompt_lookup_min",
        "prompt_lookup_min/max apply to method 'ngram', not 'eagle'",
    ),
    (
        "matrix-combination",
        "runs:\n"
        "  - name: c\n"
        "    engine: vllm\n"
        "    model: m\n"
        "    speculative: {method: dflash, draft_model: d, num_draft_tokens: 3}\n"
        "    matrix: {speculative.method: [dflash, ngram]}\n",
        7,
        48,
        "runs[0].speculative.draft_model",
        "speculative method 'ngram' drafts from the prompt: remove speculative.draft_model "
        "(in matrix run 'c[method=ngram]')",
    ),
    (
        "from-defaults",
        "defaults:\n"
        "  speculative: {eagle_topk: 2}\n"
        "runs:\n"
        "  - name: a\n"
        "    engine: vllm\n"
        "    model: m\n",
        4,
        29,
        "defaults.speculative.eagle_topk",
        "speculative.eagle_topk is an SGLang setting; vllm drafts one chain (in run 'a')",
    ),
    (
        "unknown-builtin-prompts",
        "runs:\n" + GOOD + "  - name: bad\n"
        "    engine: vllm\n"
        "    model: m\n"
        "    workload:\n"
        "      prompts: builtin:chatt\n",
        11,
        16,
        "runs[1].workload.prompts",
        "unknown built-in prompt set 'chatt'",
    ),
    (
        "missing-prompt-file-in-defaults",
        "defaults:\n  workload: {prompts: nope.jsonl}\nruns:\n" + GOOD,
        4,
        23,
        "defaults.workload.prompts",
        "prompt file {dir}/nope.jsonl does not exist (in run 'ok')",
    ),
    (
        "bad-prompt-line-in-a-matrix-run",
        "runs:\n"
        "  - name: m\n"
        "    engine: vllm\n"
        "    model: m\n"
        "    workload: {prompts: bad.jsonl}\n"
        "    matrix: {workload.concurrency: [1, 2]}\n",
        7,
        25,
        "runs[0].workload.prompts",  # no combination to blame: the runs share the file
        "{dir}/bad.jsonl:2: no prompt found among keys ['question']",
    ),
    (
        "matrix-over-prompts",
        "runs:\n"
        "  - name: m\n"
        "    engine: vllm\n"
        "    model: m\n"
        "    matrix:\n"
        "      workload.prompts:\n"
        "        - builtin:chat\n"
        "        - builtin:nope\n",
        10,
        11,
        "runs[0].matrix.workload.prompts[1]",
        "unknown built-in prompt set 'nope'",
    ),
    (
        "random-without-input-len",
        "runs:\n  - name: a\n    engine: vllm\n    model: m\n    workload: {prompts: random}\n",
        7,
        25,
        "runs[0].workload.prompts",
        "random prompts need input_len (a positive number of tokens), got None",
    ),
]


@pytest.mark.parametrize(
    ("name", "text", "line", "column", "path", "message"), CASES, ids=[c[0] for c in CASES]
)
def test_planning_error_is_located_in_the_playbook(
    tmp_path: Path, name: str, text: str, line: int, column: int, path: str, message: str
) -> None:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    (tmp_path / "bad.jsonl").write_text('{"prompt": "fine"}\n{"question": "where?"}\n')
    play = tmp_path / "play.yaml"
    play.write_text(HEAD + text)
    with pytest.raises(ConfigError) as info:
        plan_run(play, tmp_path / "hosts.yaml", None)
    err = info.value
    expected = message.format(dir=tmp_path)
    assert (err.file, err.line, err.column, err.path, err.message) == (
        str(play),
        line,
        column,
        path,
        expected,
    )
    assert str(err) == f"{play}:{line}:{column}: {path}: {expected}"


def test_hint_is_kept(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    play = tmp_path / "play.yaml"
    play.write_text(HEAD + CASES[3][1])
    with pytest.raises(ConfigError) as info:
        plan_run(play, tmp_path / "hosts.yaml", None)
    assert info.value.hint == (
        "set `tensor_parallel` in the run instead of passing --tensor-parallel-size in extra_args"
    )


def test_the_field_is_data_not_read_from_the_message(tmp_path: Path) -> None:
    told = SpecError("speculative.draft_model is missing", run="a", field=("engine",))
    assert spec_fields(told) == ["engine"]
    assert spec_fields(SpecError("speculative.draft_model is named here", run="a")) == []
    item = SpecError("extra_args sets --port", run="a", field=("extra_args", 3))
    assert spec_fields(item) == ["extra_args.3"]
    play = tmp_path / "play.yaml"
    play.write_text(HEAD + CASES[0][1])
    book = load_playbook(play)
    run = book.expand()[1]
    err = book.error_at(run, spec_fields(told), told.message)
    assert (err.line, err.path) == (8, "runs[1].engine")


def test_programmatic_playbook_error_has_a_path(tmp_path: Path) -> None:
    from orchestrator.config import Playbook, RunSpec

    run = RunSpec(
        name="a",
        engine="sglang",
        model="m",
        speculative={"method": "dflash", "num_draft_tokens": 3},
    )
    playbook = Playbook(name="p", runs=[run])
    err = playbook.error_at(run, ["speculative.draft_model"], "needs a drafter")
    assert (err.file, err.line, err.path, err.message) == (
        None,
        None,
        "runs[0].speculative.draft_model",
        "needs a drafter",
    )
