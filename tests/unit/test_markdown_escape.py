"""report.md, compare.md and nightly.md show hostile names as text: a run named like an HTML tag
and a table cell, a model that closes a table and opens a script, an error with a newline and a
heading. Rendered with markdown-it (CommonMark with GitHub's tables), no tag comes from them and
every table row keeps its columns."""

from __future__ import annotations

from dataclasses import replace
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from orchestrator.nightly.cases import NightAttributes
from orchestrator.nightly.report import NightlyVerdict
from orchestrator.nightly.report import render_markdown as nightly_markdown
from orchestrator.nightly.verdict import CaseVerdict, MetricVerdict
from orchestrator.results.compare import build_compare
from orchestrator.results.frame import frame_of
from orchestrator.results.mdtext import md_block, md_code, md_text, warning_text
from orchestrator.results.model import RunResult
from orchestrator.results.report_doc import build_report
from orchestrator.results.report_markdown import render_markdown
from tests.fixtures.nightly_histories import CASE
from tests.fixtures.sweep_results import measurement

RUN = "<img src=x onerror=alert(1)>|*x*"
MODEL = "</table><script>alert(2)</script>"
HOST = "h|1 [a](javascript:x) `y`"
ERROR = "boom <b>bold</b>\n# heading\n| a | b |\n---"
# what the renderer may make of the document's own Markdown (no raw HTML of ours but nightly's
# <details>)
ALLOWED = {
    *("h1", "h2", "h3", "p", "em", "strong", "ul", "li", "blockquote", "code", "img"),
    *("table", "thead", "tbody", "tr", "th", "td", "details", "summary"),
}


class Html(HTMLParser):
    """Tags, and the cells of each table row, of rendered Markdown."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.rows: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "tr":
            self.rows.append(0)
        elif tag in ("td", "th"):
            self.rows[-1] += 1


def rendered(markdown: str) -> Html:
    parser = Html()
    parser.feed(MarkdownIt("commonmark").enable("table").render(markdown))
    return parser


def table_widths(markdown: str) -> list[list[int]]:
    """Per table, the cells of each of its rows as rendered."""
    html = MarkdownIt("commonmark").enable("table").render(markdown)
    tables = []
    for chunk in html.split("<table>")[1:]:
        part = Html()
        part.feed("<table>" + chunk.split("</table>")[0])
        tables.append(part.rows)
    return tables


def assert_inert(markdown: str) -> None:
    assert "<img" not in markdown and "<script" not in markdown and "</table" not in markdown
    html = rendered(markdown)
    tags = {t for t, _ in html.tags}
    assert tags <= ALLOWED, tags - ALLOWED
    for tag, attrs in html.tags:
        if tag == "img":  # the report's own plots, by relative path
            assert (attrs.get("src") or "").startswith("report-files/"), attrs
        assert not any(k.startswith("on") for k in attrs), attrs
        assert "href" not in attrs
    assert sum(t == "h1" for t, _ in html.tags) == 1  # the title; no heading from an error
    widths = table_widths(markdown)
    assert widths
    for rows in widths:
        assert len(set(rows)) == 1, rows  # every row as wide as the header


@pytest.mark.parametrize(
    ("text", "inline", "block"),
    [
        ("<img src=x>", "&lt;img src=x&gt;", "&lt;img src=x&gt;"),
        ("a|b", "a\\|b", "a\\|b"),
        ("*x* [y](z) `c` ~~d~~", "\\*x\\* \\[y\\](z) \\`c\\` \\~\\~d\\~\\~", None),
        ("ttft_ms_p99 _x_", "ttft_ms_p99 \\_x\\_", None),
        ("a & b \\ c", "a &amp; b \\\\ c", None),
        ("# h", "# h", "\\# h"),
        ("- item", "- item", "\\- item"),
        ("---", "---", "\\---"),
        ("1. first", "1. first", "1\\. first"),
        ("0.1.0", "0.1.0", "0.1.0"),
        ("two\nlines\n\n# h", "two lines # h", None),
    ],
)
def test_md_text_and_md_block(text: str, inline: str, block: str | None) -> None:
    assert md_text(text) == inline
    assert md_block(text) == (inline if block is None else block)


def test_md_code_falls_back_to_text_when_a_code_span_would_break() -> None:
    assert md_code("a1b2c3") == "`a1b2c3`"
    assert md_code("<x>") == "`<x>`"  # a code span shows it as it is
    assert md_code("a`b|c") == "a\\`b\\|c"


def test_warning_text_takes_a_string_or_a_typed_warning() -> None:
    class Typed:
        message = "client saturated"

    assert warning_text("plain") == "plain"
    assert warning_text(Typed()) == "client saturated"


def hostile() -> list[RunResult]:
    out = []
    for repeat in (1, 2):
        r = measurement(RUN, host=HOST, value=4, repeat=repeat, slo_met=repeat == 1)
        if repeat == 2:
            r = measurement(RUN, host=HOST, value=4, repeat=2, error=ERROR)
        settings = r.settings.model_copy(update={"model": MODEL})
        out.append(r.model_copy(update={"settings": settings}))
    return out


def test_report_md_shows_hostile_names_as_text() -> None:
    frame = frame_of(("results/a", r) for r in hostile())
    markdown = render_markdown(build_report(frame, []), "report-files")
    assert_inert(markdown)
    assert "&lt;img src=x onerror=alert(1)&gt;\\|\\*x\\*" in markdown  # the run, as text
    text = MarkdownIt("commonmark").enable("table").render(markdown)
    assert "&lt;img src=x onerror=alert(1)&gt;|*x*" in text  # and rendered back to it
    assert "&lt;/table&gt;&lt;script&gt;" in text


def test_compare_md_shows_hostile_names_as_text() -> None:
    results = hostile()
    pairs = [("results/a", r) for r in results] + [("results/b", r) for r in results]
    doc = build_compare(frame_of(pairs), ["results/a", "results/b"], [])
    markdown = render_markdown(doc, "compare-files")
    assert_inert(markdown)
    assert "&lt;img src=x onerror=alert(1)&gt;\\|\\*x\\*" in markdown


def test_nightly_md_shows_hostile_names_as_text() -> None:
    metric = MetricVerdict(
        "output_tok_s", "higher", "tok/s", "could_not_measure", ERROR, value=None, n=0
    )
    case = CaseVerdict(
        replace(CASE, model=MODEL),
        "failed",
        False,
        ERROR,
        NightAttributes(engine_version="1", hosts=(HOST,)),
        (metric,),
    )
    night = NightlyVerdict(playbook=RUN, night="N1|`x`", cases=(case,), notes=(ERROR,))
    markdown = nightly_markdown(night)
    body = markdown.replace("<details><summary>Every figure</summary>", "").replace(
        "</details>", ""
    )
    assert_inert(body)
    assert "&lt;/table&gt;&lt;script&gt;" in markdown  # the model, in the case's label
