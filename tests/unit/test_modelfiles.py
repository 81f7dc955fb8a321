"""The agent verb `read_model_configs` on real directory layouts (local dirs, HF cache)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.remote import modelfiles
from orchestrator.remote.main import run_verb
from orchestrator.remote.modelfiles import cache_folder_name, hub_dirs, read_model
from orchestrator.remote.protocol import AgentFailure
from orchestrator.remote.wire import CONTRACT_VERSION

CONFIG = {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 36, "vocab_size": 151936}
TOKENIZER = {"added_tokens_decoder": {"151643": {"content": "<|endoftext|>", "special": True}}}


def write(directory: Path, files: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content)
        (directory / name).write_text(text)
    return directory


def hf_cache(
    hub: Path, model_id: str, snapshots: dict[str, dict[str, Any]], main: str | None
) -> Path:
    """huggingface_hub's layout: blobs hold the bytes, snapshots/<rev>/ holds symlinks to them."""
    repo = hub / cache_folder_name(model_id)
    (repo / "blobs").mkdir(parents=True)
    for mtime, (revision, files) in enumerate(snapshots.items(), start=1):
        snap = repo / "snapshots" / revision
        snap.mkdir(parents=True)
        for name, content in files.items():
            blob = repo / "blobs" / f"{revision}-{name}"
            blob.write_text(json.dumps(content) if not isinstance(content, str) else content)
            (snap / name).symlink_to(os.path.relpath(blob, snap))
        os.utime(snap, (1_700_000_000 + mtime, 1_700_000_000 + mtime))
    if main is not None:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(main)
    return repo


def test_cache_folder_name() -> None:
    assert cache_folder_name("Qwen/Qwen3-8B") == "models--Qwen--Qwen3-8B"
    assert cache_folder_name("gpt2") == "models--gpt2"


def test_hub_dirs_precedence(tmp_path: Path) -> None:
    env = {"HF_HUB_CACHE": str(tmp_path / "hubcache"), "HF_HOME": str(tmp_path / "home")}
    assert hub_dirs(str(tmp_path / "spec"), env) == [
        str(tmp_path / "spec" / "hub"),
        str(tmp_path / "hubcache"),
        str(tmp_path / "home" / "hub"),
        os.path.expanduser("~/.cache/huggingface/hub"),
    ]
    assert hub_dirs(None, {}) == [os.path.expanduser("~/.cache/huggingface/hub")]


def test_hf_cache_follows_refs_main(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    old = dict(CONFIG, num_hidden_layers=28)
    hf_cache(
        hub,
        "Qwen/Qwen3-8B",
        {
            "aaa111": {
                "config.json": CONFIG,
                "tokenizer_config.json": TOKENIZER,
                "generation_config.json": {"temperature": 0.6},
            },
            "bbb222": {"config.json": old},
        },
        main="aaa111",
    )
    entry = read_model("Qwen/Qwen3-8B", None, [str(hub)])
    assert entry.to_json() == {
        "id": "Qwen/Qwen3-8B",
        "path": str(hub / "models--Qwen--Qwen3-8B" / "snapshots" / "aaa111"),
        "found": True,
        "config": CONFIG,
        "tokenizer_config": TOKENIZER,
        "generation_config": {"temperature": 0.6},
        "chat_template": None,
        "error": None,
    }


def test_hf_cache_without_refs_takes_the_newest_snapshot(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    newest = dict(CONFIG, num_hidden_layers=40)
    hf_cache(
        hub,
        "z-lab/Qwen3-8B-DFlash-b16",
        {"older": {"config.json": CONFIG}, "newer": {"config.json": newest}},
        main=None,
    )
    entry = read_model("z-lab/Qwen3-8B-DFlash-b16", None, [str(tmp_path / "empty"), str(hub)])
    assert entry.path is not None and entry.path.endswith("/snapshots/newer")
    assert entry.config == newest and entry.tokenizer_config is None and entry.error is None


def test_local_directory_and_chat_template(tmp_path: Path) -> None:
    model = write(
        tmp_path / "qwen", {"config.json": CONFIG, "chat_template.jinja": "{{ messages }}"}
    )
    by_path = read_model("Qwen/Qwen3-8B", str(model), [])
    assert by_path.found and by_path.path == str(model)
    assert by_path.chat_template == "{{ messages }}"
    by_id = read_model(str(model), None, [])
    assert by_id.config == CONFIG


def test_not_found_says_where_it_looked(tmp_path: Path) -> None:
    entry = read_model("Qwen/Nope", None, [str(tmp_path / "hub")])
    assert entry.found is False and entry.config is None
    assert (
        entry.error
        == f"not found (looked in Hugging Face cache {tmp_path / 'hub' / 'models--Qwen--Nope'})"
    )
    missing_path = read_model("x", str(tmp_path / "gone"), [])
    assert missing_path.error == f"not found (looked in path {tmp_path / 'gone'})"


def test_bad_and_large_files_are_reported_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(modelfiles, "MAX_FILE_BYTES", 100)
    model = write(
        tmp_path / "m",
        {
            "config.json": "{broken",
            "tokenizer_config.json": {"x": "y" * 200},
            "generation_config.json": [1, 2],
        },
    )
    entry = read_model("m", str(model), [])
    assert entry.found is True
    assert (entry.config, entry.tokenizer_config, entry.generation_config) == (None, None, None)
    assert entry.error is not None
    problems = entry.error.split("; ")
    assert problems[0].startswith("config.json: not valid JSON (")
    assert problems[1] == "tokenizer_config.json: too large (209 bytes > 100), skipped"
    assert problems[2] == "generation_config.json: holds a list, not an object"


def test_missing_config_json_is_an_error(tmp_path: Path) -> None:
    entry = read_model("m", str(write(tmp_path / "m", {"tokenizer_config.json": TOKENIZER})), [])
    assert entry.found is True and entry.config is None
    assert entry.error == "config.json: missing"
    assert entry.tokenizer_config == TOKENIZER


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"models": []},
        {"models": [{"path": "/x"}]},
        {"models": [{"id": "a", "path": 3}]},
        {"models": [{"id": "a"}], "hf_home": 5},
        {"models": "Qwen/Qwen3-8B"},
    ],
)
def test_bad_specs(spec: dict[str, Any]) -> None:
    with pytest.raises(AgentFailure) as info:
        modelfiles.run(spec, lambda _obj: None)
    assert info.value.kind == "bad_spec"


def test_verb_through_the_agent_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "hfhome"
    hf_cache(home / "hub", "Qwen/Qwen3-8B", {"abc": {"config.json": CONFIG}}, main="abc")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "v": CONTRACT_VERSION,
                "models": [
                    {"id": "Qwen/Qwen3-8B", "path": None},
                    {"id": "z-lab/missing", "path": None},
                ],
                "hf_home": None,
            }
        )
    )
    out = io.StringIO()
    assert run_verb(["read_model_configs", str(spec)], out) == 0
    (line,) = out.getvalue().splitlines()
    event = json.loads(line)
    assert (event["v"], event["event"]) == (CONTRACT_VERSION, "result")
    models = event["data"]["models"]
    assert models["Qwen/Qwen3-8B"]["config"] == CONFIG
    assert models["z-lab/missing"]["found"] is False
    assert not spec.exists()  # the agent deletes spec files once read
