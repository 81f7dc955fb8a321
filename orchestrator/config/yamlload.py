"""YAML loading that remembers where every key and value was typed.

pydantic reports problems as key paths (``("runs", 2, "speculative", "method")``) while people
need ``file:line:column``. So files are composed into YAML nodes (which carry marks), plain
Python data is built from those nodes here, and the node tree is kept so that a key path can be
walked back to the exact key or value in the file. Merged trees (playbook defaults, matrix
values) are built from the original nodes, so their errors still point at the line that holds
the offending value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from orchestrator.errors import ConfigError

MAP_TAG = "tag:yaml.org,2002:map"
STR_TAG = "tag:yaml.org,2002:str"
MERGE_TAG = "tag:yaml.org,2002:merge"

# Hostile input bounds. Aliases (*name) re-use a value without copying it, so a dozen lines can
# stand for billions of values ("billion laughs"); a deep nest overflows the stack of every
# recursive walk. The limits count values as if every alias were written out in full.
MAX_DEPTH = 100  # nested mappings and lists
MAX_NODES = 100_000  # keys and values in the whole file, aliases expanded

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Mark:
    """A place in a file (1-based line and column) and the key path found there."""

    file: str
    line: int
    column: int
    path: str | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

    def error(
        self, message: str, *, path: str | None = None, hint: str | None = None
    ) -> ConfigError:
        return ConfigError(
            message,
            file=self.file,
            line=self.line,
            column=self.column,
            path=self.path if path is None else path,
            hint=hint,
        )


def join_path(base: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{base}[{part}]"
    return f"{base}.{part}" if base else part


def format_path(loc: Iterable[str | int]) -> str:
    """``("runs", 2, "speculative")`` -> ``runs[2].speculative``."""
    out = ""
    for part in loc:
        out = join_path(out, part)
    return out


class Document:
    """One loaded YAML file: its root node and the key path of every node in it."""

    def __init__(self, file: str, root: MappingNode) -> None:
        self.file = file
        self.root = root
        # id(node) -> (node, path); the node is kept so that an id is never reused while indexed.
        self._paths: dict[int, tuple[Node, str]] = {}
        self._index(root, "")

    def _index(self, node: Node, path: str) -> None:
        if id(node) in self._paths:
            return
        self._paths[id(node)] = (node, path)
        if isinstance(node, MappingNode):
            for key, value in node.value:
                sub = join_path(path, key.value)
                self._paths.setdefault(id(key), (key, sub))
                self._index(value, sub)
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                self._index(item, join_path(path, i))

    @property
    def data(self) -> dict[str, Any]:
        return to_python(self.root)

    def path_of(self, node: Node) -> str | None:
        entry = self._paths.get(id(node))
        return entry[1] if entry else None

    def alias(self, new: Node, old: Node) -> None:
        """A synthetic node stands for ``old``: report it under ``old``'s path."""
        self._paths[id(new)] = (new, self.path_of(old) or "")

    def mark(self, node: Node, *, path: str | None = None) -> Mark:
        start = node.start_mark
        return Mark(
            self.file,
            start.line + 1,
            start.column + 1,
            self.path_of(node) if path is None else path,
        )

    def locate(self, node: Node, loc: Loc) -> tuple[Node, Node | None, int]:
        """Walk ``loc`` down from ``node``: (deepest node reached, its key node, parts consumed)."""
        key: Node | None = None
        depth = 0
        for part in loc:
            found = child(node, part)
            if found is None:
                break
            key, node = found
            depth += 1
        return node, key, depth


def child(node: Node | None, part: str | int) -> tuple[Node | None, Node] | None:
    """The (key node, value node) at ``part`` of a mapping or a sequence, or None."""
    if isinstance(node, MappingNode) and isinstance(part, str):
        for key, value in reversed(node.value):
            if key.value == part:
                return key, value
    elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return None, node.value[part]
    return None


