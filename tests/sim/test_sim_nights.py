"""The simulator playing nights: seeded night-to-night noise and changes injected from a night on.

Pure functions first (exact factors, parsing, the effect on a profile), then the wiring into a
launch's plan, then real simulated servers whose measured decode rate and ground truth show the
night they played.
"""

from __future__ import annotations

import math
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from sim_helpers import call, free_port

from orchestrator.sim.cli import parse_vllm
from orchestrator.sim.failures import StartupFailure
from orchestrator.sim.gpus import BUSY_SM_MHZ, THROTTLED_SM_MHZ
from orchestrator.sim.nights import (
    Change,
    NightsError,
    NightSettings,
    apply,
    night_factor,
    night_key,
    parse_changes,
    play,
    read_env,
)
from orchestrator.sim.sandbox import Sandbox
from orchestrator.sim.startup import plan_launch
from orchestrator.sim.timing import SpecProfile, TimingProfile

MTP3 = SpecProfile("mtp", 3, (0.84, 0.63, 0.43))  # acceptance length 2.9
PROFILE = TimingProfile("t", 0.04, 0.05, 0.04, 0.001, MTP3)
KEY = "vllm|Qwen/Qwen3.6-27B|dflash"
Q36 = "Qwen/Qwen3.6-27B"
DFLASH = '{"method": "dflash", "model": "z-lab/Qwen3.6-27B-DFlash", "num_speculative_tokens": 15}'


# -- the night's factor


@pytest.mark.parametrize(
    ("seed", "night", "key", "noise", "factor"),
    [
        (0, 0, KEY, 0.03, 0.9567300988566065),
        (0, 1, KEY, 0.03, 1.0027184905232376),
        (1, 0, KEY, 0.03, 0.9730705762977228),
        (0, 0, "sglang|Qwen/Qwen3.6-27B|mtp", 0.03, 1.0004489131262022),
        (7, 20, "vllm|Qwen/Qwen3.6-27B|none", 0.05, 0.9310094270759431),
        (7, 20, "vllm|Qwen/Qwen3.6-27B|none", 0.0, 1.0),  # no noise: exactly 1
    ],
)
def test_night_factor_is_pinned_per_seed_night_and_key(
    seed: int, night: int, key: str, noise: float, factor: float
) -> None:
    """Pinned values: a change to the draw would silently re-roll every simulated history."""
    assert night_factor(seed, night, key, noise) == pytest.approx(factor, rel=1e-12)
    assert night_factor(seed, night, key, noise) == night_factor(seed, night, key, noise)


def test_night_factor_scales_with_the_noise_and_has_the_asked_spread() -> None:
    # one standard normal draw per (seed, night, key): sigma only scales it
    for night in range(20):
        small, large = night_factor(3, night, KEY, 0.02), night_factor(3, night, KEY, 0.06)
        assert math.log(large) == pytest.approx(3 * math.log(small), rel=1e-9)
    factors = [night_factor(0, night, KEY, 0.03) for night in range(4000)]
    logs = [math.log(f) for f in factors]
    assert statistics.pstdev(logs) == pytest.approx(0.03, rel=0.05)
    assert statistics.median(factors) == pytest.approx(1.0, abs=0.003)
    assert len(set(factors)) == len(factors)  # every night its own factor
    other_seed = [night_factor(1, night, KEY, 0.03) for night in range(20)]
    assert other_seed != factors[:20]


# -- parsing the knobs


