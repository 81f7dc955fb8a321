"""Issue 11 end to end: `orch nightly` on an embedded host over simulated nights.

The simulator plays each night (``ORCH_SIM_NIGHT``) with seeded night-to-night noise and an
injected change from a given night on (``ORCH_SIM_CHANGE``), reaching the engine through the
host's env in hosts.yaml (``${NIGHT}`` from the shell, as a real cron job would export it). A
driver upgrade is an edit of the embedded host's own state (its simulated ``gpus.json``), as it
would be on a real machine, outside anything orch passes to the host.
Two histories run side by side, each night a real `orch nightly` process:

- A (a throughput step with a driver upgrade): too few nights (exit 3), an ordinary night (0),
  the first night of a 30% step (2, suspicious), the second (1, regression: since that night,
  the last good one and the driver change named), then both nights accepted by a person and
  the next night judged against them (0), then a night the GPUs run throttled: its speeds are
  not judged against nights of another operating mode (3, insufficient_data naming the clock
  and the throttling; its acceptance is, ok);
- B (an acceptance drop, a broken drafter, then a dead host): a 10% drop in acceptance length
  is caught the first night it appears (2, suspicious); the collapse is a failure whatever
  the history (1); a host refusing connections is "could not measure" (3), never a
  regression, and is kept in the history as such.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.nightly.history import History
from tests.fixtures.sshd import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

NOISE = "0.03"
OLD_DRIVER, NEW_DRIVER = "580.95.05", "590.44.01"
STEP_NIGHT = 2  # A: throughput -30% from this night on, with the new driver
THROTTLE_NIGHT = STEP_NIGHT + 3  # A: the GPUs throttled (sw_thermal) on this night
DROP_NIGHT = 2  # B: acceptance length -10% from this night on
BROKEN_NIGHT = 3  # B: the drafter collapses from this night on
NIGHT_TIMEOUT_S = 120


def hosts_file(path: Path, host: str, speed: int) -> Path:
    env = {
        "ORCH_SIM_LOAD_S": "0.2",
        "ORCH_SIM_SPEED": str(speed),
        "VLLM_LOG_STATS_INTERVAL": "1",
        "ORCH_SIM_NIGHT": "${NIGHT}",
        "ORCH_SIM_NOISE": NOISE,
        "ORCH_SIM_SEED": "7",
        "ORCH_SIM_CHANGE": "${CHANGE}",
    }
    inventory = {
        "defaults": {"gpus": "2 x RTX A6000", "transport": "embedded", "env": env},
        "hosts": {host: {}},
    }
    path.write_text(yaml.safe_dump(inventory))
    return path


def dead_hosts_file(path: Path, host: str) -> Path:
    """The same host name, now refusing TCP (its machine is down)."""
    inventory = {
        "hosts": {
            host: {
                "address": "127.0.0.1",
                "port": free_port(),
                "python": sys.executable,
                "connect_timeout": 3,
                "gpus": "2 x RTX A6000",
            }
        }
    }
    path.write_text(yaml.safe_dump(inventory))
    return path


def playbook(
    path: Path, *, engine: str, speculative: dict[str, Any], load: dict[str, int] | None = None
) -> Path:
    book = {
        "name": "nightly",
        "defaults": {
            "model": "Qwen/Qwen3.6-27B",
            "tensor_parallel": 2,
            "max_model_len": 8192,
            "workload": {
                "prompts": "builtin:mixed",
                "num_prompts": 8,
                "concurrency": 2,
                "max_tokens": 64,
                "ignore_eos": True,
                "warmup": 1,
                "repeat": 3,
                **(load or {}),
            },
        },
        # at 2x speed a TTFT is ~45 ms and a p99 of 8 requests is their maximum: a busy CI
        # machine's scheduling moves them by tens of percent, which says nothing about orch
        # two baseline nights are a small sample for a t-test (3 values a side at most): a
        # busy machine's spread between repeats must not hide a 30% step at p < 0.01
        "nightly": {
            "min_baseline_nights": 1,
            "alpha": 0.05,
            "thresholds": {m: "300%" for m in ("ttft_ms_median", "ttft_ms_p99", "tpot_ms_p99")},
        },
        "runs": [
            {
                "name": f"{engine}-spec",
                "engine": engine,
                "port": free_port(),
                "speculative": speculative,
                **({"env": {"VLLM_USE_V2_MODEL_RUNNER": "1"}} if engine == "vllm" else {}),
                **(
                    {"extra_args": ["--attention-backend", "flash_attn"]}
                    if engine == "vllm"
                    else {}
                ),
            }
        ],
    }
    path.write_text(yaml.safe_dump(book, sort_keys=False))
    return path


@dataclass(frozen=True)
class Night:
    code: int
    doc: dict[str, Any]
    markdown: str
    stderr: str

    def verdicts(self, metric: str) -> list[str]:
        return [
            m["verdict"] for c in self.doc["cases"] for m in c["metrics"] if m["metric"] == metric
        ]


@dataclass
class Place:
    tmp: Path
    playbook: Path
    hosts: Path

    @property
    def results(self) -> Path:
        return self.tmp / "results"

    def orch(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator", *args],
            cwd=self.tmp,
            env={**os.environ, "ORCH_EMBEDDED_ROOT": str(self.tmp / "embedded"), **(env or {})},
            capture_output=True,
            text=True,
            timeout=NIGHT_TIMEOUT_S,
        )

    def install_driver(self, version: str) -> None:
        """What an admin's driver upgrade does to a simulated host: its gpus.json changes
        (the sandbox is created by the first night; before it, the default driver is OLD)."""
        for state in (self.tmp / "embedded").glob("*/state/gpus.json"):
            facts = json.loads(state.read_text())
            state.write_text(json.dumps({**facts, "driver_version": version}))

    def night(
        self, n: int, change: str, driver: str = OLD_DRIVER, hosts: Path | None = None
    ) -> Night:
        summary = self.tmp / f"step-summary-{n}.md"
        self.install_driver(driver)
        proc = self.orch(
            "nightly",
            str(self.playbook),
            "--hosts",
            str(hosts or self.hosts),
            "--results",
            str(self.results),
            "--known-hosts",
            str(self.tmp / "known_hosts"),
            "--no-report",
            "--json",
            env={
                "NIGHT": str(n),
                "CHANGE": change,
                "GITHUB_STEP_SUMMARY": str(summary),
            },
        )
        assert proc.stdout, proc.stderr
        doc = json.loads(proc.stdout)
        folder = Path(doc["results_dir"])
        markdown = (folder / "nightly.md").read_text()
        assert summary.read_text().rstrip("\n") == markdown.rstrip("\n")  # the CI job summary
        assert json.loads((folder / "nightly.json").read_text())["verdict"] == doc["verdict"]
        return Night(proc.returncode, doc, markdown, proc.stderr)


def place(
    tmp: Path,
    host: str,
    engine: str,
    speculative: dict[str, Any],
    load: dict[str, int] | None = None,
    speed: int = 2,
) -> Place:
    tmp.mkdir()
    (tmp / "known_hosts").write_text("")
    return Place(
        tmp,
        playbook(tmp / "nightly.yaml", engine=engine, speculative=speculative, load=load),
        hosts_file(tmp / "hosts.yaml", host, speed),
    )


def history_a(p: Place) -> list[Night]:
    change = f"throughput:-30%@{STEP_NIGHT}"
    nights = [p.night(n, change) for n in range(STEP_NIGHT)]  # 0, 1
    nights.append(p.night(STEP_NIGHT, change, NEW_DRIVER))
    nights.append(p.night(STEP_NIGHT + 1, change, NEW_DRIVER))
    for night in nights[-2:]:
        accepted = p.orch(
            "baseline", "accept", night.doc["night"], "--results", str(p.results), "--note", "x"
        )
        assert accepted.returncode == 0, accepted.stderr
        assert f"night {night.doc['night']} of nightly: accepted" in accepted.stdout
    nights.append(p.night(STEP_NIGHT + 2, change, NEW_DRIVER))
    hot = f"{change},throttle:sw_thermal@{THROTTLE_NIGHT}"  # the GPUs run hot from that night
    nights.append(p.night(THROTTLE_NIGHT, hot, NEW_DRIVER))
    return nights


def history_b(p: Place, dead: Path) -> list[Night]:
    change = f"acceptance:-10%@{DROP_NIGHT},drafter:broken@{BROKEN_NIGHT}"
    nights = [p.night(n, change) for n in range(BROKEN_NIGHT + 1)]  # 0, 1, 2, 3
    nights.append(p.night(BROKEN_NIGHT + 1, change, hosts=dead))
    return nights


@pytest.fixture(scope="module")
def histories(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Place, list[Night], Place, list[Night]]:
    tmp = tmp_path_factory.mktemp("nightly")
    # 8 requests a repeat: one first chunk read late on a busy machine is 12.5% of them, and
    # orch rightly fails that measurement as client-saturated (the night could not be
    # measured). At 2x speed a decode step is ~20 ms, far longer than a busy CPU's stalls
    a = place(tmp / "a", "emb-a", "sglang", {"method": "mtp", "num_draft_tokens": 3})
    dflash = {"method": "dflash", "draft_model": "z-lab/Qwen3.6-27B-DFlash", "num_draft_tokens": 15}
    # acceptance is measured over every verification step of a run: enough of them (8k tokens)
    # that a run's acceptance length varies by ~1%, as on a real playbook's workload. Each
    # simulator runs only as fast as one client core can time its streams on a busy machine
    # (a decode step of several ms per stream): faster, the client reads chunks together and
    # orch rightly fails the measurement as client-saturated
    enough = {"num_prompts": 64, "concurrency": 8, "max_tokens": 128}
    b = place(tmp / "b", "emb-b", "vllm", dflash, enough, speed=8)
    with ThreadPoolExecutor(2) as pool:
        nights_a = pool.submit(history_a, a)
        nights_b = pool.submit(history_b, b, dead_hosts_file(tmp / "b" / "dead.yaml", "emb-b"))
        return a, nights_a.result(), b, nights_b.result()


def test_exit_codes_follow_the_verdicts(histories: Any) -> None:
    _a, nights_a, _b, nights_b = histories
    codes = [n.code for n in nights_a]
    verdicts = [n.doc["verdict"] for n in nights_a]
    detail = "\n".join(n.markdown + n.stderr[-2000:] for n in nights_a)
    assert verdicts[0] == "insufficient_data", detail  # no night before it
    # ordinary nights: within the noise (a lucky one may be an improvement, exit 0 too)
    assert set(verdicts[1:STEP_NIGHT]) <= {"ok", "improvement"}, detail
    assert verdicts[STEP_NIGHT:] == ["suspicious", "regression", "ok", "insufficient_data"], detail
    assert codes == [3, 0, 2, 1, 0, 3], detail
    detail_b = "\n".join(n.markdown + n.stderr[-2000:] for n in nights_b)
    assert [n.code for n in nights_b][DROP_NIGHT:] == [2, 1, 3], detail_b
    assert [n.doc["verdict"] for n in nights_b][DROP_NIGHT:] == [
        "suspicious",
        "failure",
        "could_not_measure",
    ], detail_b


def test_the_step_is_named_with_what_changed(histories: Any) -> None:
    _a, nights, _b, _ = histories
    first, second = nights[STEP_NIGHT], nights[STEP_NIGHT + 1]
    assert first.verdicts("output_tok_s") == ["suspicious"]
    assert first.verdicts("acceptance_length") == ["ok"]  # the step is in the decode time only
    assert second.verdicts("output_tok_s") == ["regression"]
    (metric,) = [
        m for c in second.doc["cases"] for m in c["metrics"] if m["metric"] == "output_tok_s"
    ]
    assert metric["since"] == first.doc["night"]
    # the last good night is the newest baseline night before the step: which one that is
    # depends on the baseline nights' own noise (a busy machine may set one apart)
    before = [n.doc["night"] for n in nights[:STEP_NIGHT]]
    assert metric["last_good"] in before
    assert metric["last_good"] == [b for b in metric["baseline_nights"] if b in before][-1]
    assert metric["change"] < -0.15  # the step is diluted by the prefill in output tok/s
    (decode,) = [
        m for c in second.doc["cases"] for m in c["metrics"] if m["metric"] == "decode_tok_s_median"
    ]
    assert decode["change"] == pytest.approx(-0.30, abs=0.08)  # -30% +- the nights' noise
    changed = {c["name"]: (c["before"], c["after"]) for c in metric["changes"]}
    assert changed == {"driver_version": (OLD_DRIVER, NEW_DRIVER)}
    assert second.markdown.startswith("# Nightly: REGRESSION (exit 1)")
    assert f"driver_version {OLD_DRIVER} → {NEW_DRIVER}" in second.markdown


def test_accepted_nights_become_the_baseline(histories: Any) -> None:
    a, nights, _b, _ = histories
    after = nights[STEP_NIGHT + 2]
    (metric,) = [
        m for c in after.doc["cases"] for m in c["metrics"] if m["metric"] == "output_tok_s"
    ]
    assert metric["verdict"] == "ok"
    assert set(metric["baseline_nights"]) == {
        nights[STEP_NIGHT].doc["night"],
        nights[STEP_NIGHT + 1].doc["night"],
    }
    decisions = History(a.results, "nightly").decisions()
    assert {n: d.decision for n, d in decisions.items()} == {
        nights[STEP_NIGHT].doc["night"]: "accept",
        nights[STEP_NIGHT + 1].doc["night"]: "accept",
    }
    listed = a.orch("history", str(a.playbook), "--results", str(a.results), "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["nights"]
    assert [r["night"] for r in rows] == [n.doc["night"] for n in nights]
    assert [r["decision"] for r in rows] == [None] * STEP_NIGHT + ["accept", "accept", None, None]


def test_a_throttled_night_is_named_as_such(histories: Any) -> None:
    """Issues 23 and 24: the simulated GPUs ran at 1410 MHz under sw_thermal (steps 1740/1410 as
    long): the night's GPU samples name the clock and the throttling as what changed, beside
    the case's verdict, and its speeds are not judged against the nights of another mode (no
    performance regression of the software); its acceptance, which the clock does not move,
    is judged as ever."""
    _a, nights, _b, _ = histories
    hot, before = nights[THROTTLE_NIGHT], nights[THROTTLE_NIGHT - 1]
    assert hot.verdicts("output_tok_s") == ["insufficient_data"], hot.markdown
    assert "the GPUs ran in another operating mode (SM clock 1740 → 1410 MHz)" in hot.markdown
    assert hot.verdicts("acceptance_length") == ["ok"]
    (metric,) = [m for c in hot.doc["cases"] for m in c["metrics"] if m["metric"] == "output_tok_s"]
    changed = {c["name"]: (c["before"], c["after"]) for c in metric["changes"]}
    assert changed["sm_clock_mhz"] == ("1740", "1410") and "driver_version" not in changed
    assert changed["throttle_reasons"] == (None, "sw_thermal")
    throttled = float(changed["throttled_pct"][1])
    assert throttled > 50  # busy most of the window, idle between repeats' requests at most
    (case,) = hot.doc["cases"]
    assert case["attributes"]["throttle_reasons"] == "sw_thermal"
    assert (
        case["gpu_mode"]
        == f"GPUs throttled {throttled:.0f}% of the window (sw_thermal), SM clock 1410 MHz"
    )
    assert "SM clock 1740 → 1410 MHz" in hot.markdown
    assert f"GPUs throttled {throttled:.0f}% of the window (sw_thermal), SM clock 1410 MHz" in (
        hot.markdown
    )
    assert "GPUs throttled" not in before.markdown


def test_an_acceptance_drop_is_caught_the_first_night(histories: Any) -> None:
    _a, _, _b, nights = histories
    drop = nights[DROP_NIGHT]
    assert drop.verdicts("acceptance_length") == ["suspicious"], drop.markdown
    (metric,) = [
        m for c in drop.doc["cases"] for m in c["metrics"] if m["metric"] == "acceptance_length"
    ]
    assert metric["change"] == pytest.approx(-0.10, abs=0.03)  # steadier than throughput
    assert metric["baseline_nights"] == [n.doc["night"] for n in nights[:DROP_NIGHT]]


def test_a_collapse_fails_and_a_dead_host_is_not_a_regression(histories: Any) -> None:
    _a, _, b, nights = histories
    broken = nights[BROKEN_NIGHT]
    assert broken.verdicts("acceptance_length") == ["failure"]
    assert "# Nightly: FAILURE (exit 1)" in broken.markdown
    dead = nights[BROKEN_NIGHT + 1]
    assert dead.doc["verdict"] == "could_not_measure" and dead.code == 3
    assert "regression" not in json.dumps(dead.doc["counts"])
    assert "connection refused" in dead.markdown
    listed = b.orch("history", "nightly", "--results", str(b.results), "--json")
    rows = json.loads(listed.stdout)["nights"]
    verdicts = [r["verdict"] for r in rows]
    assert verdicts[0] == "insufficient_data" and len(verdicts) == BROKEN_NIGHT + 2
    assert verdicts[DROP_NIGHT:] == ["suspicious", "failure", "could_not_measure"]


def test_a_replay_of_the_history_judges_every_night_as_orch_nightly_did(histories: Any) -> None:
    """Issue 24: `orch history replay` over history A, under the playbook's own policy (its
    `nightly:` section, read from the playbook), gives each night the verdict and exit status
    `orch nightly` printed that night, people's accepts included; under the default policy
    the same file is judged otherwise, night by night, and says so."""
    a, nights, _b, _ = histories
    history = a.results / "history" / "nightly.jsonl"
    done = a.orch("history", "replay", str(history), "--policy", str(a.playbook), "--json")
    assert done.returncode == 0, done.stderr
    replayed = json.loads(done.stdout)["nights"]
    assert [n["night"] for n in replayed] == [n.doc["night"] for n in nights]
    assert [(n["verdict"], n["exit_code"]) for n in replayed] == [
        (n.doc["verdict"], n.code) for n in nights
    ]
    assert [n["recorded_verdict"] for n in replayed] == [n.doc["verdict"] for n in nights]
    for then, now in zip(nights, replayed, strict=True):
        assert [[m["verdict"] for m in c["metrics"]] for c in now["cases"]] == [
            [m["verdict"] for m in c["metrics"]] for c in then.doc["cases"]
        ]
    default = a.orch("history", "replay", str(history), "--json")
    assert default.returncode == 0, default.stderr
    strict = json.loads(default.stdout)["nights"]  # 3 baseline nights, alpha 0.001, 10% latency
    assert strict[0]["verdict"] == strict[1]["verdict"] == "insufficient_data"
    differ = sum(n["verdict"] != n["recorded_verdict"] for n in strict)
    text = a.orch("history", "replay", str(history))
    assert text.stdout.rstrip().endswith(
        f"{len(nights)} nights replayed; {differ} judged otherwise than recorded"
    ), text.stdout
    assert differ >= 1
