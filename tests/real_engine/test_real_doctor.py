"""The doctor's drafter checks on the real model files, read on a real sshd host.

The tiny target and its EAGLE-3 head are real Hugging Face checkpoints that vLLM 0.32 loads
(tests/real_engine/test_real_measure.py serves them). `orch doctor` reads their config.json on
the host: the real pair passes every drafter check; a copy of the head with a hidden size
that does not fit the target is refused, naming the check, the values and the fix. No engine
starts here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.fixtures.cli import orch_in_process
from tests.fixtures.realvllm import CpuHost, RealVllm, start_cpu_host
from tests.fixtures.sshd import SshdFactory

# the first test to ask for the real venv may build it (minutes on a slow network)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def host(
    real_vllm: RealVllm, cpu_factory: SshdFactory, tmp_path_factory: pytest.TempPathFactory
) -> CpuHost:
    return start_cpu_host(cpu_factory, real_vllm, tmp_path_factory.mktemp("real-doctor"))


def doctor(host: CpuHost, tmp: Path, drafter: str) -> tuple[int, list[dict]]:
    book = {
        "name": "real-doctor",
        "hosts": [host.name],
        "runs": [
            {
                "name": "eagle3",
                "engine": "vllm",
                "model": host.real.target,
                "speculative": {"method": "eagle3", "draft_model": drafter, "num_draft_tokens": 3},
            }
        ],
    }
    playbook = tmp / "doctor.yaml"
    playbook.write_text(yaml.safe_dump(book, sort_keys=False))
    done = orch_in_process(
        "doctor", str(playbook), "--hosts", str(host.hosts_file), "--json", cwd=tmp
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)["findings"]


def test_the_real_eagle3_head_passes_every_drafter_check(host: CpuHost, tmp_path: Path) -> None:
    code, findings = doctor(host, tmp_path, host.real.eagle3)
    by_check = {f["check"]: f for f in findings}
    assert code == 0, findings
    for check in ("vocab_size", "hidden_size", "architecture"):
        assert by_check[check]["severity"] == "ok", by_check[check]
    config = json.loads((Path(host.real.eagle3) / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert "LlamaForCausalLMEagle3" in by_check["architecture"]["message"]


def test_a_head_that_does_not_fit_the_target_is_refused(host: CpuHost, tmp_path: Path) -> None:
    broken = tmp_path / "tiny-eagle3-wide"
    shutil.copytree(host.real.eagle3, broken)
    config = json.loads((broken / "config.json").read_text())
    config["hidden_size"] = 512  # the target's is 256
    config.pop("target_hidden_size", None)
    (broken / "config.json").write_text(json.dumps(config, indent=2))
    code, findings = doctor(host, tmp_path, str(broken))
    errors = {f["check"]: f for f in findings if f["severity"] == "error"}
    assert code == 1 and "hidden_size" in errors, findings
    assert "512" in errors["hidden_size"]["message"] and "256" in errors["hidden_size"]["message"]