@pytest.mark.parametrize(
    ("text", "changes"),
    [
        ("", []),
        ("  ", []),
        ("throughput:-10%@20", [Change("throughput", -10.0, 20, "throughput:-10%@20")]),
        (" latency:+15%@20 , drafter:broken@0",
         [Change("latency", 15.0, 20, "latency:+15%@20"), Change("drafter", 0.0, 0, "drafter:broken@0")]),
        ("acceptance:-2.5%@7", [Change("acceptance", -2.5, 7, "acceptance:-2.5%@7")]),
        ("throughput:-5%@10,throughput:-5%@20",
         [Change("throughput", -5.0, 10, "throughput:-5%@10"),
          Change("throughput", -5.0, 20, "throughput:-5%@20")]),
    ],
)  # fmt: skip
def test_parse_changes(text: str, changes: list[Change]) -> None:
    assert parse_changes(text) == changes


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("throughput:-10%", "'throughput:-10%' has no @NIGHT"),
        ("throughput:10%@20", "'10%' in 'throughput:10%@20' is not a signed percentage"),
        ("throughput:-10@20", "'-10' in 'throughput:-10@20' is not a signed percentage"),
        ("speed:-10%@20", "unknown kind 'speed' in 'speed:-10%@20'"),
        ("throughput:-10%@x", "the night in 'throughput:-10%@x' is not an integer >= 0"),
        ("throughput:-10%@-1", "the night in 'throughput:-10%@-1' is not an integer >= 0"),
        ("drafter:slow@3", "drafter changes know only 'broken', not 'slow'"),
        ("throughput:-100%@3", "'-100%' in 'throughput:-100%@3' must be above -100%"),
        ("throughput@20", "'throughput@20' has no value after throughput:"),
        ("throughput:-10%@20,", "an empty item"),
        ("latency:+15%@20,,acceptance:-5%@3", "an empty item"),
    ],
)
def test_parse_changes_rejects_malformed_values(text: str, problem: str) -> None:
    with pytest.raises(NightsError) as error:
        parse_changes(text)
    message = str(error.value)
    assert message.startswith(f"ORCH_SIM_CHANGE={text!r}: {problem}")
    assert "e.g. throughput:-10%@20,acceptance:-10%@25" in message  # says what to write


def test_read_env_defaults_and_values() -> None:
    assert read_env({}) == NightSettings(night=0, noise=0.0, seed=0, changes=())
    env = {
        "ORCH_SIM_NIGHT": "21",
        "ORCH_SIM_NOISE": "0.03",
        "ORCH_SIM_SEED": "4",
        "ORCH_SIM_CHANGE": "throughput:-10%@20",
    }
    assert read_env(env) == NightSettings(
        21, 0.03, 4, (Change("throughput", -10.0, 20, "throughput:-10%@20"),)
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("ORCH_SIM_NIGHT", "x", "ORCH_SIM_NIGHT='x': expected an integer >= 0"),
        ("ORCH_SIM_NIGHT", "-1", "ORCH_SIM_NIGHT='-1': expected an integer >= 0"),
        ("ORCH_SIM_NIGHT", "1.5", "ORCH_SIM_NIGHT='1.5': expected an integer >= 0"),
        ("ORCH_SIM_SEED", "s", "ORCH_SIM_SEED='s': expected an integer >= 0"),
        ("ORCH_SIM_NOISE", "-0.1", "ORCH_SIM_NOISE='-0.1': expected a relative standard deviation"),
        ("ORCH_SIM_NOISE", "3%", "ORCH_SIM_NOISE='3%': expected a relative standard deviation"),
        ("ORCH_SIM_NOISE", "nan", "ORCH_SIM_NOISE='nan': expected a relative standard deviation"),
        ("ORCH_SIM_NOISE", "2", "ORCH_SIM_NOISE='2': expected a relative standard deviation"),
    ],
)
def test_read_env_rejects_malformed_knobs(name: str, value: str, message: str) -> None:
    with pytest.raises(NightsError) as error:
        read_env({name: value})
    assert str(error.value).startswith(message)


# -- the effect on a profile


def _spec(rates: tuple[float, ...]) -> SpecProfile:
    return replace(MTP3, num_draft_tokens=len(rates), position_rates=rates)


BROKEN3 = (0.035, 0.008, 0.002)
SCALE_10 = 1.61 / 1.9  # acceptance length 2.9 -> 2.61: drafted part 1.9 -> 1.61


