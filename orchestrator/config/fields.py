"""Field types shared by the file models of hosts.yaml (hosts and clusters) and playbooks.

They live apart from `inventory.py` so that `cluster.py` can build its models from them without
importing the inventory that imports it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema


class StrictModel(BaseModel):
    """Unknown keys are errors (a typo must never be silently ignored); no inf/nan numbers."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


_NAME = re.compile(r"[A-Za-z0-9._-]+")


def name_check(kind: str) -> Callable[[str], str]:
    """Names end up in file names and result folders: keep them to a safe alphabet."""

    def check(value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(
                f"{kind} names may only contain letters, digits, '.', '_' and '-'; found {value!r}"
            )
        if value in (".", ".."):  # as a path part it would leave the folder it names
            raise ValueError(f"{kind} name {value!r} is not allowed: it names a directory")
        if value.startswith("-"):  # would read as an option in a command line
            raise ValueError(f"{kind} names may not start with '-'; found {value!r}")
        return value

    return check


def _number_to_str(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(
            f"environment variable names are letters, digits and '_', not starting with a digit; "
            f"found {value!r}"
        )
    return value


# A string that may be written as a bare number in YAML (OMP_NUM_THREADS: 4, --max-num-seqs 8).
ScalarStr = Annotated[
    str, BeforeValidator(_number_to_str), WithJsonSchema({"type": ["string", "number"]})
]
EnvDict = Annotated[
    dict[Annotated[str, AfterValidator(_env_name)], ScalarStr],
    Field(
        description="Environment variables; values may reference the controller's environment as ${VAR}."
    ),
]
Selectors = Annotated[
    list[str],
    BeforeValidator(_one_or_many),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}),
]
HostName = Annotated[str, AfterValidator(name_check("host"))]
GroupName = Annotated[str, AfterValidator(name_check("group"))]
ClusterName = Annotated[str, AfterValidator(name_check("cluster"))]
