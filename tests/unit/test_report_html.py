"""The report and the comparison: their content (exact table cells), the HTML's self-containment,
the Markdown, the files `orch report` writes (and only those), and relative differences."""

from __future__ import annotations

import base64
import hashlib
import math
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.commands.compare import compare
from orchestrator.commands.report import parse_point, report
from orchestrator.errors import OrchError
from orchestrator.results.compare import compare_tables, letters, relative_difference, relative_text
from orchestrator.results.document import Document, Figure, Section, write_document
from orchestrator.results.frame import frame_of, load
from orchestrator.results.manifest import (
    AnyManifest,
    LoadgenManifest,
    Manifest,
    ManifestError,
    PromptsRead,
)
from orchestrator.results.report_doc import build_report
from orchestrator.results.report_figures import cdf_point, series_keys
from orchestrator.results.report_html import render_html
from orchestrator.results.report_markdown import render_markdown
from orchestrator.results.setup_info import parse_manifest, read_manifest
from tests.fixtures.manifest_records import run_manifest
from tests.fixtures.sweep_results import measurement, write_sweep

# a 1x1 PNG: enough for what the document does with a plot's bytes
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
T1 = 12.706204736174705  # Student t(0.975, 1 degree of freedom) = tan(0.475 pi)


def sweep(out: tuple[float, float, float, float] = (300.0, 302.0, 100.0, 150.0)):
    """Two points of two repeats: c=1 steady, c=4 noisy; then plain vLLM with a failure."""
    return [
        measurement(value=1, index=0, repeat=1, out=out[0]),
        measurement(value=1, index=0, repeat=2, out=out[1]),
        measurement(value=4, index=1, repeat=1, out=out[2], tpot=30.0),
        measurement(value=4, index=1, repeat=2, out=out[3], tpot=30.0),
        measurement("vllm-plain", method="none", order=1, value=1, repeat=1, accept=None),
        measurement("vllm-plain", method="none", order=1, value=1, repeat=2, error="engine died"),
        measurement("vllm-plain", method="none", order=1, value=4, index=1, not_run=True),
    ]


