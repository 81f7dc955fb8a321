"""A report ``Document`` as Markdown (GitHub's dialect: pipe tables), its plots as PNG files in a
folder beside it, referenced by relative path, so the pair can be committed or pasted into an
issue. A noisy figure's ± is written in bold with a warning sign (Markdown has no colour).

Every text of the document is plain text (report.html escapes all of it), so every text enters
the Markdown through ``mdtext`` (``md_text``, ``md_block`` at a block's start): a run, model or error message cannot add HTML, markup or
a table column."""

from __future__ import annotations

from orchestrator.results.document import Document, Section, Table, Value
from orchestrator.results.mdtext import md_block, md_text

NOISY_MARK = "⚠"


def cell(text: str) -> str:
    """Text safe inside a pipe table cell (one line, markup and ``|`` escaped)."""
    return md_text(text) or " "


def value_markdown(v: Value) -> str:
    text = cell(v.text)
    if v.spread is not None:
        spread = cell(v.spread)
        text += f" **±{spread}** {NOISY_MARK}" if v.noisy else f" ±{spread}"
    if v.tone == "bad":
        text = f"**{text}**" if v.spread is None else text
    return text


def table_markdown(table: Table) -> str:
    lines = [f"### {md_text(table.title)}", ""] if table.title else []
    lines.append("| " + " | ".join(cell(c) for c in table.columns) + " |")
    aligns = ["---:" if table.numeric(i) else "---" for i in range(len(table.columns))]
    lines.append("| " + " | ".join(aligns) + " |")
    lines += ["| " + " | ".join(value_markdown(v) for v in row) + " |" for row in table.rows]
    if table.caption:
        lines += ["", f"_{md_text(table.caption)}_"]
    return "\n".join(lines)


def section_markdown(section: Section, images_dir: str) -> str:
    parts = [f"## {md_text(section.heading)}"]
    parts += [md_block(p) for p in section.paragraphs]
    if section.facts:
        parts.append("\n".join(f"- **{md_text(k)}:** {md_text(v)}" for k, v in section.facts))
    parts += [table_markdown(t) for t in section.tables]
    if section.notes:
        parts.append("\n".join(f"- {md_block(n)}" for n in section.notes))
    for figure in section.figures:
        parts.append(f"![{cell(figure.caption)}]({images_dir}/{figure.name}.png)")
        parts.append(f"_{md_text(figure.caption)}_")
    return "\n\n".join(parts)


def render_markdown(doc: Document, images_dir: str) -> str:
    """The whole report; ``images_dir`` is the plots' folder relative to the .md file."""
    plots = len(doc.figures)
    legend = doc.legend.replace("in bold red (noisy)", f"in bold with {NOISY_MARK} (noisy)")
    head = [
        f"# {md_text(doc.title)}",
        md_block(f"{doc.subtitle} · {plots} plot{'' if plots == 1 else 's'}"),
        f"_{md_text(legend)}_",
    ]
    body = [section_markdown(s, images_dir) for s in doc.sections]
    return "\n\n".join([*head, *body]) + "\n"