@pytest.mark.parametrize(
    ("changes", "night", "factor", "step", "prefill", "rates"),
    [
        ("throughput:-10%@20", 19, 1.0, 0.04, (0.04, 0.001), MTP3.position_rates),  # not yet
        ("throughput:-10%@20", 20, 1.0, 0.04 / 0.9, (0.04, 0.001), MTP3.position_rates),
        ("throughput:-10%@20", 30, 1.02, 0.04 * 1.02 / 0.9, (0.0408, 0.00102), MTP3.position_rates),
        ("throughput:+25%@0", 0, 1.0, 0.032, (0.04, 0.001), MTP3.position_rates),
        ("throughput:-5%@10,throughput:-5%@20", 15, 1.0, 0.04 / 0.95, (0.04, 0.001), MTP3.position_rates),
        ("throughput:-5%@10,throughput:-5%@20", 20, 1.0, 0.04 / 0.95**2, (0.04, 0.001), MTP3.position_rates),
        ("latency:+15%@20", 20, 1.0, 0.04, (0.046, 0.00115), MTP3.position_rates),
        ("latency:+15%@20", 20, 0.98, 0.0392, (0.04 * 0.98 * 1.15, 0.00098 * 1.15), MTP3.position_rates),
        ("acceptance:-10%@20", 20, 1.0, 0.04, (0.04, 0.001),
         (0.84 * SCALE_10, 0.63 * SCALE_10, 0.43 * SCALE_10)),
        ("acceptance:+50%@0", 0, 1.0, 0.04, (0.04, 0.001), (1.0, 1.0, 0.43 * 3.35 / 1.9)),  # capped
        ("acceptance:-80%@0", 0, 1.0, 0.04, (0.04, 0.001), (0.0, 0.0, 0.0)),  # length floor 1
        ("drafter:broken@20", 20, 1.0, 0.04, (0.04, 0.001), BROKEN3),
        ("drafter:broken@20,acceptance:-10%@20", 20, 1.0, 0.04, (0.04, 0.001), (0.0, 0.0, 0.0)),
        ("", 20, 1.03, 0.0412, (0.0412, 0.00103), MTP3.position_rates),  # the noise alone
    ],
)  # fmt: skip
def test_apply_changes_to_a_profile(
    changes: str,
    night: int,
    factor: float,
    step: float,
    prefill: tuple[float, float],
    rates: tuple[float, ...],
) -> None:
    played = apply(PROFILE, night, parse_changes(changes), factor)
    assert played.step_s == pytest.approx(step, rel=1e-12)
    assert (played.prefill_base_s, played.prefill_per_token_s) == pytest.approx(prefill, rel=1e-12)
    assert played.spec is not None
    assert played.spec.position_rates == pytest.approx(rates, rel=1e-12)
    assert (played.name, played.batch_slope, played.spec.num_draft_tokens) == ("t", 0.05, 3)


def test_acceptance_drop_of_ten_percent_and_the_broken_drafter() -> None:
    dropped = apply(PROFILE, 20, parse_changes("acceptance:-10%@20"))
    assert dropped.spec is not None
    assert dropped.spec.expected_acceptance_length() == pytest.approx(2.61, rel=1e-12)
    assert dropped.expected_tokens_per_s() == pytest.approx(2.61 / 0.04, rel=1e-12)
    # conditional rates beyond the first are ratios of the scaled rates: unchanged
    assert dropped.spec.conditional()[1:] == pytest.approx(MTP3.conditional()[1:], rel=1e-12)

    wide = replace(PROFILE, spec=_spec((0.87, 0.75, 0.64, 0.54, 0.45, 0.36)))
    broken = apply(wide, 5, parse_changes("drafter:broken@5"))
    assert broken.spec is not None
    assert broken.spec.position_rates == (0.035, 0.008, 0.002, 0.0005, 0.0, 0.0)
    assert broken.spec.expected_acceptance_length() == pytest.approx(1.0455)
    assert broken.step_s == wide.step_s  # the drafter still drafts: same step cost


def test_changes_without_speculation_touch_only_timings() -> None:
    plain = replace(PROFILE, spec=None)
    played = apply(plain, 9, parse_changes("acceptance:-10%@0,drafter:broken@0,throughput:-20%@0"))
    assert played == replace(plain, step_s=0.04 / 0.8)


