from __future__ import annotations

import contextlib
import io
import json

from orchestrator.cli.main import run as run_cli
from orchestrator.results.store import write_json


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(list(args))
    return code, out.getvalue(), err.getvalue()


def test_report_reprints_a_results_folder(tmp_path) -> None:
    runs = [
        {"run": "vllm-dflash", "host": "h1", "engine": "vllm", "method": "dflash", "order": 0,
         "requests": {"completed": 10, "failed": 0, "output_throughput": 94.7,
                      "decode_tok_s": {"median": 98.2}}, "acceptance": {"length": 5.66}},
        {"run": "broken", "host": "h1", "engine": "vllm", "method": "dflash", "order": 1,
         "requests": {"completed": 4, "failed": 0, "output_throughput": 18.7},
         "acceptance": {"length": 1.07},
         "collapse": {"message": "speculation collapsed", "likely_causes": []}},
    ]
    for s in runs:
        write_json(tmp_path / s["run"] / "summary.json", s)
    code, out, _ = _cli("report", str(tmp_path), "--json")
    assert code == 0
    assert [r["run"] for r in json.loads(out)["runs"]] == ["vllm-dflash", "broken"]
    code, out, _ = _cli("report", str(tmp_path))
    assert code == 0
    assert "COLLAPSE" in out and "94.7" in out and "5.66" in out
    assert "broken on h1: speculation collapsed" in out


def test_report_of_an_empty_folder_is_one_clear_error(tmp_path) -> None:
    code, out, err = _cli("report", str(tmp_path))
    assert code == 1
    assert out == ""
    assert "holds no run summaries" in err and "Traceback" not in err