class Tags(HTMLParser):
    """Every start tag and its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags_of(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Tags()
    parser.feed(html)
    return parser.tags


def assert_self_contained(html: str) -> int:
    """No script, no external resource; every image a data: PNG. Returns the image count."""
    tags = tags_of(html)
    names = {t for t, _ in tags}
    assert not names & {"script", "link", "iframe", "object", "embed", "base"}
    for _, attrs in tags:
        for name in ("src", "href", "srcset", "action"):
            value = attrs.get(name)
            assert value is None or value.startswith("data:"), (name, value[:60])
    assert "http://" not in html and "https://" not in html
    images = [a["src"] for t, a in tags if t == "img"]
    assert all(s and s.startswith("data:image/png;base64,") for s in images)
    for src in images:
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    body = next(a for t, a in tags if t == "body")
    assert body["data-plots"] == str(len(images))
    return len(images)


def test_the_tables_show_means_intervals_and_what_failed() -> None:
    doc = build_report(frame_of(("r", m) for m in sweep()), [])
    text = render_markdown(doc, "report-files")
    # c=1: 300 and 302 tok/s -> 301 ± t(0.975, 1) * sd / sqrt(2) = 12.71 (4.2%: not noisy);
    # per GPU on 2 GPUs: 150.5 ± 6.35; 1000 / 20 ms = 50 tok/s/user
    assert (
        "| c=1 | 2 | 301.0 ±12.7 | 150.5 ±6.4 | 50.0 ±0.0 | 50.0 ±0.0 | 100.0 ±0.0 "
        "| 20.00 ±0.00 | 3.00 ±0.00 | 0 | 0 | ok |"
    ) in text
    # c=4: 100 and 150 -> 125 ± 317.7: noisy, marked
    assert f"| c=4 | 2 | 125.0 **±{T1 * 25:.1f}** ⚠ | 62.5 **±{T1 * 12.5:.1f}** ⚠ |" in text
    # plain vLLM: one repeat measured, one failed (out of its figures), one point never made
    assert "| c=1 | 1 | 100.0 | 50.0 | 50.0 | 50.0 | 100.0 | 20.00 | **1** | 0 | ok |" in text
    assert "| c=4 | 0 | - | - | - | - | - | - | 0 | **1** | - |" in text
    assert "vllm-plain on h1 at c=1 #2 failed: engine died" in text
    assert "vllm-plain on h1: 1 not run (c=4 #1): host down" in text
    html = render_html(doc)
    assert html.count('<b class="noisy" title="noisy">± ') >= 2
    assert assert_self_contained(html) == 0


def test_html_embeds_every_figure_and_links_nothing() -> None:
    frame = frame_of(("r", m) for m in sweep())
    figures = [Figure("pareto-output", "Output throughput per GPU", PNG), Figure("x", "x", PNG)]
    html = render_html(build_report(frame, figures, ["no timeline: no events"]))
    assert assert_self_contained(html) == 2
    assert "2 plots" in html and "no timeline: no events" in html
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


def test_markdown_references_its_images_by_relative_path() -> None:
    doc = Document(
        "t", "s", (Section("Plots", figures=(Figure("by-load", "Against | load", PNG),)),)
    )
    text = render_markdown(doc, "report-files")
    assert "![Against \\| load](report-files/by-load.png)" in text
    assert "1 plot\n" in text


def test_report_files_replace_their_own_and_nothing_else(tmp_path: Path) -> None:
    one = Document(
        "t", "s", (Section("P", figures=(Figure("a", "a", PNG), Figure("b", "b", PNG))),)
    )
    two = Document("t", "s", (Section("P", figures=(Figure("a", "a", PNG),)),))
    (tmp_path / "report-files").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    for doc in (one, two):
        written = write_document(
            doc, tmp_path, "report", html=render_html, markdown=render_markdown
        )
    assert written.images == (tmp_path / "report-files" / "a.png",)
    assert sorted(p.name for p in (tmp_path / "report-files").iterdir()) == ["a.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "notes.txt",
        "report-files",
        "report.html",
        "report.md",
    ]


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_orch_report_writes_a_report_and_touches_no_measurement(tmp_path: Path) -> None:
    folder = write_sweep(tmp_path / "20261202T100000Z-demo", sweep())
    before = _digest(folder)
    first = report([folder], cdf_at="c=1")
    second = report([folder])  # again: the report's files replaced, nothing else changed
    after = _digest(folder)
    report_files = {k for k in after if k.startswith("report")}
    assert {k: v for k, v in after.items() if k not in report_files} == before
    assert first.written == second.written
    assert {"report.html", "report.md"} <= report_files
    assert second.plots == len([k for k in report_files if k.endswith(".png")]) > 0
    html = second.written.html.read_text()
    assert assert_self_contained(html) == second.plots
    md = second.written.markdown.read_text()
    for image in second.written.images:
        assert f"](report-files/{image.name})" in md
    assert not [p for p in folder.rglob(".report*")]  # no temporary file left behind


def test_a_report_of_several_folders_goes_to_its_own_folder(tmp_path: Path) -> None:
    a = write_sweep(tmp_path / "a", sweep())
    b = write_sweep(tmp_path / "b", sweep())
    done = report([a, b], out=tmp_path / "both")
    assert done.written.html == tmp_path / "both" / "report.html"
    assert [o.results_dir for o in done.outcomes] == [a, b]
    assert "Setup: a" in done.written.markdown.read_text()
    assert not (a / "report.html").exists()


@pytest.mark.parametrize(
    ("text", "point"),
    [("c=8", ("concurrency", 8.0)), ("rate=2.5", ("request_rate", 2.5))],
)
def test_cdf_point(text: str, point: tuple[str, float]) -> None:
    assert parse_point(text) == point


@pytest.mark.parametrize("text", ["8", "x=8", "c=", "c=-1", "rate=nan"])
def test_a_bad_cdf_point_is_one_clear_error(text: str) -> None:
    with pytest.raises(OrchError, match="not a load point"):
        parse_point(text)


# --- compare --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "other", "diff", "text"),
    [
        (200.0, 208.2, 0.041, "+4.1%"),
        (200.0, 190.0, -0.05, "-5.0%"),
        (50.0, 50.0, 0.0, "+0.0%"),
        (-10.0, -5.0, 0.5, "+50.0%"),  # relative to |base|
        (0.0, 5.0, None, "-"),
        (None, 5.0, None, "-"),
        (5.0, math.nan, None, "-"),
    ],
)
def test_relative_difference(
    base: float | None, other: float | None, diff: float | None, text: str
) -> None:
    got = relative_difference(base, other)
    assert got == (None if diff is None else pytest.approx(diff, abs=1e-12))
    assert relative_text(got) == text


def test_letters() -> None:
    assert letters(3) == ["A", "B", "C"]
    assert letters(28)[25:] == ["Z", "A2", "B2"]


def test_compare_tables_put_folders_side_by_side() -> None:
    a = [measurement(value=1, repeats=1, out=200.0, tpot=20.0)]
    b = [
        measurement(value=1, repeats=1, out=208.2, tpot=25.0),
        measurement(value=2, index=1, repeats=1, out=300.0),  # only in B: no row
    ]
    frame = frame_of([*(("A", m) for m in a), *(("B", m) for m in b)])
    tables = {t.title: t for t in compare_tables(frame, ["A", "B"])}
    per_gpu = tables["out tok/s/GPU"]
    assert per_gpu.columns == ("configuration", "load", "A", "B", "B vs A")
    assert [[v.text for v in row] for row in per_gpu.rows] == [
        ["vllm-dflash", "c=1", "100.0", "104.1", "+4.1%"]
    ]
    assert per_gpu.rows[0][-1].tone == "good"  # more throughput
    tpot = tables["TPOT med ms"].rows[0]
    assert [v.text for v in tpot[2:]] == ["20.00", "25.00", "+25.0%"]
    assert tpot[-1].tone == "bad"  # a longer TPOT


def test_a_difference_within_the_noise_is_marked(tmp_path: Path) -> None:
    noisy = [measurement(value=1, repeat=k, out=o) for k, o in ((1, 100.0), (2, 150.0))]
    steady = [measurement(value=1, repeat=k, out=o) for k, o in ((1, 200.0), (2, 200.0))]
    frame = frame_of([*(("A", m) for m in noisy), *(("B", m) for m in steady)])
    row = next(t for t in compare_tables(frame, ["A", "B"]) if t.title == "out tok/s").rows[0]
    assert row[-1].text == "+60.0% (noisy)" and row[-1].tone == "muted"


def test_orch_compare_writes_its_files(tmp_path: Path) -> None:
    a = write_sweep(tmp_path / "a", sweep())
    b = write_sweep(tmp_path / "b", sweep(out=(310.0, 312.0, 100.0, 150.0)))
    done = compare([a, b], out=tmp_path / "cmp")
    assert done.written.html == tmp_path / "cmp" / "compare.html"
    assert_self_contained(done.written.html.read_text())
    md = done.written.markdown.read_text()
    assert "| vllm-dflash | c=1 | 301.0 ±12.7 | 311.0 ±12.7 | +3.3% |" in md
    assert len(load([a, b])) == 14


def test_compare_needs_two_folders(tmp_path: Path) -> None:
    a = write_sweep(tmp_path / "a", sweep())
    with pytest.raises(OrchError, match="two results folders or more"):
        compare([a], out=tmp_path / "cmp")


# --- which point the latency distributions are drawn at ------------------------------------


def _points(*runs: tuple[str, tuple[float, ...]]) -> pd.DataFrame:
    return frame_of(
        ("r", measurement(name, order=i, value=v, index=k, repeats=1))
        for i, (name, values) in enumerate(runs)
        for k, v in enumerate(values)
    )


@pytest.mark.parametrize(
    ("runs", "asked", "point"),
    [
        # the highest load every run measured
        ((("a", (1, 2, 4, 8)), ("b", (1, 2, 4))), None, ("concurrency", 4.0)),
        ((("a", (1, 2)), ("b", (4, 8))), None, None),  # nothing shared
        ((("a", (1, 2)), ("b", (4, 8))), ("concurrency", 2.0), ("concurrency", 2.0)),  # asked
    ],
)
def test_cdf_point_default(runs, asked, point) -> None:
    assert cdf_point(_points(*runs), asked) == point


def test_series_keys_keep_runs_of_one_configuration_apart() -> None:
    frame = _points(("a", (1,)), ("b", (1,)))  # both "vllm dflash" on h1
    assert series_keys(frame, {}) == {
        ("r", "a@h1"): "vllm dflash · a",
        ("r", "b@h1"): "vllm dflash · b",
    }
    one = _points(("a", (1,)))
    assert series_keys(one, {"r": "B"}) == {("r", "a@h1"): "vllm dflash · B"}


# --- the set-up, from manifest.json ----------------------------------------------------------


def test_setup_facts_come_from_the_manifest() -> None:
    manifest = run_manifest(
        playbook={
            "name": "sweep-demo",
            "path": "playbooks/sweep-demo.yaml",
            "git": {"commit": "baf66ec0b1cf5162a6e7", "dirty": True},
        },
        facts={
            "driver_version": "580.95.05",
            "engines": {"vllm": "0.33.0", "sglang": "0.5.23"},
            "os": "Debian GNU/Linux 12",
        },
        run={"workload": {"prompts": "builtin:mixed", "max_tokens": 96, "duration_s": 8.0,
                          "warmup": 2, "slo": {"targets": ["tpot_ms_median <= 30"]}}},
        gpu_ids=[2, 3],
    )  # fmt: skip
    got = parse_manifest(manifest, "h1")
    assert got.playbook.text == "sweep-demo (playbooks/sweep-demo.yaml)"
    assert got.playbook.commit_text == "baf66ec0b1cf (with uncommitted changes)"
    assert got.host.gpus == "2 × NVIDIA RTX A6000 (48 GiB)"
    assert (got.host.driver, got.host.engines) == ("580.95.05", "sglang 0.5.23, vllm 0.33.0")
    assert got.workload == "builtin:mixed, max_tokens 96, 8 s a measurement, warm-up 2"
    assert (got.slo_targets, got.gpu_ids) == (("tpot_ms_median <= 30",), (2, 3))


@pytest.mark.parametrize(
    "manifest",
    [
        Manifest(),  # an old manifest that recorded none of it
        LoadgenManifest(url="http://h:8000", loadgen_spec={}, prompts=PromptsRead(source="random")),
    ],
)
def test_what_a_manifest_lacks_shows_as_unknown(manifest: AnyManifest) -> None:
    got = parse_manifest(manifest, "h1")
    assert (got.playbook.text, got.playbook.commit_text, got.host.gpus) == ("-", "-", "-")
    assert got.workload == "-" and got.slo_targets == ()


def test_a_file_that_is_no_manifest_stops_the_report_naming_it(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text('{"playbook": "x", "host_facts": {"gpus": "2"}}')
    with pytest.raises(ManifestError, match=f"^{tmp_path / 'manifest.json'}: not a run manifest"):
        read_manifest(tmp_path, "h1")
