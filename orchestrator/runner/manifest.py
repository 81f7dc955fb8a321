"""A run's manifest.json: what was asked for and where, known before its server starts.

Its model is ``results/manifest.py: Manifest``. Written (by ``execute.begin_run``, through
that model) the moment the run starts and never rewritten, with every secret as ``***``: the resolved run spec, argv, env, the host's facts, orch's version, the
playbook's git commit, the doctor's findings and the prompts.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator import __version__
from orchestrator.config import Playbook
from orchestrator.config.hostconfig import mask_json
from orchestrator.engines import engine_for
from orchestrator.engines.plan import PlannedLaunch
from orchestrator.results.manifest import (
    GitCommit,
    HostAddress,
    Manifest,
    PlaybookSource,
    PromptsRead,
)
from orchestrator.runner.preflight import DoctorResult, HostSession
from orchestrator.runner.state import RunJob


def git_commit(path: Path) -> dict[str, Any] | None:
    """The commit (and dirtiness) of the git checkout holding the playbook, if any."""
    try:
        head = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": head, "dirty": bool(dirty.strip())}


def masked_run(plan: PlannedLaunch) -> dict[str, Any]:
    """The resolved run spec with its secrets as ``***``, like the argv and env next to it.

    The spec holds the user's own values: a literal under a secret-looking env key, an
    ``--api-key`` in extra_args. (``${VAR}`` references stay unexpanded in it.)
    """
    adapter = engine_for(plan.run)
    secrets = adapter.secrets(plan.run, plan.host)
    dump = plan.run.model_dump(mode="json")
    dump["env"] = adapter.masked_env(dump.get("env") or {}, secrets)
    return {key: mask_json(value, secrets) for key, value in dump.items()}


def with_gpu_ids(record: dict[str, Any], gpu_ids: Sequence[int]) -> dict[str, Any]:
    """``record`` for a run given GPUs on a shared host (``share_gpus``): their ids, and in
    its env the variables the agent launches it with (``remote/lifecycle.launch_env``)."""
    env = dict(record.get("env") or {})
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_ids)
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return {**record, "env": env, "gpu_ids": list(gpu_ids)}


def manifest(
    job: RunJob, playbook: Playbook, session: HostSession, doctor: DoctorResult
) -> dict[str, Any]:
    """The run's manifest (``results.manifest.Manifest``) as the dict a run carries until
    ``execute.begin_run`` writes it through the model; built through the model, so a field
    it does not declare is an error here."""
    plan = job.plan
    facts = session.facts
    source = playbook.source_path
    git = git_commit(source.parent) if source else None
    record = Manifest(
        run=masked_run(plan),
        run_id=job.run_id,
        host=plan.host.name,
        host_config=HostAddress(
            address=plan.host.address,
            port=plan.host.port,
            user=plan.host.user,
            python=plan.host.python,
            workdir=plan.host.workdir,
            transport=plan.host.transport,
            gpus=str(plan.host.gpus) if plan.host.gpus else None,
        ),
        argv=plan.argv,
        env=plan.env_masked,
        port=plan.port,
        parallelism={**plan.parallelism.to_json(), "gpus": plan.gpus},
        host_facts=facts,
        engine_version=facts.engines.get(str(plan.run.engine)) if facts else None,
        orch_version=__version__,
        playbook=PlaybookSource(
            name=playbook.name,
            path=str(source) if source else None,
            git=GitCommit.model_validate(git) if git else None,
        ),
        doctor=list(doctor.findings),
        prompts=PromptsRead(
            source=job.prompts.source,
            sha256=job.prompts.sha256,  # the content read (None: random prompts)
            count=len(job.prompts.items),
            skipped=job.prompts.skipped,
            input_len=job.prompts.input_len,
        ),
    )
    return record.to_json()