def test_play_records_the_night() -> None:
    settings = NightSettings(21, 0.03, 0, tuple(parse_changes("throughput:-10%@20,latency:+5%@25")))
    played, night = play(settings, PROFILE, KEY)
    factor = night_factor(0, 21, KEY, 0.03)
    assert night.factor == factor and night.base == PROFILE
    assert played.step_s == pytest.approx(0.04 * factor / 0.9, rel=1e-12)
    truth = night.truth()
    assert truth["active"] == ["throughput:-10%@20"]
    assert [(c["kind"], c["percent"], c["from_night"], c["active"]) for c in truth["changes"]] == [
        ("throughput", -10.0, 20, True),
        ("latency", 5.0, 25, False),
    ]
    assert (truth["night"], truth["noise"], truth["seed"], truth["key"]) == (21, 0.03, 0, KEY)
    assert (truth["base_step_s"], truth["base_expected_acceptance_length"]) == (0.04, 2.9)
    assert night_key("vllm", Q36, None) == "vllm|Qwen/Qwen3.6-27B|none"


# -- wired into a launch's plan


def _plan(box: Sandbox, env: dict[str, str]):
    argv = ["serve", Q36, "-tp", "2", "--max-model-len", "8192", "-sc", DFLASH]
    environ = {**box.env(), "VLLM_USE_V2_MODEL_RUNNER": "1", **env}
    return plan_launch(parse_vllm(argv), environ, box.state_dir)


def test_a_launch_plays_its_night(sim_box: Sandbox) -> None:
    base = _plan(sim_box, {})
    assert base.night is not None and base.night.factor == 1.0 and base.night.base == base.profile
    noisy = {"ORCH_SIM_NOISE": "0.03", "ORCH_SIM_SEED": "5", "ORCH_SIM_CHANGE": "throughput:-10%@4"}
    third, again, fourth = (
        _plan(sim_box, {**noisy, "ORCH_SIM_NIGHT": night}) for night in ("3", "3", "4")
    )
    assert third.profile == again.profile  # the same night: the same machine
    assert third.night is not None and fourth.night is not None
    assert third.night.key == KEY
    assert third.night.factor == night_factor(5, 3, KEY, 0.03) != fourth.night.factor
    assert third.profile.step_s == pytest.approx(base.profile.step_s * third.night.factor)
    assert fourth.profile.step_s == pytest.approx(base.profile.step_s * fourth.night.factor / 0.9)
    assert third.night.base == fourth.night.base == base.profile


def test_a_malformed_knob_fails_the_launch(sim_box: Sandbox) -> None:
    with pytest.raises(StartupFailure) as failure:
        _plan(sim_box, {"ORCH_SIM_CHANGE": "throughput:-10%"})
    assert failure.value.kind == "config"
    assert failure.value.traceback == [
        "ValueError: ORCH_SIM_CHANGE='throughput:-10%': 'throughput:-10%' has no @NIGHT; "
        "expected KIND:+P%@NIGHT or KIND:-P%@NIGHT with KIND throughput, latency or acceptance, "
        "drafter:broken@NIGHT or throttle:REASON@NIGHT (REASON sw_thermal, hw_thermal, "
        "sw_power_cap or hw_slowdown), comma-separated (e.g. throughput:-10%@20,"
        "acceptance:-10%@25)"
    ]


def test_a_throttled_night_slows_every_step_by_the_clock(sim_box: Sandbox) -> None:
    """From its night on, a throttle slows the decode step and the prefill by 1740/1410 MHz,
    and the launch's GPUs report the reason; before it nothing changes."""
    base = _plan(sim_box, {})
    change = {"ORCH_SIM_CHANGE": "throttle:sw_thermal@2"}
    before, after = (_plan(sim_box, {**change, "ORCH_SIM_NIGHT": n}) for n in ("1", "2"))
    assert before.profile == base.profile and before.night and before.night.throttle is None
    assert after.night is not None and after.night.throttle == "sw_thermal"
    slower = BUSY_SM_MHZ / THROTTLED_SM_MHZ
    assert after.profile.step_s == pytest.approx(base.profile.step_s * slower)
    assert after.profile.prefill_base_s == pytest.approx(base.profile.prefill_base_s * slower)
    assert after.profile.spec == base.profile.spec  # acceptance is the drafter's, not the clock's
    with pytest.raises(StartupFailure, match="throttle reasons are"):
        _plan(sim_box, {"ORCH_SIM_CHANGE": "throttle:too_hot@2"})