def load_yaml(path: str | Path) -> Document:
    file = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError("file not found", file=file, hint="check the path") from exc
    except IsADirectoryError as exc:
        raise ConfigError("is a directory, not a file", file=file) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", file=file) from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start}: {exc.reason})",
            file=file,
            line=line,
            column=column,
            hint="save the file as UTF-8",
        ) from exc
    return parse_yaml(text, file=file)


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing to compose nests deeper than ``MAX_DEPTH``.

    PyYAML's composer recurses once per level: without a bound, a 1000-deep ``[[[...]]]``
    ends in RecursionError instead of an error that says where.
    """

    def __init__(self, stream: str, file: str) -> None:
        super().__init__(stream)
        self.file = file
        self.depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                start = self.peek_event().start_mark
                raise ConfigError(
                    f"values nested more than {MAX_DEPTH} levels deep",
                    file=self.file,
                    line=start.line + 1,
                    column=start.column + 1,
                    hint="orch's files need only a few levels; check for unclosed brackets",
                )
            node: Node | None = super().compose_node(parent, index)
            return node
        finally:
            self.depth -= 1


def parse_yaml(text: str, *, file: str = "<input>") -> Document:
    """Compose ``text`` and check it: one mapping at the top, no duplicate keys, no cycles,
    bounded depth and size. Every failure is a ConfigError that says where (file:line:column)."""
    try:
        return _parse(text, file)
    except ConfigError:
        raise
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, file, text) from exc
    except yaml.reader.ReaderError as exc:
        line, column = _position(text, exc.position)
        char = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        raise ConfigError(
            f"invalid YAML: the control character {char} is not allowed in YAML text",
            file=file,
            line=line,
            column=column,
            hint='remove it, or write it as an escape inside double quotes ("\\e", "\\x1b")',
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file=file, line=1, column=1) from exc
    except RecursionError as exc:  # a safety net: the depth bounds above should prevent it
        raise ConfigError(
            f"values nested too deeply (orch reads at most {MAX_DEPTH} levels)",
            file=file,
            line=1,
            column=1,
        ) from exc


def _parse(text: str, file: str) -> Document:
    loader = _Loader(text, file)
    try:
        root = loader.get_single_node()
    finally:
        loader.dispose()
    if root is None or (isinstance(root, ScalarNode) and root.tag == "tag:yaml.org,2002:null"):
        raise ConfigError(
            "the file is empty; expected a mapping of keys",
            file=file,
            line=1,
            column=1,
            hint="see `orch schema` for the keys this file takes",
        )
    if not isinstance(root, MappingNode):
        start = root.start_mark
        raise ConfigError(
            f"expected a mapping of keys at the top level, found {node_kind(root)}",
            file=file,
            line=start.line + 1,
            column=start.column + 1,
        )
    _check_size(root, file)
    _normalize(root, file, SafeConstructor(), set(), set(), "")
    doc = Document(file, root)
    doc.data  # noqa: B018 - constructs every scalar once, so bad tags fail here, with a mark
    return doc


def _position(text: str, index: int) -> tuple[int, int]:
    """1-based (line, column) of ``text[index]``."""
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def _check_size(root: Node, file: str) -> None:
    """Refuse a tree that, aliases written out, has more than ``MAX_NODES`` values or nests
    deeper than ``MAX_DEPTH``; points at the alias or value that crosses the bound.

    Each distinct node is visited once (its expanded size and depth are remembered) and the walk
    keeps its own stack, so neither a billion laughs nor a chain of aliased nests costs more
    than the text. A cycle (an alias inside its own anchor) counts as nothing here:
    ``_normalize`` reports it.
    """
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth), aliases expanded
    entered: set[int] = set()
    stack: list[Node] = [root]
    while stack:
        node = stack[-1]
        if id(node) in sizes:
            stack.pop()
            continue
        kids = _children(node)
        if id(node) not in entered:
            entered.add(id(node))
            stack.extend(k for k in kids if id(k) not in sizes and id(k) not in entered)
            continue
        stack.pop()
        count = 1 + sum(sizes.get(id(k), (0, 0))[0] for k in kids)
        depth = 1 + max((sizes.get(id(k), (0, 0))[1] for k in kids), default=0)
        if count > MAX_NODES or depth > MAX_DEPTH:
            big = max(kids, key=lambda k: sizes.get(id(k), (0, 0))[0]) if kids else node
            where = big if count > MAX_NODES else node
            start = where.start_mark
            what = (
                f"more than {MAX_NODES:,} values once its aliases (*name) are expanded"
                if count > MAX_NODES
                else f"values nested more than {MAX_DEPTH} levels deep once its aliases "
                "(*name) are expanded"
            )
            raise ConfigError(
                f"the file holds {what}",
                file=file,
                line=start.line + 1,
                column=start.column + 1,
                hint="orch's files are small: check the anchors (&name) and aliases (*name)",
            )
        sizes[id(node)] = (count, depth)


def node_kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return repr(node.value)


def _syntax_error(exc: yaml.MarkedYAMLError, file: str, text: str = "") -> ConfigError:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "invalid YAML"
    hint = None
    if exc.context and exc.context_mark is not None and exc.problem_mark is not None:
        ctx = exc.context_mark
        hint = f"check the indentation and brackets ({exc.context} at line {ctx.line + 1}, column {ctx.column + 1})"
    if "'\\t'" in problem:
        hint = "indent with spaces: YAML does not allow tabs"
    reference = _env_reference(text, mark) if mark is not None else None
    if reference is not None:
        hint = (
            f'quote the value: "{reference}" (inside {{...}} or [...] YAML reads an unquoted'
            " '{' as the start of a mapping)"
        )
    return ConfigError(
        f"invalid YAML: {problem}",
        file=file,
        line=mark.line + 1 if mark else None,
        column=mark.column + 1 if mark else None,
        hint=hint,
    )


_ENV_REFERENCE = re.compile(r"\$\{[^}\s]*\}?")


def _env_reference(text: str, mark: yaml.Mark) -> str | None:
    """The unquoted ``${VAR}`` on the error's line: in a flow mapping or list (``{A: ${A}}``)
    its braces are YAML syntax, and the parser's message says nothing about why."""
    lines = text.split("\n")
    line = lines[mark.line] if mark.line < len(lines) else ""
    found = list(_ENV_REFERENCE.finditer(line))
    for match in found:  # the one the parser stopped at: its '{' is the unexpected token
        if match.start() <= mark.column <= match.end():
            return match.group(0)
    unquoted = [m for m in found if m.start() == 0 or line[m.start() - 1] not in "'\""]
    return unquoted[0].group(0) if unquoted else None


