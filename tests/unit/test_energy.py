"""A measurement's energy from its GPU samples: the counter over the window, the power integral
as its cross-check, and every figure the samples cannot support flagged with its reason."""

from __future__ import annotations

import pytest

from orchestrator.metrics.energy import MAX_GAP_S, gpu_window, window_energy
from orchestrator.remote.telemetry import GpuSample


def samples(
    gpu: int,
    t0: float,
    t1: float,
    *,
    every: float = 0.1,
    watts: float = 200.0,
    counter: bool = True,
    reasons: int = 0,
    sm: int = 1740,
) -> list[GpuSample]:
    """A GPU drawing ``watts`` steadily, read every ``every`` s; its counter started at 1 kJ."""
    out = []
    n = round((t1 - t0) / every)
    for i in range(n + 1):
        t = t0 + i * every
        energy = round(1_000_000 + watts * 1000 * (t - t0)) if counter else None
        out.append(GpuSample(t, gpu, energy, watts, sm, 8001, 20480, 97, 70, reasons))
    return out


def test_steady_power_gives_the_same_energy_both_ways() -> None:
    data = samples(0, 99.0, 111.0) + samples(1, 99.0, 111.0, watts=100.0)
    e = window_energy(data, 100.03, 110.03, output_tokens=5000, total_tokens=20000)
    assert e.valid, e.problems
    assert [g.energy_source for g in e.gpus] == ["counter", "counter"]
    assert e.gpus[0].energy_j == pytest.approx(2000.0, abs=0.01)  # 200 W x 10 s
    assert e.gpus[0].integral_j == pytest.approx(2000.0, rel=1e-9)
    assert e.energy_j == pytest.approx(3000.0, abs=0.02)
    assert e.j_per_output_token == pytest.approx(0.6, rel=1e-4)
    assert e.j_per_token == pytest.approx(0.15, rel=1e-4)
    assert e.output_tok_s_per_w == pytest.approx(500.0 / 300.0, rel=1e-4)  # 500 tok/s at 300 W
    assert e.power_mean_w == pytest.approx(300.0) and e.power_max_w == pytest.approx(300.0)
    assert e.gpus[0].samples == 100 and e.gpus[0].sm_mhz_mean == 1740
    assert e.gpus[0].sm_mhz_stdev == 0.0 and e.gpus[0].mem_used_peak_mib == 20480


def test_a_gap_over_three_seconds_is_flagged() -> None:
    data = [s for s in samples(0, 99.0, 111.0) if not 103.0 < s.t < 107.0]
    e = window_energy(data, 100.0, 110.0, output_tokens=1, total_tokens=1)
    assert not e.valid
    assert e.gpus[0].max_gap_s == pytest.approx(4.0, abs=0.11)
    assert f"no sample for 4.0 s of the window (> {MAX_GAP_S:g} s)" in e.problems[0]
    # the counter still gives the energy exactly: it counts through the gap
    assert e.energy_j == pytest.approx(2000.0, abs=0.01)


def test_samples_that_stop_before_the_window_ends_are_a_gap() -> None:
    e = window_energy(samples(0, 99.0, 105.0), 100.0, 110.0, output_tokens=1, total_tokens=1)
    assert not e.valid and e.energy_j is None
    assert "no sample for 5.0 s" in e.problems[0]


def test_a_counter_that_disagrees_with_the_power_is_flagged() -> None:
    honest = samples(0, 99.0, 111.0, watts=200.0)
    # the power readings say 200 W, the counter counts 230 W
    skewed = [s._replace(energy_mj=round(1_000_000 + 230_000 * (s.t - 99.0))) for s in honest]
    e = window_energy(skewed, 100.0, 110.0, output_tokens=1, total_tokens=1)
    assert not e.valid
    assert "differ by 13.0% (> 5%)" in e.problems[0]
    assert e.energy_j == pytest.approx(2300.0, abs=0.01)  # the counter is still the figure


def test_without_a_counter_the_integral_is_the_figure_and_says_so() -> None:
    e = window_energy(
        samples(0, 99.0, 111.0, counter=False), 100.0, 110.0, output_tokens=4, total_tokens=8
    )
    assert e.energy_source == "integral" and e.gpus[0].energy_source == "integral"
    assert e.energy_j == pytest.approx(2000.0)
    assert e.problems == (
        "GPU 0: no energy counter (nvidia-smi, or a GPU before Volta): the energy is the power "
        "integral",
    )
    two = samples(0, 99.0, 111.0, counter=False) + samples(1, 99.0, 111.0, counter=False)
    e = window_energy(two, 100.0, 110.0, output_tokens=4, total_tokens=8)
    assert len(e.problems) == 1 and e.problems[0].startswith("GPUs 0, 1: no energy counter")


