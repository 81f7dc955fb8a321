"""``tests/fixtures/truth.py`` on a hand-made server history: two load points served by one
server (as in a sweep), SGLang's own start-up request, and exact figures per point."""

from __future__ import annotations

from dataclasses import astuple
from typing import Any

import pytest

from tests.fixtures.truth import PointTruth, acceptance_of, measured_truth, point_truth

T0 = 1024.0  # small: epoch-sized times would cost the exact figures their last digits


def served(arrival: float, ttft: float, chunks: list[int], gap: float, **extra: Any) -> dict:
    """A simulator record: first token after ``ttft``, then one chunk every ``gap`` seconds."""
    first = T0 + arrival + ttft
    times = [first + i * gap for i in range(len(chunks))]
    steps = len(chunks) - 1
    return {
        "warmup": False,
        "prompt_tokens": 10,
        "output_tokens": sum(chunks),
        "arrival_time": T0 + arrival,
        "first_token_time": first,
        "last_token_time": times[-1],
        "finish_time": times[-1],
        "ttft_s": ttft,
        "chunk_tokens": chunks,
        "chunk_times": times,
        "decode_steps": steps,
        "num_drafts": steps,
        "num_accepted_tokens": sum(chunks[1:]) - steps,
        **extra,
    }


def sent(index: int, at: float, end: float, tokens: int, *, warmup: bool = False) -> dict:
    """A requests.jsonl line (only the keys the fixture reads): the client started it ``at``
    seconds after T0 (its own clock starts at T0 - 5) and saw its last chunk at ``end``."""
    return {
        "index": index,
        "warmup": warmup,
        "start": at + 5,
        "start_wall": T0 + at - 0.002,  # sent just before the server saw it
        "end": end + 5,
        "prompt_tokens": 10,
        "output_tokens": tokens,
    }


TRUTH = {
    "requests": [
        served(-30.0, 0.01, [1, 1], 0.01, warmup=True),  # SGLang's own, at start-up
        # point 1: one warm-up, then two measured requests
        served(0.0, 0.10, [1, 3], 0.05),
        served(0.2, 0.10, [1, 3, 3], 0.05),
        served(0.2, 0.30, [1, 2, 1, 1], 0.10),
        # point 2, after a cache reset: one warm-up, then three measured
        served(10.0, 0.05, [1, 1], 0.02),
        served(10.1, 0.04, [1, 4, 4], 0.04),
        served(10.1, 0.06, [1, 2], 0.04),
        served(10.1, 0.08, [1, 4, 2, 1], 0.04),
    ]
}
POINT_1 = [sent(0, 0.0, 0.15, 4, warmup=True), sent(1, 0.2, 0.4, 7), sent(2, 0.2, 0.8, 5)]
POINT_2 = [
    sent(3, 10.0, 10.07, 2, warmup=True),
    sent(4, 10.1, 10.22, 9),
    sent(5, 10.1, 10.2, 3),
    sent(6, 10.1, 10.3, 8),
]


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        (
            POINT_1,  # measured: 7 tokens (arrival 0.2, last token 0.4), 5 (0.2 -> 0.8)
            PointTruth(
                requests=2,
                output_tokens=12,
                output_tok_s=12 / 0.6,
                tpot_ms_median=(100 / 6 + 300 / 4) / 2,  # (last - first token) / (tokens - 1)
                ttft_ms_median=(100 + 300) / 2,
                acceptance_length=1 + (4 + 1) / (2 + 3),  # accepted drafts / decode steps
            ),
        ),
        (
            POINT_2,  # measured: 9 tokens (10.1 -> 10.22), 3 (-> 10.2), 8 (-> 10.3)
            PointTruth(
                requests=3,
                output_tokens=20,
                output_tok_s=20 / 0.2,
                tpot_ms_median=120 / 7,  # of 80 / 8, 40 / 2, 120 / 7
                ttft_ms_median=60.0,  # of 40, 60, 80
                acceptance_length=1 + (6 + 1 + 4) / (2 + 1 + 3),
            ),
        ),
    ],
)
def test_each_point_gets_exactly_its_own_requests(records: list, expected: PointTruth) -> None:
    assert astuple(point_truth(TRUTH, records)) == pytest.approx(astuple(expected), rel=1e-9)


def test_acceptance_per_position() -> None:
    assert acceptance_of([0, 2, 3, 1], 3) == (1 + 6 / 4, [3 / 4, 2 / 4, 1 / 4])


def test_a_measurement_the_simulator_did_not_serve_is_refused() -> None:
    with pytest.raises(AssertionError, match="served 3 requests while the client sent 4"):
        measured_truth(TRUTH, [*POINT_1, sent(9, 5.0, 5.1, 5)])  # nothing arrived at 5.0
    late = [*POINT_1[:2], sent(2, 0.5, 0.8, 5)]  # the server saw it arrive at 0.2
    with pytest.raises(AssertionError, match="0.30 s from its send time"):
        measured_truth(TRUTH, late)
    other = [dict(r, output_tokens=r["output_tokens"] + 1) for r in POINT_1]
    with pytest.raises(AssertionError, match="not the ones the client sent"):
        measured_truth(TRUTH, other)
