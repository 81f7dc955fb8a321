"""`orch run` reads and validates prompt files while planning: before any host is touched, and
under --dry-run too."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from orchestrator.cli.main import run as run_cli
from orchestrator.commands.run import plan_run, run_folders

HOSTS = """\
hosts:
  emb-1: {transport: embedded, gpus: 2 x RTX A6000}
"""
PLAYBOOK = """\
name: prompts
hosts: [emb-1]
runs:
  - name: plain
    engine: vllm
    model: Qwen/Qwen3.6-27B
    workload: {prompts: prompts.jsonl, num_prompts: 4, max_tokens: 8}
    matrix: {workload.concurrency: [1, 2]}
"""


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(list(args))
    return code, out.getvalue(), " ".join(err.getvalue().split())  # rich wraps long lines


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_EMBEDDED_ROOT", str(tmp_path / "embedded"))
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    (tmp_path / "play.yaml").write_text(PLAYBOOK)
    return tmp_path


BAD_LINE = '{"prompt": "fine"}\n\n{"prompt": "a broken line"\n'


@pytest.mark.parametrize("dry_run", [True, False])
def test_bad_jsonl_line_fails_before_any_host_is_touched(workdir: Path, dry_run: bool) -> None:
    (workdir / "prompts.jsonl").write_text(BAD_LINE)
    args = [
        "run",
        str(workdir / "play.yaml"),
        "--hosts",
        str(workdir / "hosts.yaml"),
        "--results",
        str(workdir / "results"),
    ]
    code, out, err = cli(*args, *(["--dry-run"] if dry_run else []))
    assert code == 2, err
    assert out == ""  # not one argv printed
    # located at the playbook's line naming the file; the file's own line in the message
    assert err.startswith(
        f"config error: {workdir / 'play.yaml'}:7:25: runs[0].workload.prompts: "
        f"{workdir / 'prompts.jsonl'}:3: not valid JSON: Expecting ',' "
        "delimiter (column 27) hint: the file needs one JSON record per line"
    )
    assert "Traceback" not in err
    assert not (workdir / "embedded").exists(), "a host was reached before the prompts were read"
    assert not (workdir / "results").exists()


def test_missing_prompt_file_names_the_run_and_the_file(workdir: Path) -> None:
    code, _, err = cli(
        "run", str(workdir / "play.yaml"), "--hosts", str(workdir / "hosts.yaml"), "--dry-run"
    )
    assert code == 2
    assert err == (
        f"config error: {workdir / 'play.yaml'}:7:25: runs[0].workload.prompts: "
        f"prompt file {workdir / 'prompts.jsonl'} does not exist "
        "hint: paths are relative to the playbook's directory"
    )


def test_skipped_entries_are_a_console_note(workdir: Path) -> None:
    lines = [
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
        {"conversations": [{"from": "gpt", "value": "no human turn"}]},
        {"conversations": [{"from": "system", "value": "neither"}]},
        {"prompt": "plain"},
    ]
    (workdir / "prompts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, out, err = cli(
        "run",
        str(workdir / "play.yaml"),
        "--hosts",
        str(workdir / "hosts.yaml"),
        "--dry-run",
        "--json",
    )
    assert code == 0, err
    assert [r["run"] for r in json.loads(out)["runs"]] == [
        "plain[concurrency=1]",
        "plain[concurrency=2]",
    ]
    # once per file, not once per run sharing it
    assert err.count("entries skipped") == 1
    assert (
        f"note: prompts {workdir / 'prompts.jsonl'}: 2 entries skipped (no usable prompt, "
        "e.g. a ShareGPT conversation without a human turn); 2 used"
    ) in err


def test_plan_reads_each_source_once(workdir: Path) -> None:
    (workdir / "prompts.jsonl").write_text('{"prompt": "a"}\n"b"\n')
    plan = plan_run(workdir / "play.yaml", workdir / "hosts.yaml", None)
    assert [p.run_name for p in plan.plans] == ["plain[concurrency=1]", "plain[concurrency=2]"]
    first, second = plan.prompts
    assert first is second  # matrix runs share the read
    assert first.items == ("a", "b") and first.skipped == 0
    assert first.source == f"file:{workdir / 'prompts.jsonl'}"


def test_run_folders_never_collide() -> None:
    long = "r" * 97  # cut at 100 characters: the matrix values are lost
    keys = ["a[x=1]@h", "a_x_1@h", f"{long}[c=1]@h", f"{long}[c=2]@h", "b@h", "a_x_1_h-2@h"]
    assert run_folders(keys) == [
        "a_x_1_h",
        "a_x_1_h-2",
        long + "_c",
        long + "_c-2",
        "b_h",
        "a_x_1_h-2_h",
    ]
    assert run_folders(["z@h", "z@h", "z_h-2"]) == ["z_h", "z_h-2", "z_h-2-2"]
