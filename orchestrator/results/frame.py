"""Results as data for notebooks: one pandas DataFrame row per measurement.

``load(path_or_paths)`` reads every ``summary.json`` under one results folder, several, or a
parent folder holding several (``results/``: each ``<stamp>-<playbook>`` folder in it), through
the run result model (``RunResult``) only, and returns a row per run x load point x repeat with
the run's settings as columns (``COLUMNS``). The figures are the metric catalogue's
(``orchestrator.metrics.catalogue``), as measured; the derived ones: throughput per GPU = the figure / ``gpu_count`` (the
server's tensor-parallel size when a result did not record its GPUs), ``total_tok_s`` = (prompt
+ output tokens) / the measured window, ``interactivity`` = 1000 / median TPOT (tok/s/user).
Unknown values are NaN (numbers) or None (text). ``results_dir`` names the folder a row came
from, as the path was given (``results/a`` when ``results`` was given).

The workload each figure was measured on closes the row (``WORKLOAD``: the prompts and their
content's SHA-256, the request budget, lengths, API, temperature ...), so rows of different
workloads are never grouped together unseen: group on them (and ``model``) before comparing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from orchestrator.errors import OrchError
from orchestrator.metrics import catalogue
from orchestrator.results.model import RunResult
from orchestrator.results.report import energy_problems, gpu_count, load_results
from orchestrator.results.store import set_aside_name

IDENTITY = [
    "results_dir",
    "folder",
    "run",
    "host",
    "key",
    "config",
    "engine",
    "method",
    "draft_model",
    "num_draft_tokens",
    "model",
    "tensor_parallel",
    "gpu_name",
    "gpu_count",
    "engine_version",
    "orch_version",
    "load_kind",
    "load_value",
    "concurrency",
    "request_rate",
    "repeat",
    "repeats",
    "point_index",
    "origin",
    "verdict",
    "not_run",
    "error",
    "started_at",
    "noisy_ci",
]
# every catalogued metric (``orchestrator.metrics.catalogue``, in its order), between the
# request counts and what is not a figure of merit (acceptance's source, per position, SLO met)
FIGURES = [
    "completed",
    "failed",
    *catalogue.NAMES,
    "acceptance_source",
    "acceptance_per_position",
    "slo_met",
    "energy_problems",  # why the energy figures are flagged ("; "-joined), None when sound
]
# the workload a row measured (``workload_duration_s``: the time budget asked for, not the
# measured window ``duration_s``); prompts_sha256 is None for random prompts and older results
WORKLOAD = [
    "prompts",
    "prompts_sha256",
    "num_prompts",
    "workload_duration_s",
    "input_len",
    "max_tokens",
    "api",
    "temperature",
    "ignore_eos",
    "burstiness",
    "seed",
]
COLUMNS = [*IDENTITY, *FIGURES, *WORKLOAD]

# dtypes, so that a column has one type whatever the rows hold (a column of unknowns included)
# and whatever pandas version reads it: text is object (str or None), started_at UTC datetimes
TEXT_COLUMNS = (
    *("results_dir", "folder", "run", "host", "key", "config", "engine", "method"),
    *("draft_model", "model", "gpu_name", "engine_version", "orch_version", "load_kind"),
    *("origin", "verdict", "error", "acceptance_source", "acceptance_per_position"),
    *("prompts", "prompts_sha256", "api", "energy_problems"),
)
OBJECT_FIGURES = ("acceptance_source", "acceptance_per_position", "energy_problems")
INTEGER_COLUMNS = (
    "num_draft_tokens",
    "tensor_parallel",
    "gpu_count",
    "concurrency",
    "repeat",
    "repeats",
    "point_index",
    "completed",
    "failed",
    "num_prompts",
    "input_len",
    "max_tokens",
    "seed",
)
FLOAT_COLUMNS = (
    "load_value",
    "request_rate",
    "noisy_ci",
    "workload_duration_s",
    "temperature",
    "burstiness",
    *(c for c in FIGURES if c not in (*INTEGER_COLUMNS, "slo_met", *OBJECT_FIGURES)),
)

# `orch run` names a results folder <UTC stamp>-<playbook> (store.new_results_dir)
STAMPED = re.compile(r"^\d{8}T\d{6}Z-")


def measurement_row(result: RunResult, results_dir: str) -> dict[str, object]:
    """One measurement's row (``COLUMNS``, None where unknown)."""
    settings, acc, point, slo = result.settings, result.acceptance, result.point, result.slo
    spec, workload = settings.speculative, settings.workload
    row: dict[str, object] = {
        "results_dir": results_dir,
        "folder": result.run.folder,
        "run": result.run.name,
        "host": result.run.host,
        "key": result.run.key,
        "config": settings.configuration,
        "engine": settings.engine,
        "method": spec.method,
        "draft_model": spec.draft_model,
        "num_draft_tokens": spec.num_draft_tokens,
        "model": settings.model,
        "tensor_parallel": settings.tensor_parallel,
        "gpu_name": settings.gpu_name,
        "gpu_count": gpu_count(result),
        "engine_version": result.provenance.engine_version,
        "orch_version": result.provenance.orch_version,
        "load_kind": point.kind if point else None,
        "load_value": point.value if point else None,
        "concurrency": workload.concurrency if workload else None,
        "request_rate": workload.request_rate if workload else None,
        "repeat": point.repeat if point else None,
        "repeats": point.repeats if point else None,
        "point_index": point.index if point else None,
        "origin": point.origin if point else None,
        "verdict": result.verdict,
        "not_run": result.not_run,
        "error": result.error.message if result.error else None,
        "started_at": result.times.started_at,
        "noisy_ci": workload.noisy_ci if workload else None,
        "completed": result.requests.completed if result.requests else None,
        "failed": result.requests.failed if result.requests else None,
        "acceptance_source": acc.source if acc else None,
        "acceptance_per_position": list(acc.per_position) if acc and acc.per_position else None,
        "slo_met": slo.met if slo else None,
        "energy_problems": energy_problems(result),
    }
    row.update(catalogue.values(result))
    row.update(workload_columns(result))
    return row


