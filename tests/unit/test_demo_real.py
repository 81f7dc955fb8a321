"""`make demo-real`'s launcher (scripts/demo_real.py): the playbook it writes names the real
models, whatever their folder is called, and its host runs the real venv, on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import load_inventory, load_playbook
from scripts import demo_real
from scripts.demo_real import PLACEHOLDER, DemoError, fill_models, filled_playbook, write_inputs

PYTHON = Path("/opt/real vllm/venv/bin/python")


def model_folder(base: Path) -> Path:
    """The three tiny models' folders, with a name YAML would misread if pasted as text."""
    models = base / "models: #1"
    for name in demo_real.MODELS:
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text("{}")
    return models


def test_every_string_is_filled_in_and_nothing_else_changes() -> None:
    book = {"a": f"{PLACEHOLDER}/x", "b": [1, True, None, {"c": f"{PLACEHOLDER}/y"}], "d": "z"}
    assert fill_models(book, Path("/m")) == {"a": "/m/x", "b": [1, True, None, {"c": "/m/y"}], "d": "z"}  # fmt: skip


def test_the_written_playbook_names_the_real_models(tmp_path: Path) -> None:
    models = model_folder(tmp_path)
    book_file, hosts_file = write_inputs(models, PYTHON, folder=tmp_path / "out")
    assert PLACEHOLDER not in book_file.read_text()
    book = load_playbook(book_file)
    runs = {run.name: run for run in book.runs}
    assert list(runs) == ["ngram", "draft-model", "eagle3-broken"]
    assert {run.model for run in runs.values()} == {str(models / "tiny-model")}
    drafters = {name: (r.speculative.method, r.speculative.draft_model) for name, r in runs.items()}
    assert drafters == {
        "ngram": ("ngram", None),
        "draft-model": ("draft_model", str(models / "tiny-draft")),
        "eagle3-broken": ("eagle3", str(models / "tiny-eagle3")),
    }
    assert runs["eagle3-broken"].doctor == "warn"  # measured on purpose, like make demo's
    inventory = load_inventory(hosts_file)
    assert [h.name for h in book.hosts_for(book.runs[0], inventory)] == [demo_real.HOST]


def test_the_host_is_an_embedded_cpu_host_on_the_real_venv(tmp_path: Path) -> None:
    _, hosts_file = write_inputs(model_folder(tmp_path), PYTHON, folder=tmp_path / "out")
    (host,) = load_inventory(hosts_file).hosts.values()
    assert (host.transport, host.python, host.cpu_only) == ("embedded", str(PYTHON), True)
    assert host.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and host.env["HF_HUB_OFFLINE"] == "1"


def test_missing_models_and_a_playbook_without_placeholder_are_errors(tmp_path: Path) -> None:
    text = demo_real.PLAYBOOK.read_text()
    with pytest.raises(DemoError, match=r"lacks tiny-model, tiny-draft, tiny-eagle3"):
        filled_playbook(text, tmp_path / "empty")
    with pytest.raises(DemoError, match="names no"):
        filled_playbook(text.replace(PLACEHOLDER, "/fixed"), model_folder(tmp_path))
