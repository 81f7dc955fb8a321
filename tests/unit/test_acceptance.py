from __future__ import annotations

import pytest

from orchestrator.metrics.acceptance import combine_acceptance, relative_gap


@pytest.mark.parametrize(
    ("prom", "log", "client", "length", "source", "flags"),
    [
        (5.0, 4.9, 4.95, 5.0, "prometheus", []),
        (None, 2.9, 2.8, 2.9, "log", []),
        (None, None, 1.04, 1.04, "client", []),
        (
            5.0,
            4.0,
            4.9,
            5.0,
            "prometheus",
            [
                "prometheus 5.000 vs log 4.000 differ by 20%",
                "log 4.000 vs client 4.900 differ by 18%",
            ],
        ),
        (2.0, 2.2, None, 2.0, "prometheus", []),  # 9.1%: within 10%
        (None, None, None, None, None, []),
    ],
)
def test_combine_picks_first_source_and_flags_gaps(
    prom, log, client, length, source, flags
) -> None:
    acc = combine_acceptance(prometheus=prom, log=log, client=client)
    assert acc.length == length
    assert acc.source == source
    assert acc.disagreement == flags


def test_plain_decoding_has_no_acceptance() -> None:
    acc = combine_acceptance(prometheus=None, log=None, client=1.0, speculative=False)
    assert acc.length is None and acc.source is None and acc.client == 1.0


def test_per_position_prefers_prometheus() -> None:
    acc = combine_acceptance(
        prometheus=3.0,
        log=3.0,
        client=3.0,
        per_position_prometheus=[0.9, 0.7],
        per_position_log=[0.8, 0.6],
    )
    assert (acc.per_position, acc.per_position_source) == ([0.9, 0.7], "prometheus")
    acc = combine_acceptance(prometheus=None, log=3.0, client=3.0, per_position_log=[0.8, 0.6])
    assert (acc.per_position, acc.per_position_source) == ([0.8, 0.6], "log")


def test_relative_gap() -> None:
    assert relative_gap(4.0, 5.0) == pytest.approx(0.2)
    assert relative_gap(0.0, 0.0) == 0.0
