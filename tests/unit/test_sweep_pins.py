"""Issue 20, item 7: what plan.json pins of a run's inputs, and how a change is named. The
hosts entries are read from a real hosts.yaml (the resume itself: tests/integration/
test_run_resume_pins.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config.inventory import load_inventory
from orchestrator.errors import ConfigError
from orchestrator.loadgen.prompts import PromptSet
from orchestrator.sweep.pins import check_resume, differences, pin_inputs

HOSTS = """\
defaults: {{gpus: "2 x RTX A6000"}}
hosts:
  gpu1:
    address: {address}
    user: bench
    env: {{HF_TOKEN: hf_literal_secret, VLLM_FLAG: "{flag}"}}
  gpu2: {{address: 10.0.0.9}}
"""


def pins(tmp_path: Path, *, address: str = "10.0.0.1", flag: str = "1", sha: str = "a" * 64):
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS.format(address=address, flag=flag))
    inventory = load_inventory(path)
    prompts = [PromptSet(source="file:/p.jsonl", sha256=sha), PromptSet(source="random")]
    return pin_inputs(prompts, [inventory.hosts["gpu1"]])


def test_the_pins_hold_content_and_no_secret(tmp_path: Path) -> None:
    pinned = pins(tmp_path)
    assert pinned["prompts"] == {"file:/p.jsonl": "a" * 64}  # random prompts: nothing to pin
    assert list(pinned["hosts"]) == ["gpu1"]  # only the hosts the runs use
    entry = pinned["hosts"]["gpu1"]["entry"]
    assert (entry["address"], entry["user"], entry["env"]["HF_TOKEN"]) == (
        "10.0.0.1",
        "bench",
        "***",
    )
    assert "hf_literal_secret" not in json.dumps(pinned)
    assert differences(pinned, pins(tmp_path)) == []
    assert check_resume(pinned, pins(tmp_path), folder="r", plan_file="r/plan.json") == []


def test_each_change_is_named(tmp_path: Path) -> None:
    before = pins(tmp_path)
    after = pins(tmp_path, address="10.0.0.2", flag="0", sha="b" * 64)
    assert differences(before, after) == [
        "prompt file /p.jsonl: content changed (SHA-256 aaaaaaaaaaaa… when the run began, "
        "bbbbbbbbbbbb… now)",
        "host gpu1's entry changed: address 10.0.0.1 → 10.0.0.2; "
        'env {"HF_TOKEN": "***", "VLLM_FLAG": "1"} → {"HF_TOKEN": "***", "VLLM_FLAG": "0"}',
    ]
    with pytest.raises(ConfigError, match="r cannot be resumed") as caught:
        check_resume(before, after, folder="r", plan_file="r/plan.json")
    assert "address 10.0.0.1 → 10.0.0.2" in str(caught.value)


def test_a_plan_without_pins_resumes_with_a_warning(tmp_path: Path) -> None:
    (warning,) = check_resume(None, pins(tmp_path), folder="r", plan_file="r/plan.json")
    assert warning.startswith("r was begun by an orch that did not pin")