def _normalize(
    node: Node, file: str, constructor: SafeConstructor, done: set[int], stack: set[int], path: str
) -> None:
    """Reject duplicate and non-string keys and recursive aliases; apply ``<<`` merge keys."""
    if id(node) in stack:
        start = node.start_mark
        raise ConfigError(
            "recursive alias: the value anchored here contains itself",
            file=file,
            line=start.line + 1,
            column=start.column + 1,
            path=path or None,
            hint="an alias (*name) may not refer to a value that encloses it",
        )
    if id(node) in done:
        return
    done.add(id(node))
    stack.add(id(node))
    if isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            _normalize(item, file, constructor, done, stack, join_path(path, i))
    elif isinstance(node, MappingNode):
        _check_keys(node, file, path)
        if any(key.tag == MERGE_TAG for key, _ in node.value):
            constructor.flatten_mapping(node)
        entries: dict[str, tuple[Node, Node]] = {}
        for key, value in node.value:  # merged entries first, explicit ones override them
            entries[key.value] = (key, value)
        node.value = list(entries.values())
        for key, value in node.value:
            _normalize(value, file, constructor, done, stack, join_path(path, key.value))
    stack.discard(id(node))


def _check_keys(node: MappingNode, file: str, path: str) -> None:
    first: dict[str, Node] = {}
    for key, _ in node.value:
        if key.tag == MERGE_TAG:
            continue
        start = key.start_mark
        where = {"file": file, "line": start.line + 1, "column": start.column + 1}
        if not isinstance(key, ScalarNode):
            raise ConfigError(
                f"keys must be plain strings, found {node_kind(key)}", path=path or None, **where
            )
        if key.value in first:
            raise ConfigError(
                f"duplicate key {key.value!r} (first defined at line {first[key.value].start_mark.line + 1})",
                path=join_path(path, key.value),
                hint="remove one of them: YAML would silently keep only the last",
                **where,
            )
        first[key.value] = key


def to_python(node: Node, constructor: SafeConstructor | None = None) -> Any:
    """Plain data from a node tree; mapping keys are the text the user typed (``on`` stays 'on')."""
    constructor = constructor or SafeConstructor()
    if isinstance(node, MappingNode):
        return {key.value: to_python(value, constructor) for key, value in node.value}
    if isinstance(node, SequenceNode):
        return [to_python(item, constructor) for item in node.value]
    try:
        return constructor.construct_object(node, deep=True)
    except (ValueError, OverflowError, TypeError) as exc:  # 2001-13-01, a 5000-digit integer
        raise yaml.constructor.ConstructorError(
            None, None, f"cannot read the value {node.value[:40]!r}: {exc}", node.start_mark
        ) from exc


def merge_nodes(base: Node | None, over: Node, doc: Document) -> Node:
    """Deep-merge two mapping trees (``over`` wins); the result reuses the original nodes."""
    if not (isinstance(base, MappingNode) and isinstance(over, MappingNode)):
        return over
    entries: dict[str, tuple[Node, Node]] = {key.value: (key, value) for key, value in base.value}
    for key, value in over.value:
        if key.value in entries:
            value = merge_nodes(entries[key.value][1], value, doc)
        entries[key.value] = (key, value)
    merged = MappingNode(MAP_TAG, list(entries.values()), over.start_mark, over.end_mark)
    doc.alias(merged, over)
    return merged


def replace_at(node: Node, parts: list[str], new: Node, doc: Document) -> Node:
    """A copy of ``node`` with the value at ``parts`` replaced by ``new`` (copy on write)."""
    if not parts:
        return new
    head, rest = parts[0], parts[1:]
    entries = list(node.value) if isinstance(node, MappingNode) else []
    for i, (key, value) in enumerate(entries):
        if key.value == head:
            entries[i] = (key, replace_at(value, rest, new, doc))
            break
    else:
        key = ScalarNode(STR_TAG, head, new.start_mark, new.end_mark)
        doc.alias(key, new)
        empty = MappingNode(MAP_TAG, [], node.start_mark, node.end_mark)
        doc.alias(empty, node)
        entries.append((key, replace_at(empty, rest, new, doc)))
    out = MappingNode(MAP_TAG, entries, node.start_mark, node.end_mark)
    doc.alias(out, node)
    return out
