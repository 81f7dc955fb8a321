"""What each kind of place is, as plain data: its noun, whether its GPUs bound a run, whether a
session reaches a front door, and how the dry run and the planner word it.

Declared here, below the engines and the runner, because the planner (``engines/plan.py``), the
estimate and the doctor's preflight read these facts while the backend that drives a place of
the kind (``backends/``) sits above them. Each backend carries its kind's facts (``place``), so
a kind is described once, here, and driven once, there.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.hostconfig import HostConfig


@dataclass(frozen=True)
class PlaceKind:
    """One kind of place's facts (``HostConfig.backend`` names the kind)."""

    kind: str  # the value of HostConfig.backend and the key of backends.base.REGISTRY
    noun: str  # what a place is called in messages: "host", "cluster"
    # whether a run's GPUs must fit the place as hosts.yaml declares it whatever the playbook
    # says (a cluster gives one node per run; a host only bounds runs that share its GPUs)
    bounded_gpus: bool
    # whether a place's session reaches a front door (a login node) rather than where the
    # engine runs: what the doctor reads there is checked again once a run is placed
    front_door: bool
    # how a dry run describes the place's schedule, when not as a host's ("" then); {gpus} is
    # its GPU count as hosts.yaml says it
    placement: str
    # why a run needing more GPUs than the place declares can never get them, when not as on
    # a host ("" then); {name}: the place, {have}: its GPUs as declared
    gpu_shortfall: str


HOST = PlaceKind(
    kind="ssh", noun="host", bounded_gpus=False, front_door=False, placement="", gpu_shortfall=""
)
CLUSTER = PlaceKind(
    kind="slurm",
    noun="cluster",
    bounded_gpus=True,
    front_door=True,
    placement=(
        "Slurm, {gpus} per node, each run in an allocation of its own (times below leave out "
        "the queue and assume one run at a time)"
    ),
    gpu_shortfall=(
        "the Slurm cluster {name} gives {have} per node (hosts.yaml: gpus_per_node), and orch "
        "asks for one node per run"
    ),
)
# kind -> its facts, in the order commands list places
KINDS: dict[str, PlaceKind] = {k.kind: k for k in (HOST, CLUSTER)}


def place_kind(host: HostConfig) -> PlaceKind:
    """The facts of ``host``'s kind (a KeyError for an unknown one: config validates)."""
    return KINDS[host.backend]
