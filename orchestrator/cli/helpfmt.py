"""How typer labels options and arguments in help, as orch shows them (imported by the root
app itself and by ``cli/common.py``, so `orch --help` gets it without importing the commands)."""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperOption

_typed_label = TyperOption.display_type_rich


def _flags_take_no_value(self: TyperOption, ctx: Any) -> str | None:
    """typer's rich help labels every option with its type, so flags (--help included) read
    `--json <bool>` as if they took a value; its plain help leaves flags bare, as this does."""
    return None if self.is_flag or self.count else _typed_label(self, ctx)


TyperOption.display_type_rich = _flags_take_no_value  # type: ignore[method-assign]
_argument_label = TyperArgument.display_type_rich


def _lists_by_name(self: TyperArgument, ctx: Any) -> str | None:
    """An argument taking several values reads `RESULTS_DIR...`; typer would add the Python
    type, `<list[Path]>`, beside it."""
    return None if self.nargs != 1 else _argument_label(self, ctx)


TyperArgument.display_type_rich = _lists_by_name  # type: ignore[method-assign,assignment]
