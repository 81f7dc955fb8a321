"""Issue 24, item 8: the shipped playbook's own policy (`playbooks/nightly.yaml`'s `nightly:`
section, orch's defaults) on 30 nights with night-to-night noise, judged by the `orch history
replay` command a team would run, exit code by exit code.

The nights are those of `tests.fixtures.nightly_histories` (every figure of one speculative
case; 3% noise shared by a night's repeats, 1% each repeat's own, 5 repeats), written to a
history file as `orch nightly` writes it. The live end to end, `orch nightly` processes on
the simulator night after night, is `test_nightly_e2e.py`: a night there takes seconds, so it
plays 6 nights, too few for these defaults' 20-night baseline to mean anything.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.nightly.history import History
from tests.fixtures.nightly_histories import Noise, Scenario, Shift, history

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "nightly.yaml"
NIGHTS = Scenario(nights=30, repeats=5, noise=Noise(night=0.03, repeat=0.01))
STEP = Shift(("output_tok_s", "decode_tok_s_median"), at=20, factor=0.90)
SEEDS = range(3)


def replayed(tmp_path: Path, scenario: Scenario, seed: int) -> list[int]:
    """Each night's exit status under the shipped playbook's policy."""
    store = History(tmp_path / f"results-{seed}", "nightly")
    for night in history(scenario, seed):
        store.append(night)
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "history", "replay", str(store.path),
         "--policy", str(PLAYBOOK), "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    nights = json.loads(done.stdout)["nights"]
    assert len(nights) == scenario.nights
    return [n["exit_code"] for n in nights]


@pytest.mark.parametrize("seed", SEEDS)
def test_quiet_nights_under_the_shipped_policy(tmp_path: Path, seed: int) -> None:
    codes = replayed(tmp_path, NIGHTS, seed)
    assert codes[:3] == [3, 3, 3]  # too few nights: said, never a silent pass
    assert set(codes[3:]) == {0}, codes  # 3% night noise on 8 figures: no alarm


@pytest.mark.parametrize("seed", SEEDS)
def test_a_10pct_step_under_the_shipped_policy(tmp_path: Path, seed: int) -> None:
    codes = replayed(tmp_path, dataclasses.replace(NIGHTS, shifts=(STEP,)), seed)
    assert codes[:3] == [3, 3, 3]
    assert 1 not in codes[:20], codes  # nothing called before the step
    called = codes.index(1, 20)
    assert called <= 24, codes  # the step called within 5 nights ...
    assert set(codes[called:]) == {1}, codes  # ... and it stays called while it persists
