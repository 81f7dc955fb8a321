"""Slurm clusters in hosts.yaml: the file model (``clusters:``), resolved into a `ClusterConfig`.

A cluster is reached through its login node, which is an ordinary SSH host (``login``): every
transport, host-key and ProxyJump rule of hosts applies to it unchanged. The other fields say how
to ask Slurm for GPUs; they are handed to ``sbatch`` as argv items, never inside a shell string,
so they are checked here only for what Slurm itself would reject late or misread.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema

from orchestrator.config.fields import EnvDict, StrictModel
from orchestrator.config.hostconfig import (
    DEFAULT_PYTHON,
    DEFAULT_WORKDIR,
    ClusterConfig,
    HostConfig,
)
from orchestrator.config.yamlload import Mark

SLURM_TIME_FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
_TIME = re.compile(
    r"(?P<minutes>\d+)(?::(?P<mm_ss>\d\d?))?"  # MM, MM:SS
    r"|(?P<hours>\d+):(?P<h_mm>\d\d?):(?P<h_ss>\d\d?)"  # HH:MM:SS
    r"|(?P<days>\d+)-(?P<d_hh>\d\d?)(?::(?P<d_mm>\d\d?)(?::(?P<d_ss>\d\d?))?)?"  # D-HH[:MM[:SS]]
)
_SLURM_NAME = re.compile(r"[A-Za-z0-9._-]+")
# sbatch options orch sets itself, by the hosts.yaml key that sets them (None: orch's own)
_MANAGED = {
    "--partition": "partition",
    "-p": "partition",
    "--account": "account",
    "-A": "account",
    "--qos": "qos",
    "-q": "qos",
    "--gres": "gres and gpus_per_node",
    "--time": "time_limit",
    "-t": "time_limit",
    "--job-name": None,
    "-J": None,
    "--output": None,
    "-o": None,
    "--parsable": None,
    "--wrap": None,
    "--nodes": None,
    "-N": None,
    "--ntasks": None,
    "-n": None,
    # the GPUs a job gets are the run's (--gres); these would change them
    "--gpus": "gres and gpus_per_node",
    "-G": "gres and gpus_per_node",
    "--gpus-per-node": "gres and gpus_per_node",
    "--gpus-per-task": "gres and gpus_per_node",
    # orch follows each job from submission to its end itself
    "--array": None,
    "-a": None,
    "--wait": None,
    "-W": None,
    "--hold": None,
    "-H": None,
    "--test-only": None,
    "--chdir": None,
    "-D": None,
    "--error": None,
    "-e": None,
    "--input": None,
    "-i": None,
}


def check_slurm_time(value: str) -> str:
    """A time limit sbatch accepts; checked here so a typo fails at load, not at submission."""
    m = _TIME.fullmatch(value.strip())
    if m is None or any(
        m[g] is not None and int(m[g]) >= 60 for g in ("mm_ss", "h_mm", "h_ss", "d_mm", "d_ss")
    ):
        raise ValueError(
            f"time_limit must be a Slurm time ({SLURM_TIME_FORMATS}, e.g. '02:00:00' or "
            f"'1-12'); found {value!r}"
        )
    if m["d_hh"] is not None and int(m["d_hh"]) >= 24:
        raise ValueError(f"time_limit {value!r}: the hours after 'D-' must be below 24")
    return value.strip()


def _slurm_name(value: str) -> str:
    if not _SLURM_NAME.fullmatch(value):
        raise ValueError(
            f"expected one Slurm name (letters, digits, '.', '_', '-'); found {value!r}"
        )
    return value


def _gres_type(value: str) -> str:
    if value.startswith("gpu:") or value == "gpu":
        raise ValueError(
            f"gres is the GPU type alone (e.g. 'a6000'; orch adds 'gpu:' and the count); "
            f"found {value!r}"
        )
    return _slurm_name(value)


def _sbatch_option(value: str) -> str:
    if not value.startswith("-") or value in ("-", "--"):
        raise ValueError(
            f"each sbatch option is one argv item starting with '-' (e.g. '--constraint=a6000'); "
            f"found {value!r}"
        )
    name = value.split("=", 1)[0] if value.startswith("--") else value[:2]
    # sbatch takes any unambiguous start of a long option (--part=gpu is --partition=gpu)
    managed = next(
        (m for m in _MANAGED if m == name or (len(name) > 3 and m.startswith(name))), None
    )
    if managed is not None:
        key = _MANAGED[managed]
        where = f"set `{key}:` instead" if key else "orch manages it for every job"
        raise ValueError(f"sbatch option {value!r} is not allowed here: {where}")
    return value


def _absolute(value: str) -> str:
    if not posixpath.isabs(value):
        raise ValueError(
            f"expected an absolute path on the cluster (compute nodes do not expand '~' or "
            f"resolve relative paths like a login shell); found {value!r}"
        )
    return value


SlurmName = Annotated[str, AfterValidator(_slurm_name)]
AbsPath = Annotated[str, AfterValidator(_absolute)]
# YAML may read a time as a number (``90``, or ``1:30`` in base 60): load_inventory puts the
# text as written back before validation, so the schema allows a number too.
SlurmTime = Annotated[
    str, AfterValidator(check_slurm_time), WithJsonSchema({"type": ["string", "integer"]})
]


class LoginFields(StrictModel):
    """The login node: an ordinary SSH host (a host's keys, minus gpus, tags and transport)."""

    model_config = ConfigDict(title="Login")

    address: str | None = Field(
        None, description="IP or DNS name; an alias from ~/.ssh/config works too."
    )
    port: Annotated[int, Field(ge=1, le=65535)] | None = Field(
        None, description="SSH port (default 22 or ~/.ssh/config)."
    )
    user: str | None = Field(
        None, description="SSH user (default: ~/.ssh/config or the local user)."
    )
    identity_file: str | None = Field(None, description="Private key file, e.g. ~/.ssh/hpc.")
    proxy_jump: str | None = Field(None, description="Jump host, as OpenSSH's ProxyJump.")
    python: str | None = Field(
        None, description=f"The login node's Python 3 for orch's agent (default {DEFAULT_PYTHON})."
    )
    env: EnvDict | None = Field(
        None, description="Environment of orch's commands on the login node, as ${VAR} allows."
    )
    connect_timeout: Annotated[float, Field(gt=0)] | None = Field(
        None, description="Seconds to wait for SSH to connect (default 15)."
    )
    agent_timeout_s: Annotated[float, Field(gt=0)] | None = Field(
        None, description="Seconds a quick agent call on the login node may take."
    )


class ClusterFields(StrictModel):
    """A Slurm cluster: its login node and how to ask it for GPUs."""

    model_config = ConfigDict(title="Cluster")

    login: LoginFields = Field(description="The login node, reached over SSH like a host.")
    partition: SlurmName = Field(description="Slurm partition to submit to (sbatch --partition).")
    account: SlurmName | None = Field(None, description="Slurm account (sbatch --account).")
    qos: SlurmName | None = Field(None, description="Quality of service (sbatch --qos).")
    gres: Annotated[str, AfterValidator(_gres_type)] | None = Field(
        None,
        description="GPU gres type, e.g. a6000 (asks for gpu:a6000:N); unset asks for gpu:N.",
    )
    gpus_per_node: int = Field(1, ge=1, description="GPUs per node (the N of --gres=gpu:N).")
    time_limit: SlurmTime | None = Field(
        None,
        description=f"Job time limit ({SLURM_TIME_FORMATS}), e.g. '02:00:00'. "
        "Default: the partition's.",
    )
    sbatch_options: list[Annotated[str, AfterValidator(_sbatch_option)]] | None = Field(
        None, description="Extra sbatch options, one argv item each, e.g. ['--exclusive']."
    )
    python: AbsPath = Field(
        description="The engine's Python on the compute nodes, e.g. /shared/venvs/vllm/bin/python."
    )
    workdir: AbsPath = Field(
        description="orch's directory on the compute nodes, e.g. /shared/scratch/orch (the "
        "login node's workdir too when shared_fs)."
    )
    shared_fs: bool = Field(
        True,
        description="Whether workdir is on a filesystem shared by login and compute nodes; "
        "false: orch copies its files through the job, and the login keeps its own in "
        "~/.cache/orch.",
    )
    env: EnvDict | None = Field(
        None,
        description="Environment of the engine's jobs; values may reference the controller's "
        "environment as ${VAR}.",
    )
    tags: list[str] | None = Field(
        None, description="Labels for selecting clusters (playbook `hosts:`, --only)."
    )


def cluster_config(
    name: str,
    spec: ClusterFields,
    *,
    source: str,
    env_marks: dict[str, Mark],
    login_env_marks: dict[str, Mark],
) -> ClusterConfig:
    """The resolved cluster; its login node is a host named like the cluster (a cluster's name
    never clashes with a host's, so the connection pool keeps them apart)."""
    login = spec.login
    return ClusterConfig(
        name=name,
        login=HostConfig(
            name=name,
            address=login.address,
            port=login.port,
            user=login.user,
            identity_file=login.identity_file,
            proxy_jump=login.proxy_jump,
            python=login.python or DEFAULT_PYTHON,
            # the login node's own files (the job script, orch's agent) go in the cluster's
            # workdir when compute nodes see it, else in the login's default workdir
            workdir=spec.workdir if spec.shared_fs else DEFAULT_WORKDIR,
            env=dict(login.env or {}),
            connect_timeout=login.connect_timeout,
            agent_timeout_s=login.agent_timeout_s,
            source=source,
            env_marks=login_env_marks,
        ),
        partition=spec.partition,
        account=spec.account,
        qos=spec.qos,
        gres=spec.gres,
        gpus_per_node=spec.gpus_per_node,
        time_limit=spec.time_limit,
        sbatch_options=tuple(spec.sbatch_options or ()),
        python=spec.python,
        workdir=spec.workdir,
        shared_fs=spec.shared_fs,
        env=dict(spec.env or {}),
        tags=tuple(dict.fromkeys(spec.tags or ())),
        source=source,
        env_marks=env_marks,
    )
