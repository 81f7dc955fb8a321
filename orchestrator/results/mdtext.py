"""Text from results (run names, models, hosts, warnings, errors, notes) made safe for Markdown.

A results folder is written by whoever wrote the playbook and by engines' error messages, so
report.md, compare.md and nightly.md treat every such value as plain text, as report.html does:
a run named ``<img src=x onerror=alert(1)>|*x*`` is shown as those characters, never as an image,
a new table column or emphasis. ``md_text`` (inline) and ``md_block`` (a paragraph's or a list
item's start) are the one way such a value enters Markdown.
"""

from __future__ import annotations

import re

# Backslash first, so the escapes added after are not escaped again. <, > and & become entities
# (GitHub's renderer passes raw HTML through; an entity is always text); the others take a
# backslash (CommonMark: any ASCII punctuation may be escaped, GFM tables honour "\|").
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_PUNCTUATION = "\\`*_[]|~"
_LEADING = re.compile(r"^([#+-])")  # a heading, a list item, a thematic break (---)
_ORDERED = re.compile(r"^(\d{1,9})([.)])(?=\s|$)")  # "1. " would start a numbered list


def md_text(text: object) -> str:
    """``text`` (``str()`` of it) as inline Markdown showing exactly those characters, on one
    line: HTML, inline markup and table cells' ``|`` escaped, whitespace runs (newlines
    included) made one space. Safe inside a table cell, a heading, emphasis, after a list
    marker's text; at the start of a block use ``md_block``."""
    flat = " ".join(str(text).split())
    out = []
    for i, ch in enumerate(flat):
        if ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch == "_" and _inside_word(flat, i):
            out.append(ch)  # ttft_ms_p99: an underscore within a word never emphasises
        elif ch in _PUNCTUATION:
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _inside_word(text: str, i: int) -> bool:
    return 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()


def md_block(text: object) -> str:
    """``md_text`` for a paragraph or a list item's text: a leading ``#``, ``-``, ``+`` or
    ``1.`` escaped too, so it cannot make a heading, a nested list or a horizontal rule."""
    return _ORDERED.sub(r"\1\\\2", _LEADING.sub(r"\\\1", md_text(text)))


def md_code(text: object) -> str:
    """``text`` as inline code (an id a reader copies) when that is safe, else as ``md_text``:
    a code span shows < and & as they are, but a backtick would end it and a ``|`` would split a
    table row."""
    flat = " ".join(str(text).split())
    if flat and not any(ch in flat for ch in "`|\\"):
        return f"`{flat}`"
    return md_text(flat)


def warning_text(warning: object) -> str:
    """A result's warning as text: a plain string, or an object carrying a ``message`` (a typed
    warning): the one place that knows which, so either renders the same way."""
    message = getattr(warning, "message", None)
    return str(message) if message is not None else str(warning)
