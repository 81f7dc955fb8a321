"""`orch report RESULTS_DIR` on the command line: the results table of an earlier run again."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import JsonOpt, print_json
from orchestrator.cli.run import outcome_json, render_outcome
from orchestrator.commands.report import report


def report_command(
    results_dir: Annotated[
        Path, typer.Argument(help="A results folder written by `orch run`.", show_default=False)
    ],
    as_json: JsonOpt = False,
) -> None:
    """Print the results table of an earlier `orch run` again (from its summary.json files)."""
    outcome = report(results_dir)
    if as_json:
        print_json(outcome_json(outcome))
    else:
        render_outcome(outcome)
