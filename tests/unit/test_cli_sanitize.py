"""Control characters that came from a host or a file never reach the console raw (issue 9,
item 19): an engine log line, a playbook value or a file name could otherwise retitle, clear or
rewrite the operator's terminal, or a CI log viewer, when output is not a terminal."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.table import Table
from typer.testing import CliRunner

from orchestrator.cli.common import SafeConsole, sanitize
from orchestrator.cli.logs import app as logs_app
from orchestrator.cli.main import app

REPO = Path(__file__).resolve().parents[2]
LOGS = Path(__file__).parent / "data" / "logs"
TITLE = "\x1b]0;pwned\x07"  # OSC: set the terminal's title
CLEAR = "\x1b[2J"  # CSI: clear the screen
runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, tabs\tand\nnewlines", "plain text, tabs\tand\nnewlines"),
        (TITLE, "\\x1b]0;pwned\\x07"),
        (CLEAR + "x", "\\x1b[2Jx"),
        ("over\rwrite", "over\\x0dwrite"),
        ("nul\x00 del\x7f csi\x9b", "nul\\x00 del\\x7f csi\\x9b"),
        ("é ü 中 \u200b", "é ü 中 \u200b"),
    ],
)
def test_sanitize(text: str, shown: str) -> None:
    assert sanitize(text) == shown


def test_console_keeps_its_own_styles_and_shows_foreign_escapes() -> None:
    buf = io.StringIO()
    console = SafeConsole(
        file=buf, force_terminal=True, color_system="standard", width=80, highlight=False
    )
    console.print(f"[red]bad[/] {CLEAR}line")
    table = Table("cell")
    table.add_row(f"x{TITLE}")
    console.print(table)
    text = buf.getvalue()
    assert "\x1b[31mbad\x1b[0m" in text  # rich's own colour codes are kept
    assert "\\x1b[2Jline" in text and CLEAR not in text
    assert "x\\x1b]0;pwned" in text and "\x07" not in text and "\x1b]" not in text


def test_logs_parse_prints_no_escape_from_the_log_or_its_name(tmp_path: Path) -> None:
    lines = (LOGS / "vllm_dflash.log").read_text().splitlines()
    # an escape on a line of its own and inside a line that carries figures
    hostile = [f"{TITLE}{CLEAR}"] + [line.replace(" INFO ", f" INFO{CLEAR} ", 1) for line in lines]
    log = tmp_path / f"engine{TITLE}{CLEAR}.log"
    log.write_text("\n".join(hostile) + "\n")
    result = runner.invoke(logs_app, ["parse", str(log)])
    assert result.exit_code == 0, result.output
    assert "0 of 0 events" not in result.stdout  # the events were parsed and shown
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b]0;pwned" in result.stdout  # the file's name, shown with its escapes visible


def test_run_console_shows_a_playbook_value_without_its_escapes(tmp_path: Path) -> None:
    playbook = tmp_path / "play.yaml"
    playbook.write_text(
        "name: p\nhosts: [sim-a6000-1]\nruns:\n  - name: r1\n    engine: vllm\n"
        '    model: "m\\e]0;pwned\\a\\e[2J"\n'
    )
    result = runner.invoke(
        app, ["run", str(playbook), "--dry-run", "--hosts", str(REPO / "hosts.yaml")]
    )
    assert result.exit_code == 0, result.output
    assert "vllm serve 'm\\x1b]0;pwned" in result.stdout
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
