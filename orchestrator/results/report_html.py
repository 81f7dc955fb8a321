"""A report ``Document`` as one self-contained HTML file.

Everything is inside the file: the style sheet inline, every plot a ``data:image/png;base64``
URI, no script, and no link to anything (no font, no CDN). A Content-Security-Policy meta tag
says so to the browser as well (``default-src 'none'``), so a report opened from a mail or a
shared drive shows the same thing offline and can fetch nothing.
"""

from __future__ import annotations

import base64
from html import escape

from orchestrator.results.document import Document, Figure, Section, Table, Value

LONG = 32  # characters: a longer text cell may wrap
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #1f2328; margin: 0 auto; max-width: 1440px; padding: 24px 32px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 32px 0 8px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 20px 0 6px; }
.subtitle, .caption, .legend { color: #57606a; }
.legend { font-size: 13px; margin: 6px 0 0; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 8px 0; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; }
table { border-collapse: collapse; margin: 6px 0 4px; font-variant-numeric: tabular-nums;
        font-size: 13px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eaeef2; text-align: right;
         white-space: nowrap; }
th { background: #f6f8fa; border-bottom: 1px solid #d0d7de; font-weight: 600; }
th.text, td.text { text-align: left; }
td.long { white-space: normal; min-width: 10em; }  /* long text wraps; figures never do */
.scroll { overflow-x: auto; }
.pm { color: #57606a; }
.noisy { color: #cf222e; font-weight: 700; }
.good { color: #1a7f37; } .bad { color: #cf222e; font-weight: 600; } .muted { color: #8c959f; }
figure { margin: 18px 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
figcaption { color: #57606a; font-size: 13px; margin-top: 4px; }
ul.notes { color: #57606a; }
"""


def _value(v: Value, numeric: bool) -> str:
    kind = "" if numeric else "text long" if len(v.text) > LONG else "text"
    classes = [c for c in ("" if v.tone == "plain" else v.tone, kind) if c]
    cls = f' class="{" ".join(classes)}"' if classes else ""
    text = escape(v.text)
    if v.spread is not None:
        if v.noisy:
            text += f' <b class="noisy" title="noisy">± {escape(v.spread)}</b>'
        else:
            text += f' <span class="pm">± {escape(v.spread)}</span>'
    return f"<td{cls}>{text}</td>"


def table_html(table: Table) -> str:
    numeric = [table.numeric(i) for i in range(len(table.columns))]
    text = ' class="text"'
    head = "".join(
        f"<th{'' if n else text}>{escape(c)}</th>"
        for c, n in zip(table.columns, numeric, strict=True)
    )
    body = "\n".join(
        "<tr>" + "".join(_value(v, n) for v, n in zip(row, numeric, strict=True)) + "</tr>"
        for row in table.rows
    )
    parts = [f"<h3>{escape(table.title)}</h3>"] if table.title else []
    parts.append(
        f'<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n'
        "</tbody>\n</table></div>"
    )
    if table.caption:
        parts.append(f'<p class="caption">{escape(table.caption)}</p>')
    return "\n".join(parts)


def figure_html(figure: Figure) -> str:
    data = base64.b64encode(figure.png).decode("ascii")
    caption = escape(figure.caption)
    return (
        f'<figure id="{escape(figure.name)}"><img src="data:image/png;base64,{data}" '
        f'alt="{caption}"><figcaption>{caption}</figcaption></figure>'
    )


def section_html(section: Section) -> str:
    parts = [f"<section>\n<h2>{escape(section.heading)}</h2>"]
    parts += [f"<p>{escape(p)}</p>" for p in section.paragraphs]
    if section.facts:
        rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in section.facts)
        parts.append(f'<dl class="facts">{rows}</dl>')
    parts += [table_html(t) for t in section.tables]
    if section.notes:
        items = "".join(f"<li>{escape(n)}</li>" for n in section.notes)
        parts.append(f'<ul class="notes">{items}</ul>')
    parts += [figure_html(f) for f in section.figures]
    parts.append("</section>")
    return "\n".join(parts)


def render_html(doc: Document) -> str:
    """The whole page. ``data-plots`` on <body> and the line under the title say how many plots
    the report has (the Chromium test checks that every one of them loaded)."""
    plots = len(doc.figures)
    sections = "\n".join(section_html(s) for s in doc.sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(doc.title)}</title>
<style>{STYLE}</style>
</head>
<body data-plots="{plots}">
<h1>{escape(doc.title)}</h1>
<p class="subtitle">{escape(doc.subtitle)} · {plots} plot{"" if plots == 1 else "s"}</p>
<p class="legend">{escape(doc.legend)}</p>
{sections}
</body>
</html>
"""
