"""The HTML report in a real browser: a small sweep measured on the embedded hosts, its report
opened in headless Chromium (Debian's package; `make chromium` installs it), which must show
every plot, log no console error or exception, and ask for nothing but the file itself and its
data: images.

The browser harness (tests/fixtures/chromium.py) is checked first on a page that breaks each
rule, so a pass below means the rules were checked, not that nothing was seen.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from orchestrator.commands.report import report
from tests.fixtures.chromium import PageReport, chromium, load_page
from tests.fixtures.night_folders import STEADY, STEP, night_folders
from tests.fixtures.procs import kill_tree, pids_with_env

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        chromium() is None,
        reason="chromium is not installed: `make chromium` (Debian's chromium package) does it",
    ),
]

DATA = Path(__file__).parent / "data"
PORTS = (38300, 38301)  # this module's own ports (other tests and the demos use others)
HOSTS = ("emb-1", "emb-2")
EXPECTED_PLOTS = {
    "pareto-output",
    "pareto-total",
    "by-load",
    "acceptance",
    "cdf-ttft",
    "cdf-itl",
    "timeline",
    "gpu",  # issue 23: the simulated GPUs' power and clocks, and tok/s per W against interactivity
    "pareto-energy",
}
PLAYBOOK = {
    "name": "report-chromium",
    "defaults": {
        "model": "Qwen/Qwen3.6-27B",
        "tensor_parallel": 2,
        "max_model_len": 8192,
        "workload": {
            "prompts": "builtin:mixed",
            "concurrency": [1, 2],
            "repeat": 2,
            "duration_s": 1.5,
            "num_prompts": 1000,
            "max_tokens": 24,
            "ignore_eos": True,
            "warmup": 1,
            "chat_template_kwargs": {"enable_thinking": False},
            "slo": {"targets": ["tpot_ms_median <= 30"]},
        },
    },
    "runs": [
        {
            "name": "vllm-dflash",
            "hosts": ["emb-1"],
            "engine": "vllm",
            "port": PORTS[0],
            "speculative": {
                "method": "dflash",
                "draft_model": "z-lab/Qwen3.6-27B-DFlash",
                "num_draft_tokens": 15,
            },
            "extra_args": ["--attention-backend", "flash_attn"],
            "env": {"VLLM_USE_V2_MODEL_RUNNER": "1", "VLLM_SERVER_DEV_MODE": "1"},
        },
        {
            "name": "vllm-plain",
            "hosts": ["emb-2"],
            "engine": "vllm",
            "port": PORTS[1],
            "env": {"VLLM_SERVER_DEV_MODE": "1"},
        },
    ],
}


def problems(page: PageReport) -> list[str]:
    """Every way the page broke the report's rules."""
    found = [f"image not loaded: {src}" for done, width, src in page.images if not (done and width)]
    found += [f"console: {e}" for e in page.console_errors]
    found += [f"exception: {e}" for e in page.exceptions]
    found += [
        f"request off the page: {u}" for u in page.requests if not u.startswith(("file:", "data:"))
    ]
    found += [f"request failed: {f}" for f in page.failed]
    return found


def test_the_harness_sees_what_breaks_a_page(tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><body data-plots='2'>"
        "<img src='data:image/png;base64,AAAA'>"  # not a PNG: never loads
        "<img src='http://127.0.0.1:9/plot.png'>"  # off the page (a closed local port)
        "<script>console.error('boom'); undefinedFunction();</script>"
        "</body></html>"
    )
    seen = load_page(page)
    assert len(seen.images) == 2 and seen.plots == "2"
    found = "\n".join(problems(seen))
    assert found.count("image not loaded") == 2
    assert "boom" in found and "undefinedFunction" in found
    assert "request off the page: http://127.0.0.1:9/plot.png" in found


@pytest.fixture(scope="module")
def sweep_results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`orch run` of a two-configuration, two-point, two-repeat sweep on the embedded hosts."""
    tmp = tmp_path_factory.mktemp("report-chromium")
    playbook = tmp / "playbook.yaml"
    playbook.write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))
    root = tmp / "embedded"
    try:
        proc = subprocess.run(
            [
                *(sys.executable, "-m", "orchestrator", "run", str(playbook)),
                *("--hosts", str(DATA / "hosts-embedded.yaml"), "--results", str(tmp / "results")),
            ],
            cwd=tmp,
            env={**os.environ, "ORCH_EMBEDDED_ROOT": str(root), "ORCH_E2E_SECRET": "x"},
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (folder,) = (p for p in (tmp / "results").iterdir() if p.is_dir())
        yield folder
    finally:
        for host in HOSTS:
            for pid in pids_with_env("HOME", str(root / host / "home")):
                kill_tree(pid)


def test_the_report_opens_in_chromium_with_every_plot(sweep_results: Path) -> None:
    done = report([sweep_results])
    html = done.written.html.read_text()
    assert set(re.findall(r'<figure id="([^"]+)"', html)) == EXPECTED_PLOTS
    page = load_page(done.written.html)
    assert problems(page) == []
    assert len(page.images) == done.plots == int(page.plots or -1) == len(EXPECTED_PLOTS)
    assert all(width > 100 for _, width, _ in page.images)
    assert page.requests[0] == done.written.html.resolve().as_uri()


def test_a_nights_report_shows_its_trend_plots_in_chromium(tmp_path: Path) -> None:
    """A night's report (nightly.json and its history beside it, no engine needed): its
    "Nightly trend" plots load like every other plot."""
    *_, night = night_folders(tmp_path / "results", [STEADY] * 3 + [STEP, STEP])
    done = report([night])
    html = done.written.html.read_text()
    trends = [f for f in re.findall(r'<figure id="([^"]+)"', html) if f.startswith("trend-")]
    assert len(trends) == 8  # a figure per metric of the speculative case
    page = load_page(done.written.html)
    assert problems(page) == []
    assert len(page.images) == done.plots == int(page.plots or -1) > len(trends)
    assert all(width > 100 for _, width, _ in page.images)