def test_throttle_time_by_reason_counts_only_the_window_and_not_idle() -> None:
    data = samples(0, 99.0, 103.0, reasons=0x1) + samples(0, 103.1, 106.0, reasons=0x4 | 0x20)
    data += samples(0, 106.1, 111.0, reasons=0)
    w = gpu_window(0, data, 100.0, 110.0)
    assert set(w.throttled_s) == {"sw_power_cap", "sw_thermal"}
    assert w.throttled_s["sw_power_cap"] == pytest.approx(3.0, abs=0.11)


def test_the_runs_throttling_and_busy_clock() -> None:
    """GPU 1 idles 3 s at 210 MHz, then runs throttled (sw_thermal, 1410 MHz) 3 s and at
    1740 MHz 4 s; GPU 0 runs at 1740 MHz throughout, briefly capped by an application clock
    (no throttling). The run's share is GPU 1's 30%; its busy clock ignores the idle reads."""
    gpu0 = samples(0, 99.0, 103.0, reasons=0x2) + samples(0, 103.1, 111.0)
    gpu1 = samples(1, 99.0, 103.0, reasons=0x1, sm=210)
    gpu1 += samples(1, 103.1, 106.0, reasons=0x20, sm=1410) + samples(1, 106.1, 111.0)
    e = window_energy(gpu0 + gpu1, 100.0, 110.0, output_tokens=1, total_tokens=1)
    assert e.throttled_share == pytest.approx(0.30, abs=0.011)
    assert e.throttle_reasons == ("sw_thermal",)
    assert e.gpus[1].sm_mhz_busy == 1740  # the median of 30 reads at 1410 and 50 at 1740
    assert e.gpus[1].sm_mhz_mean == pytest.approx((30 * 210 + 30 * 1410 + 40 * 1740) / 100, abs=20)
    assert e.sm_mhz_busy == 1740
    throttled = samples(0, 99.0, 111.0, reasons=0x4, sm=1410)
    e = window_energy(throttled, 100.0, 110.0, output_tokens=1, total_tokens=1)
    assert (e.throttled_share, e.throttle_reasons, e.sm_mhz_busy) == (1.0, ("sw_power_cap",), 1410)


def test_clock_spread_and_no_samples_at_all() -> None:
    data = samples(0, 99.0, 105.0, sm=1740) + samples(0, 105.1, 111.0, sm=1410)
    w = gpu_window(0, data, 100.0, 110.0)
    assert w.sm_mhz_mean == pytest.approx((1740 + 1410) / 2, abs=20)
    assert w.sm_mhz_stdev == pytest.approx(165.0, abs=5)
    e = window_energy([], 100.0, 110.0, output_tokens=1, total_tokens=1)
    assert e.energy_j is None and e.problems == ("no GPU sample in the window",)


def test_a_last_read_just_before_the_window_ends_still_covers_it() -> None:
    """A sampler's reads fall on its own schedule: the window may end part of an interval after
    the last one (and begin before the first). The counter is carried by the power then."""
    data = samples(0, 100.05, 109.95)
    e = window_energy(data, 100.0, 110.0, output_tokens=10, total_tokens=10)
    assert e.valid, e.problems
    assert e.energy_j == pytest.approx(2000.0, abs=0.01)
    plain = [s._replace(energy_mj=None) for s in data]
    e = window_energy(plain, 100.0, 110.0, output_tokens=10, total_tokens=10)
    assert e.energy_source == "integral" and e.energy_j == pytest.approx(2000.0)


def test_a_counter_that_went_back_is_no_figure() -> None:
    """A driver reload resets the counter: a delta of 0 or less is no energy. The integral is
    the figure, and the window is flagged."""
    data = [
        s._replace(energy_mj=5_000_000 - 1000 * i) for i, s in enumerate(samples(0, 99.0, 111.0))
    ]
    e = window_energy(data, 100.0, 110.0, output_tokens=1, total_tokens=1)
    assert e.energy_source == "integral" and e.energy_j == pytest.approx(2000.0, rel=1e-6)
    assert not e.valid and "did not advance over the window" in e.problems[0]


def test_a_gpu_without_counter_or_power_is_flagged() -> None:
    data = samples(0, 99.0, 111.0) + [
        s._replace(power_w=None, energy_mj=None) for s in samples(1, 99.0, 111.0)
    ]
    e = window_energy(data, 100.0, 110.0, output_tokens=1, total_tokens=1)
    assert e.energy_j is None and not e.valid
    assert any("GPU 1: no energy figure" in p for p in e.problems)


def test_the_boards_peak_adds_the_gpus_reads_of_one_moment() -> None:
    """nvidia-smi stamps each GPU's line on its own: reads of one moment a few ms apart still
    add up to all the boards' power (200 + 100 W), not one GPU's."""
    gpu0 = samples(0, 99.0, 111.0, counter=False)
    gpu1 = [s._replace(t=s.t + 0.003) for s in samples(1, 99.0, 111.0, counter=False, watts=100.0)]
    e = window_energy(gpu0 + gpu1, 100.0, 110.0, output_tokens=1, total_tokens=1)
    assert e.power_max_w == pytest.approx(300.0)