# -- real simulated servers


def _vllm_argv(port: int, spec: str | None = None) -> list[str]:
    argv = ["vllm", "serve", Q36, "--host", "127.0.0.1", "--port", str(port),
            "--tensor-parallel-size", "2", "--max-model-len", "8192", "--served-model-name", "qwen"]  # fmt: skip
    return argv + (["--speculative-config", spec] if spec else [])


def test_served_nights_show_the_change_in_the_measured_decode_rate(start_sim) -> None:
    """Night 19 and 20 of a history with a 20% throughput step at night 20 (and 3% noise); a
    DFlash server at night 20 of a history whose drafter breaks that night."""
    common = {"ORCH_SIM_SPEED": "10", "ORCH_SIM_GPUS": "6", "ORCH_SIM_NOISE": "0.03"}

    def run(night: str, change: str, gpus: str, spec: str | None) -> dict:
        env = {**common, "ORCH_SIM_NIGHT": night, "ORCH_SIM_CHANGE": change}
        env |= {"CUDA_VISIBLE_DEVICES": gpus, "VLLM_USE_V2_MODEL_RUNNER": "1"}
        sim = start_sim(_vllm_argv(free_port(), spec), env)
        sim.wait_ready()
        for i in range(3):
            body = {"model": "qwen", "prompt": f"night {i}", "max_tokens": 150, "ignore_eos": True}
            assert call("POST", sim.url + "/v1/completions", body)[0] == 200
        truth = sim.json("/sim/ground_truth")
        assert sim.stop() == 0
        return truth

    with ThreadPoolExecutor(3) as pool:
        before, after, broken = pool.map(
            run,
            ["19", "20", "20"],
            ["throughput:-20%@20", "throughput:-20%@20", "drafter:broken@20"],
            ["0,1", "2,3", "4,5"],
            [None, None, DFLASH],
        )
    rate = {}
    key = "vllm|Qwen/Qwen3.6-27B|none"
    for truth, night in ((before, 19), (after, 20)):
        factor = night_factor(0, night, key, 0.03)
        assert truth["night"]["night"] == night and truth["night"]["factor"] == factor
        assert truth["night"]["active"] == (["throughput:-20%@20"] if night == 20 else [])
        step = truth["night"]["base_step_s"] * factor / (0.8 if night == 20 else 1.0)
        assert truth["profile"]["step_s"] == pytest.approx(step, rel=1e-12)
        rate[night] = statistics.median(r["decode_tok_s"] for r in truth["requests"])
        expected = truth["profile"]["expected_decode_tok_s"]
        assert rate[night] == pytest.approx(expected, rel=0.05)  # what a client measures
    expected_ratio = 0.8 * night_factor(0, 19, key, 0.03) / night_factor(0, 20, key, 0.03)
    assert rate[20] / rate[19] == pytest.approx(expected_ratio, rel=0.05)

    assert broken["night"]["active"] == ["drafter:broken@20"]
    assert broken["drafter_fit"] == {
        "ok": True,
        "problems": [],
    }  # the drafter fits: the night broke it
    assert broken["profile"]["expected_acceptance_length"] == pytest.approx(1.0455)
    assert broken["night"]["base_expected_acceptance_length"] > 5
    assert broken["totals"]["acceptance_length"] < 1.15


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_malformed_change_stops_the_engine_at_start(start_sim, engine: str) -> None:
    port = free_port()
    argv = (
        _vllm_argv(port)
        if engine == "vllm"
        else ["python", "-m", "sglang.launch_server", "--model-path", Q36, "--host", "127.0.0.1",
              "--port", str(port), "--tp-size", "2", "--context-length", "8192"]
    )  # fmt: skip
    sim = start_sim(argv, {"ORCH_SIM_CHANGE": "throughput:10%@20"})
    assert sim.wait_exit() == 1
    log = sim.text()
    line = (
        "ValueError: ORCH_SIM_CHANGE='throughput:10%@20': '10%' in 'throughput:10%@20' is not a "
        "signed percentage such as -10%; expected KIND:+P%@NIGHT"
    )
    assert line in log, log
    assert "Traceback" not in log and "nights.py" not in log  # one line, not the simulator's stack
