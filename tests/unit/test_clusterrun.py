"""What a cluster run judges of its allocation before it launches (pure)."""

from __future__ import annotations

import pytest

from orchestrator.commands.clusterrun import few_cpus
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
