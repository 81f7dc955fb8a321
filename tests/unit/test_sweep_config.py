"""Sweeps in a playbook: which measurements a workload asks for, in which order and folders,
and the errors of a sweep written wrong, each at its own line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import RunSpec, load_playbook
from orchestrator.errors import ConfigError
from orchestrator.results.model import LoadPoint
from orchestrator.sweep.points import planned, point_folder


def run(**workload: Any) -> RunSpec:
    return RunSpec.model_validate(
        {"name": "r", "engine": "vllm", "model": "m", "workload": workload}
    )


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        ({}, [("", "c=1", 1, None)]),
        ({"concurrency": 8}, [("", "c=8", 8, None)]),
        ({"request_rate": 2.5}, [("", "rate=2.5", 1, 2.5)]),
        (
            {"concurrency": [1, 4]},
            [("points/00-c1-r1", "c=1", 1, None), ("points/01-c4-r1", "c=4", 4, None)],
        ),
        (
            {"concurrency": 2, "repeat": 2},
            [("points/00-c2-r1", "c=2", 2, None), ("points/00-c2-r2", "c=2", 2, None)],
        ),
        (
            {"request_rate": [0.5, 4], "concurrency": 16},
            [
                ("points/00-rate0.5-r1", "rate=0.5", 16, 0.5),
                ("points/01-rate4-r1", "rate=4", 16, 4.0),
            ],
        ),
    ],
)
def test_measurements_of_a_workload(
    workload: dict[str, Any], expected: list[tuple[str, str, int, float | None]]
) -> None:
    got = [
        (m.folder, m.point.label, m.run.workload.point_concurrency, m.run.workload.point_rate)
        for m in planned(run(**workload))
    ]
    assert got == expected


def test_an_open_loop_sweep_keeps_its_written_cap_and_no_default_one() -> None:
    capped = planned(run(request_rate=[1, 2], concurrency=8))
    assert [m.run.workload.open_loop_cap for m in capped] == [8, 8]
    uncapped = planned(run(request_rate=[1, 2]))
    assert [m.run.workload.open_loop_cap for m in uncapped] == [None, None]


def test_point_folders_sort_in_measurement_order() -> None:
    points = [
        LoadPoint(kind="concurrency", value=v, index=i) for i, v in enumerate([1, 2, 16, 128])
    ]
    folders = [point_folder(p) for p in points]
    assert folders == sorted(folders)
    assert folders[-1] == "points/03-c128-r1"


def write(tmp_path: Path, workload: str) -> Path:
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: p\n"
        "runs:\n"
        "  - name: r\n"
        "    engine: vllm\n"
        "    model: m\n"
        "    workload:\n" + "".join(f"      {line}\n" for line in workload.splitlines())
    )
    return file


@pytest.mark.parametrize(
    ("workload", "line", "message"),
    [
        ("concurrency: [1, 0, 4]", 7, "must be >= 1, found 0"),
        ("concurrency: [1, 2]\nrequest_rate: [1, 2]", 7, "both lists"),
        ("request_rate: 2\nconcurrency: [1, 2]", 7, "give one value"),
        ("concurrency: []", 7, "at least 1 item"),
        ("repeat: 0", 7, "must be >= 1, found 0"),
        ("slo: {targets: ['ttft_ms_p98 <= 3']}", 7, "did you mean 'ttft_ms_p99'"),
        ("slo: {targets: ['tpot_ms_median >= 3']}", 7, "is bounded with <="),
        ("slo: {targets: ['ttft_ms_p99 <= 3'], search: concurrency}", 7, "needs range"),
        ("slo: {targets: ['ttft_ms_p99 <= 3'], search: concurrency, range: [8, 2]}", 7, "below"),
        (
            "request_rate: 1\nslo: {targets: ['ttft_ms_p99 <= 3'], search: concurrency, range: [1, 8]}",
            7,
            "searches a closed loop",
        ),
        (
            "slo: {targets: ['ttft_ms_p99 <= 3'], search: request_rate, range: [1, 8]}",
            7,
            "searches an open loop",
        ),
        (
            "slo: {targets: ['ttft_ms_p99 <= 3'], search: concurrency, range: [1.5, 8]}",
            7,
            "whole numbers",
        ),
    ],
)
def test_a_sweep_written_wrong_is_one_located_error(
    tmp_path: Path, workload: str, line: int, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_playbook(write(tmp_path, workload))
    assert info.value.line == line
    assert message in info.value.message
    assert "constrained-" not in str(info.value.path)  # no pydantic union tags in a path


def test_slo_targets_are_normalised() -> None:
    spec = run(slo={"targets": ["ttft_ms_p99<=2000", " tpot_ms_median <= 50.0 "]})
    assert spec.workload.slo is not None
    assert spec.workload.slo.targets == ["ttft_ms_p99 <= 2000", "tpot_ms_median <= 50"]
