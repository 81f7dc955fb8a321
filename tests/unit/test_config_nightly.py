"""The playbook's ``nightly:`` settings: the nightly's own defaults, a threshold as '5%' or as
0.05, and each bad setting refused as one error at its own line, naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import load_playbook
from orchestrator.errors import ConfigError

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
        "baseline_nights": 7,
        "min_baseline_nights": 3,
        "min_repeats": 2,
        "alpha": 0.01,
        "thresholds": {},
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


def test_acceptance_positions_all_at_once_or_one_by_one(tmp_path: Path) -> None:
    text = (
        "  thresholds:\n    acceptance_pos: 2%\n    acceptance_pos_3: 0.1\n    ttft_ms_p99: 200%\n"
    )
    spec = load_playbook(playbook_file(tmp_path, text)).nightly
    # a latency may well double: a threshold above 100% is a threshold
    assert spec.thresholds == {"acceptance_pos": 0.02, "acceptance_pos_3": 0.1, "ttft_ms_p99": 2.0}


# (the nightly section, line, column, key path, message)
BAD: list[tuple[str, int, int, str, str]] = [
    (
        "  thresholds:\n    output_toks: 5%\n",
        6,
        5,
        "nightly.thresholds",
        f"unknown nightly metric 'output_toks': {KNOWN}",
    ),
    (
        "  thresholds:\n    acceptance_pos_0: 5%\n",
        6,
        5,
        "nightly.thresholds",
        f"unknown nightly metric 'acceptance_pos_0': {KNOWN}",
    ),
    (
        "  thresholds:\n    output_tok_s: -5%\n",
        6,
        5,
        "nightly.thresholds",
        f"threshold of output_tok_s: '-5%' {NOT_A_FRACTION}",
    ),
    (
        "  thresholds:\n    ttft_ms_p99: -0.1\n",
        6,
        5,
        "nightly.thresholds",
        f"threshold of ttft_ms_p99: -0.1 {NOT_A_FRACTION}",
    ),
    (
        "  thresholds:\n    output_tok_s: '5'\n",
        6,
        5,
        "nightly.thresholds",
        f"threshold of output_tok_s: '5' {NOT_A_FRACTION}",
    ),
    (
        "  thresholds:\n    output_tok_s: .inf\n",
        6,
        5,
        "nightly.thresholds",
        f"threshold of output_tok_s: inf {NOT_A_FRACTION}",
    ),
    (
        "  thresholds:\n    output_tok_s: true\n",
        6,
        5,
        "nightly.thresholds",
        f"threshold of output_tok_s: True {NOT_A_FRACTION}",
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
        "allowed keys here: baseline_nights, min_baseline_nights, min_repeats, alpha, thresholds"
    )
