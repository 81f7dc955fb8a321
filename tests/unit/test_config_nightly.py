"""The playbook's ``nightly:`` settings: the nightly's own defaults, a threshold as '5%' or as
0.05, and each bad setting refused as one error at its own line, naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import load_playbook
from orchestrator.config.errors import ConfigValidationError
from orchestrator.errors import ConfigError
from orchestrator.nightly.verdict import Policy

# the body of `nightly:` starts on line 5
HEAD = "name: nb\nruns:\n  - {name: a, engine: vllm, model: m}\n"
KNOWN = (
    "one of output_tok_s, decode_tok_s_median, ttft_ms_median, ttft_ms_p99, tpot_ms_median, "
    "tpot_ms_p99, acceptance_length, failure_rate, acceptance_pos_<k>"
)
NOT_A_FRACTION = "is not a percentage ('5%') or a fraction (0.05)"


def playbook_file(tmp_path: Path, nightly: str = "") -> Path:
    path = tmp_path / "nb.yaml"
    path.write_text(HEAD + (f"nightly:\n{nightly}" if nightly else ""))
    return path


def test_without_a_nightly_section_the_nightlys_own_defaults(tmp_path: Path) -> None:
    spec = load_playbook(playbook_file(tmp_path)).nightly
    assert spec.model_dump() == {
        "baseline_nights": 20,
        "min_baseline_nights": 3,
        "min_repeats": 2,
        "alpha": 0.001,
        "confirm_alpha": 0.01,
        "run_alpha": 0.0001,
        "run_nights": 10,
        "drift_nights": 30,
        "drift_alpha": 0.0002,
        "thresholds": {},
    }
    # one declaration: the verdict's own policy has the same defaults
    policy = Policy()
    assert {k: getattr(policy, k) for k in spec.model_dump() if k != "thresholds"} == {
        k: v for k, v in spec.model_dump().items() if k != "thresholds"
    }


def test_settings_given_are_kept(tmp_path: Path) -> None:
    text = "  baseline_nights: 10\n  min_baseline_nights: 10\n  min_repeats: 5\n  alpha: 0.05\n"
    spec = load_playbook(playbook_file(tmp_path, text)).nightly
    assert (spec.baseline_nights, spec.min_baseline_nights, spec.min_repeats, spec.alpha) == (
        10,
        10,
        5,
        0.05,
    )


@pytest.mark.parametrize("given", ["5%", "'5%'", "' 5.0% '", "0.05"])
def test_a_threshold_as_a_percentage_or_a_fraction_is_the_same(tmp_path: Path, given: str) -> None:
    text = f"  thresholds:\n    output_tok_s: {given}\n    failure_rate: 1%\n"
    spec = load_playbook(playbook_file(tmp_path, text)).nightly
    assert spec.thresholds == {"output_tok_s": 0.05, "failure_rate": 0.01}


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("ttft_ms_p99: 300%", 3.0),  # a latency may grow 4x: a threshold above 100% alarms
        ("tpot_ms_median: '100%'", 1.0),
        ("output_tok_s: 99%", 0.99),
        ("output_tok_s: 0", 0.0),  # any significant fall
        ("acceptance_pos_2: 0.999", 0.999),
        ("failure_rate: 99%", 0.99),
        ("failure_rate: 0.001", 0.001),
    ],
)
def test_thresholds_at_the_edges_that_can_still_alarm(
    tmp_path: Path, given: str, kept: float
) -> None:
    spec = load_playbook(playbook_file(tmp_path, f"  thresholds:\n    {given}\n")).nightly
    assert list(spec.thresholds.values()) == [kept]


def test_each_bad_threshold_is_told_at_its_own_line(tmp_path: Path) -> None:
    text = "  thresholds:\n    output_tok_s: 5\n    ttft_ms_p99: 10%\n    failure_rate: 0\n"
    file = playbook_file(tmp_path, text)
    with pytest.raises(ConfigValidationError) as caught:
        load_playbook(file)
    told = [caught.value, *caught.value.others]
    assert [(e.line, e.column, e.path) for e in told] == [
        (6, 19, "nightly.thresholds.output_tok_s"),
        (8, 19, "nightly.thresholds.failure_rate"),
    ]


def test_acceptance_positions_all_at_once_or_one_by_one(tmp_path: Path) -> None:
    text = (
        "  thresholds:\n    acceptance_pos: 2%\n    acceptance_pos_3: 0.1\n    ttft_ms_p99: 200%\n"
    )
    spec = load_playbook(playbook_file(tmp_path, text)).nightly
    # a latency may well double: a threshold above 100% is a threshold
    assert spec.thresholds == {"acceptance_pos": 0.02, "acceptance_pos_3": 0.1, "ttft_ms_p99": 2.0}


# (the nightly section, line, column, key path, message); a threshold's error is at its own
# entry: its key for an unknown metric, its value for a bad value (column 19 after
# "    output_tok_s: "), on line 7 when a good entry comes first
GOOD_FIRST = "  thresholds:\n    ttft_ms_p99: 10%\n"
NEVER_ALARMS = (
    "can never be exceeded: {0} is better higher and cannot fall by 100% or more, so it "
    "would never alarm; give less than 100%"
)
FAILURE_RATE = (
    "must be above 0 and below 1 (100%): it is the rise in the share of failed requests, "
    "e.g. '1%' or 0.01"
)
BAD: list[tuple[str, int, int, str, str]] = [
    (
        "  thresholds:\n    output_toks: 5%\n",
        6,
        5,
        "nightly.thresholds.output_toks",
        f"unknown nightly metric 'output_toks': {KNOWN}",
    ),
    (
        GOOD_FIRST + "    acceptance_pos_0: 5%\n",
        7,
        5,
        "nightly.thresholds.acceptance_pos_0",
        f"unknown nightly metric 'acceptance_pos_0': {KNOWN}",
    ),
    (
        "  thresholds:\n    output_tok_s: -5%\n",
        6,
        19,
        "nightly.thresholds.output_tok_s",
        f"threshold of output_tok_s: '-5%' {NOT_A_FRACTION}",
    ),
    (
        "  thresholds:\n    ttft_ms_p99: -0.1\n",
        6,
        18,
        "nightly.thresholds.ttft_ms_p99",
        f"threshold of ttft_ms_p99: -0.1 {NOT_A_FRACTION}",
    ),
    (
        GOOD_FIRST + "    output_tok_s: '5'\n",
        7,
        19,
        "nightly.thresholds.output_tok_s",
        f"threshold of output_tok_s: '5' {NOT_A_FRACTION}",
    ),
    (
        "  thresholds:\n    output_tok_s: .inf\n",
        6,
        19,
        "nightly.thresholds.output_tok_s",
        f"threshold of output_tok_s: inf {NOT_A_FRACTION}",
    ),
    (
        "  thresholds:\n    output_tok_s: true\n",
        6,
        19,
        "nightly.thresholds.output_tok_s",
        f"threshold of output_tok_s: True {NOT_A_FRACTION}",
    ),
    # a bare number of 1 or more is a fraction of 100% or more: 5 meant 5%, surely
    (
        GOOD_FIRST + "    output_tok_s: 5\n",
        7,
        19,
        "nightly.thresholds.output_tok_s",
        "threshold of output_tok_s: 5 as a fraction is 500%: write '5%' or 0.05",
    ),
    (
        GOOD_FIRST + "    output_tok_s: 1\n",
        7,
        19,
        "nightly.thresholds.output_tok_s",
        "threshold of output_tok_s: 1 as a fraction is 100%: write '1%' or 0.01",
    ),
    (
        "  thresholds:\n    ttft_ms_p99: 2.5\n",
        6,
        18,
        "nightly.thresholds.ttft_ms_p99",
        "threshold of ttft_ms_p99: 2.5 as a fraction is 250%: write '2.5%' or 0.025",
    ),
    (
        "  thresholds:\n    failure_rate: 1\n",
        6,
        19,
        "nightly.thresholds.failure_rate",
        "threshold of failure_rate: 1 as a fraction is 100%: write '1%' or 0.01",
    ),
    # a figure that is better higher cannot fall by 100%: such a threshold never alarms
    (
        GOOD_FIRST + "    output_tok_s: 100%\n",
        7,
        19,
        "nightly.thresholds.output_tok_s",
        "threshold of output_tok_s: '100%' " + NEVER_ALARMS.format("output_tok_s"),
    ),
    (
        "  thresholds:\n    decode_tok_s_median: '120%'\n",
        6,
        26,
        "nightly.thresholds.decode_tok_s_median",
        "threshold of decode_tok_s_median: '120%' " + NEVER_ALARMS.format("decode_tok_s_median"),
    ),
    (
        "  thresholds:\n    acceptance_length: 150%\n",
        6,
        24,
        "nightly.thresholds.acceptance_length",
        "threshold of acceptance_length: '150%' " + NEVER_ALARMS.format("acceptance_length"),
    ),
    (
        "  thresholds:\n    acceptance_pos: 100%\n",
        6,
        21,
        "nightly.thresholds.acceptance_pos",
        "threshold of acceptance_pos: '100%' " + NEVER_ALARMS.format("acceptance_pos"),
    ),
    (
        "  thresholds:\n    acceptance_pos_2: 100%\n",
        6,
        23,
        "nightly.thresholds.acceptance_pos_2",
        "threshold of acceptance_pos_2: '100%' " + NEVER_ALARMS.format("acceptance_pos_2"),
    ),
    # a failure rate's threshold is an absolute rise: a fraction strictly between 0 and 1
    (
        GOOD_FIRST + "    failure_rate: 0\n",
        7,
        19,
        "nightly.thresholds.failure_rate",
        f"threshold of failure_rate: 0 {FAILURE_RATE}",
    ),
    (
        "  thresholds:\n    failure_rate: 100%\n",
        6,
        19,
        "nightly.thresholds.failure_rate",
        f"threshold of failure_rate: '100%' {FAILURE_RATE}",
    ),
    (  # a mapping on one line: the entry's own column
        "  thresholds: {ttft_ms_p99: 10%, output_tok_s: 1.5}\n",
        5,
        48,
        "nightly.thresholds.output_tok_s",
        "threshold of output_tok_s: 1.5 as a fraction is 150%: write '1.5%' or 0.015",
    ),
    ("  min_repeats: 1\n", 5, 16, "nightly.min_repeats", "must be >= 2, found 1"),
    ("  min_repeats: 1.5\n", 5, 16, "nightly.min_repeats", "expected an integer, found 1.5"),
    ("  alpha: 0\n", 5, 10, "nightly.alpha", "must be > 0 and < 1, found 0"),
    ("  alpha: 1\n", 5, 10, "nightly.alpha", "must be > 0 and < 1, found 1"),
    ("  alpha: -0.5\n", 5, 10, "nightly.alpha", "must be > 0 and < 1, found -0.5"),
    (
        "  baseline_nights: 0\n",
        5,
        20,
        "nightly.baseline_nights",
        "must be between 1 and 365, found 0",
    ),
    (
        "  baseline_nights: 3\n  min_baseline_nights: 5\n",
        5,
        3,
        "nightly",
        "min_baseline_nights 5 is above baseline_nights 3",
    ),
    (
        "  baselines: 3\n",
        5,
        3,
        "nightly.baselines",
        "unknown key 'baselines' (did you mean 'baseline_nights'?)",
    ),
]


@pytest.mark.parametrize(
    ("nightly", "line", "column", "path", "message"),
    BAD,
    ids=[case[0].strip().replace("\n", " ") for case in BAD],
)
def test_a_bad_setting_is_one_error_at_its_line(
    tmp_path: Path, nightly: str, line: int, column: int, path: str, message: str
) -> None:
    file = playbook_file(tmp_path, nightly)
    with pytest.raises(ConfigError) as caught:
        load_playbook(file)
    err = caught.value
    assert (err.file, err.line, err.column, err.path, err.message) == (
        str(file),
        line,
        column,
        path,
        message,
    )
    assert str(err) == f"{file}:{line}:{column}: {path}: {message}"


def test_an_unknown_key_lists_the_settings_there_are(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_playbook(playbook_file(tmp_path, "  baselines: 3\n"))
    assert caught.value.hint == (
        "allowed keys here: baseline_nights, min_baseline_nights, min_repeats, alpha, "
        "confirm_alpha, run_alpha, run_nights, drift_nights, drift_alpha, thresholds"
    )