def workload_columns(result: RunResult) -> dict[str, object]:
    """The ``WORKLOAD`` columns of a measurement (None where its result does not say)."""
    w = result.settings.workload
    if w is None:
        return dict.fromkeys(WORKLOAD)
    return {
        "prompts": w.prompts,
        "prompts_sha256": w.prompts_sha256,
        "num_prompts": w.num_prompts,
        "workload_duration_s": w.duration_s,
        "input_len": w.input_len,
        "max_tokens": w.max_tokens,
        "api": w.api,
        "temperature": w.temperature,
        "ignore_eos": w.ignore_eos,
        "burstiness": w.burstiness,
        "seed": w.seed,
    }


def frame_of(results: Iterable[tuple[str, RunResult]]) -> pd.DataFrame:
    """The DataFrame of (results_dir, result) pairs, with ``COLUMNS`` and their dtypes."""
    rows = [measurement_row(result, where) for where, result in results]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for column in INTEGER_COLUMNS:
        frame[column] = frame[column].astype("Int64")
    for column in FLOAT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in TEXT_COLUMNS:
        text = frame[column].astype(object)
        frame[column] = text.where(text.notna(), None)
    frame["not_run"] = frame["not_run"].astype(bool)
    frame["slo_met"] = frame["slo_met"].astype("boolean")
    frame["ignore_eos"] = frame["ignore_eos"].astype("boolean")
    frame["started_at"] = pd.to_datetime(frame["started_at"], utc=True)
    return frame


def holds_results(folder: Path) -> bool:
    """Whether ``folder`` is a playbook's results folder (a run folder with a summary.json, flat
    or under points/)."""
    found = [*folder.glob("*/summary.json"), *folder.glob("*/points/*/summary.json")]
    return any(not any(set_aside_name(part) for part in p.relative_to(folder).parts) for p in found)


def results_folders(path_or_paths: Path | str | Sequence[Path | str]) -> list[Path]:
    """The results folders named: each path is a results folder, or a parent of several (its
    sub-folders holding results, by name). OrchError for a path that is neither."""
    paths = [path_or_paths] if isinstance(path_or_paths, str | Path) else list(path_or_paths)
    if not paths:
        raise OrchError("no results folder given", hint="give a folder like results/<stamp>-demo")
    folders: list[Path] = []
    for given in map(Path, paths):
        if not given.is_dir():
            raise OrchError(
                f"{given}: no such results folder",
                hint="give a folder `orch run` wrote, like results/20261202T095948Z-demo",
            )
        if holds_results(given):
            folders.append(given)
            continue
        inner = [p for p in sorted(given.iterdir()) if p.is_dir() and holds_results(p)]
        if not inner:
            raise OrchError(
                f"{given} holds no run results (summary.json files)",
                hint="give a folder like results/20261202T095948Z-demo, or one holding several",
            )
        folders.extend(inner)
    return list(dict.fromkeys(folders))


def newest_results_folder(root: Path) -> Path:
    """The newest ``<stamp>-<playbook>`` folder under ``root`` that holds results."""
    found = (
        [p for p in root.iterdir() if p.is_dir() and STAMPED.match(p.name)] if root.is_dir() else []
    )
    for folder in sorted(found, key=lambda p: p.name, reverse=True):
        if holds_results(folder):
            return folder
    raise OrchError(
        f"no results folder under {root}",
        hint="run a playbook first (`orch run PLAYBOOK`), or name a results folder",
    )


def load_pairs(path_or_paths: Path | str | Sequence[Path | str]) -> list[tuple[str, RunResult]]:
    """(results_dir, result) of every measurement under the folders named, in folder order,
    then run and sweep order."""
    return [
        (str(folder), result)
        for folder in results_folders(path_or_paths)
        for result in load_results(folder)
    ]


def load(path_or_paths: Path | str | Sequence[Path | str]) -> pd.DataFrame:
    """One row per measurement (run x load point x repeat) of the results folders named (a
    results folder, a list of them, or a parent folder holding several); see the module
    docstring for the columns."""
    return frame_of(load_pairs(path_or_paths))
