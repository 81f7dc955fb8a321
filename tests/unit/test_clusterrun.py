"""What a cluster run judges of its allocation before it launches (pure)."""

from __future__ import annotations

import pytest

from orchestrator.backends.clusterrun import choose_port, few_cpus, port_candidates
from orchestrator.slurm.jobs import Allocation


@pytest.mark.parametrize(
    ("cpus", "gpus", "warned"),
    [(None, 2, False), (1, 1, True), (2, 1, True), (3, 1, False), (3, 2, True), (16, 2, False)],
)
def test_few_cpus_warns_below_one_per_worker_server_and_client(
    cpus: int | None, gpus: int, warned: bool
) -> None:
    found = few_cpus(Allocation(7, ("n1",), tuple(range(gpus)), cpus=cpus), gpus)
    assert (found is not None) == warned
    if found is not None:
        assert (found.check, found.severity, found.details) == (
            "slurm_cpus",
            "warning",
            {"cpus": cpus},
        )
        assert found.message.startswith(f"job 7 has {cpus} CPU")
        assert f"ask for at least {gpus + 2}" in found.message


@pytest.mark.parametrize(
    ("free", "taken", "chosen"),
    [
        ([8000, 8001], set(), 8000),  # its own port
        ([8000, 8001], {8000}, 8001),  # another run of the playbook loads there
        ([8002, 8003], set(), 8002),  # something else listens on 8000 and 8001
        ([8001], {8001}, None),
        ([], set(), None),
        ([8016], set(), None),  # past the ports tried
    ],
)
def test_choose_port_takes_the_first_free_one_from_the_planned_port(
    free: list[int], taken: set[int], chosen: int | None
) -> None:
    assert port_candidates(8000) == list(range(8000, 8016))
    assert choose_port(8000, free, taken) == chosen


def test_port_candidates_stop_at_the_last_port() -> None:
    assert port_candidates(65530) == list(range(65530, 65536))
