"""Command-line choices built from the engine registry, so a new engine needs no CLI edit."""

from __future__ import annotations

from collections.abc import Callable

import typer

from orchestrator.engines import ENGINES


def engine_names(*extra: str) -> tuple[str, ...]:
    """``extra`` (e.g. "auto"), then every engine of the registry, in its order."""
    return (*extra, *ENGINES)


def engine_metavar(*extra: str) -> str:
    """``[auto|vllm|sglang]``: how the help shows the choices."""
    return "[" + "|".join(engine_names(*extra)) + "]"


def engine_parser(*extra: str) -> Callable[[str], str]:
    """A parser accepting an engine name (case-insensitive) or one of ``extra``; anything else
    is a usage error naming the choices."""

    def parse(value: str) -> str:
        choices = engine_names(*extra)
        key = value.strip().lower()
        if key not in choices:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}")
        return key

    return parse
