"""The layers of ``orchestrator/``, held by a test (docs/ARCHITECTURE.md, "Layers").

Every import counts: top level, inside a function (lazy) and under ``TYPE_CHECKING``, since a
lazy import hides a cycle rather than removing it. A package may import only packages of lower
layers; a few edges are forbidden by name with their own message; no package and no module
imports itself through others. The checker is run on small fake trees too, so it can fail.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "orchestrator"

# Lowest first. A package imports only packages of earlier layers; top-level modules
# (errors.py, __main__.py, the root __init__) count as packages of their own name.
LAYERS: tuple[str, ...] = (
    "remote",  # shipped to the hosts: standard library only
    "orchestrator",  # the root __init__: the version
    "errors",
    "aio",  # asyncio helpers
    "metrics",  # pure parsers, statistics and the metric catalogue: below the playbook's SLOs
    "config",
    "engines",
    "loadgen",
    "transport",
    "agent",
    "doctor",
    "results",
    "sweep",
    "nightly",
    "slurm",
    "runner",
    "backends",  # where runs execute: the seam's two implementations drive the runner
    "commands",
    "cli",
    "__main__",
    "sim",  # apart: imported only through SIM_ENTRY_POINTS
)

# The one place the product reaches the simulator: the in-process SSH hosts of
# ``transport: embedded``, registered with the transport by the session that opens the pool.
SIM_ENTRY_POINTS: frozenset[str] = frozenset({"orchestrator.commands.session"})

# Edges that still break the layers, each with why it is tolerated; a stale entry fails.
KNOWN: Mapping[tuple[str, str], str] = {}

SCREEN = ("rich", "typer", "orchestrator.cli")


@dataclass
class Graph:
    """Module -> the orchestrator modules it imports, and every name it imports at all."""

    edges: dict[str, set[str]] = field(default_factory=dict)
    names: dict[str, set[str]] = field(default_factory=dict)

    def without(self, dropped: Iterable[tuple[str, str]]) -> Graph:
        edges = {mod: set(targets) for mod, targets in self.edges.items()}
        names = {mod: set(imported) for mod, imported in self.names.items()}
        for source, target in dropped:
            edges.get(source, set()).discard(target)
            names.get(source, set()).discard(target)
        return Graph(edges, names)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def build_graph(root: Path) -> Graph:
    files = {module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    graph = Graph()
    for module, path in files.items():
        base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                head = base[: len(base) - node.level + 1] if node.level else []
                full = ".".join(head + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{full}.{alias.name}"
                    names.add(sub if sub in files else full)
        graph.names[module] = names
        graph.edges[module] = {
            target
            for target in (_known_module(name, files) for name in names)
            if target and target != module
        }
    return graph


def _known_module(name: str, files: Mapping[str, Path]) -> str | None:
    while name and name not in files:
        name = name.rpartition(".")[0]
    return name or None


def layer_violations(
    graph: Graph, layers: tuple[str, ...], sim_entry_points: frozenset[str] = frozenset()
) -> list[str]:
    """An entry point reaches up to the simulator, which sits apart above every layer."""
    rank = {package: index for index, package in enumerate(layers)}
    found = []
    for source, targets in sorted(graph.edges.items()):
        for target in sorted(targets):
            low, high = package_of(source), package_of(target)
            if low == high or (high == "sim" and source in sim_entry_points):
                continue
            if low not in rank or high not in rank:
                found.append(f"{source} -> {target}: a package missing from LAYERS")
            elif rank[high] > rank[low]:
                found.append(f"{source} -> {target}: {low} is below {high}")
    return found


def forbidden_edges(graph: Graph, sim_entry_points: frozenset[str]) -> list[str]:
    found = []
    for source, names in sorted(graph.names.items()):
        package = package_of(source)
        for name in sorted(names):
            inner = name.startswith(f"{graph_root(source)}.") or name == graph_root(source)
            if package == "remote" and inner and package_of(name) != "remote":
                found.append(f"{source} -> {name}: remote/ runs on the hosts, alone")
            if package in ("results", "metrics") and name.startswith(
                (*SCREEN, "orchestrator.commands")
            ):
                found.append(f"{source} -> {name}: results and metrics know no command or screen")
            if package in ("runner", "slurm") and name.startswith("orchestrator.commands"):
                found.append(f"{source} -> {name}: the runner knows no command")
            if package in ("runner", "commands") and name.startswith(SCREEN):
                found.append(f"{source} -> {name}: only cli/ prints and marks up")
            if (
                inner
                and package_of(name) == "sim"
                and package != "sim"
                and source not in sim_entry_points
            ):
                found.append(f"{source} -> {name}: the simulator is reached only by an entry point")
    return found


def graph_root(module: str) -> str:
    return module.split(".")[0]


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def package_edges(graph: Graph) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for source, targets in graph.edges.items():
        mine = packages.setdefault(package_of(source), set())
        mine.update(package_of(t) for t in targets if package_of(t) != package_of(source))
    return packages


def check(root: Path, *, layers: tuple[str, ...] = LAYERS, known=KNOWN) -> list[str]:
    """Every broken rule under ``root``, one line each; empty when the layers hold."""
    full = build_graph(root)
    stale = [
        f"KNOWN {a} -> {b} no longer exists" for a, b in known if b not in full.edges.get(a, ())
    ]
    graph = full.without(known)
    return [
        *stale,
        *layer_violations(graph, layers, SIM_ENTRY_POINTS),
        *forbidden_edges(graph, SIM_ENTRY_POINTS),
        *(f"package cycle: {' <-> '.join(c)}" for c in cycles(package_edges(graph))),
        *(f"module cycle: {' <-> '.join(c)}" for c in cycles(graph.edges)),
    ]


def test_orchestrator_keeps_its_layers() -> None:
    assert check(ROOT) == []


def test_every_package_has_a_layer() -> None:
    packages = {package_of(module_name(path, ROOT)) for path in ROOT.rglob("*.py")}
    assert packages == set(LAYERS)


def test_relative_imports_are_edges() -> None:
    """remote/ imports itself relatively only; lazy and TYPE_CHECKING ones: the fake trees."""
    assert "orchestrator.remote.wire" in build_graph(ROOT).edges["orchestrator.remote.main"]


# ---- the checker itself fails on bad trees ----


def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / "orchestrator"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in [p for p in root.rglob("*") if p.is_dir()]:
        (folder / "__init__.py").touch()
    return root


FAKE_LAYERS = ("remote", "orchestrator", "config", "metrics", "transport", "runner", "commands")
FAKE_LAYERS += ("cli", "sim")


def test_a_clean_fake_tree_passes(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "remote/wire.py": "from . import codec\n",
            "remote/codec.py": "import json\n",
            "config/load.py": "from orchestrator.remote.wire import X\n",
            "runner/run.py": "from orchestrator.config import load\n",
            "commands/go.py": "from orchestrator.runner.run import go\n",
            "cli/main.py": "import rich\nfrom orchestrator.commands.go import go\n",
        },
    )
    assert check(root, layers=FAKE_LAYERS, known={}) == []


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"runner/run.py": "def f():\n    from orchestrator.commands.go import go\n"},
            "orchestrator.runner.run -> orchestrator.commands.go: the runner knows no command",
        ),
        (
            {"remote/wire.py": "from orchestrator.config import load\n", "config/load.py": ""},
            "orchestrator.remote.wire -> orchestrator.config.load: remote/ runs on the hosts, "
            "alone",
        ),
        (
            {
                "metrics/parse.py": (
                    "from typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from orchestrator.cli.main import x\n"
                ),
                "cli/main.py": "",
            },
            "orchestrator.metrics.parse -> orchestrator.cli.main: results and metrics know no "
            "command or screen",
        ),
        (
            {"transport/ssh.py": "from orchestrator.sim import server\n", "sim/server.py": ""},
            "orchestrator.transport.ssh -> orchestrator.sim.server: the simulator is reached "
            "only by an entry point",
        ),
        (
            {
                "transport/ssh.py": "def f():\n    from orchestrator.sim.embedded import Hosts\n",
                "sim/embedded.py": "",
            },
            "orchestrator.transport.ssh -> orchestrator.sim.embedded: the simulator is reached "
            "only by an entry point",
        ),
        (
            {"commands/go.py": "def f():\n    import rich.table\n"},
            "orchestrator.commands.go -> rich.table: only cli/ prints and marks up",
        ),
        (
            {"config/load.py": "from orchestrator.runner import run\n", "runner/run.py": ""},
            "orchestrator.config.load -> orchestrator.runner.run: config is below runner",
        ),
        (
            {"runner/a.py": "from . import b\n", "runner/b.py": "def f():\n    from .a import x\n"},
            "module cycle: orchestrator.runner.a <-> orchestrator.runner.b",
        ),
        (
            {"config/a.py": "from orchestrator.metrics import b\n", "metrics/b.py": ""},
            "orchestrator.config.a -> orchestrator.metrics.b: config is below metrics",
        ),
    ],
)
def test_the_checker_fails_on_a_bad_edge(
    tmp_path: Path, files: Mapping[str, str], expected: str
) -> None:
    assert expected in check(_tree(tmp_path, files), layers=FAKE_LAYERS, known={})


def test_the_entry_point_may_reach_the_simulator(tmp_path: Path) -> None:
    """The pool is handed the simulator's embedded hosts by the session, lazily."""
    root = _tree(
        tmp_path,
        {
            "commands/session.py": "def f():\n    from orchestrator.sim.embedded import Hosts\n",
            "sim/embedded.py": "from orchestrator.transport import inprocess\n",
            "transport/inprocess.py": "",
        },
    )
    assert check(root, layers=FAKE_LAYERS, known={}) == []


def test_the_checker_finds_a_package_cycle(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {"config/a.py": "from orchestrator.metrics import b\n", "metrics/b.py": "import x\n"}
        | {"metrics/c.py": "from orchestrator.config import a\n"},
    )
    assert "package cycle: config <-> metrics" in check(root, layers=FAKE_LAYERS, known={})


def test_a_stale_known_edge_fails(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"config/a.py": ""})
    known = {("orchestrator.config.a", "orchestrator.cli"): "gone"}
    assert check(root, layers=FAKE_LAYERS, known=known) == [
        "KNOWN orchestrator.config.a -> orchestrator.cli no longer exists"
    ]
