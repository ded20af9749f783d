"""The package's layout: no import circles, the math modules at the bottom, Rich only where it renders.

Fault class: a circle of imports hidden by function-local imports (still a circle: two modules that
need each other, one of them holding the wrong thing), and a dependency flowing upward (math ->
model code, library -> Rich). The graph is read from the source with :mod:`ast`, so every import
statement counts, wherever it stands: at top level, inside a function, under ``if TYPE_CHECKING:``.
``from lab.x import y`` is an edge to ``lab.x.y`` when ``y`` is a module, else to ``lab.x``.

Two levels: modules (file -> file), and parts, where each top-level entry of ``lab/`` (a package
such as ``lab/models/``, or a module such as ``lab/decode.py``) is one node and A -> B when any file
of A imports any file of B. Both must be acyclic (STYLE.md, house rule 1).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import lab

LAB_DIR = Path(lab.__file__).resolve().parent
ROOT = LAB_DIR.parent


@dataclass(frozen=True)
class Edge:
    """One import statement's edge: ``source`` imports ``target`` at ``line``, naming ``names``."""

    source: str
    target: str
    line: int
    names: tuple[str, ...]
    via: Edge | None = None  # a part edge: the first file -> file edge that makes it

    def __str__(self) -> str:
        if self.via is not None:
            return f"{self.source.replace('.', '/')} -> {self.target.replace('.', '/')} (via {self.via})"
        return f"{path_of(self.source)} -> {path_of(self.target)} (line {self.line}: {', '.join(self.names)})"


def path_of(module: str) -> str:
    """``lab.sinks.prefill`` -> ``lab/sinks/prefill.py``; a package -> its ``__init__.py``."""
    path = ROOT / Path(*module.split("."))
    return f"{module.replace('.', '/')}/__init__.py" if path.is_dir() else f"{module.replace('.', '/')}.py"


@lru_cache(maxsize=1)  # read once per process: the rules below ask for it once per module
def lab_modules() -> dict[str, Path]:
    """Every module of the ``lab`` package: ``{dotted name: file}`` (shared: do not modify)."""
    modules = {}
    for path in sorted(LAB_DIR.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


@lru_cache(maxsize=None)  # each module's source is parsed once per process, not once per rule
def imported_names(source: str, module: str, is_package: bool) -> list[tuple[str, int, tuple[str, ...]]]:
    """Every import statement of ``source`` as ``(dotted name, line, names)``, wherever it stands.

    ``from X import a, b`` gives ``X.a`` and ``X.b`` (each may be a module) with ``X`` resolved
    from relative levels against ``module``; ``import X.Y`` gives ``X.Y``.
    """
    found = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append((alias.name, node.lineno, (alias.name,)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                found.append((f"{base}.{alias.name}", node.lineno, (alias.name,)))
    return found


def resolve(name: str, known: set[str]) -> str | None:
    """The longest prefix of ``name`` that is a known module (``lab.x.y`` for a module ``y``, else ``lab.x``)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in known:
            return candidate
    return None


def module_edges(sources: dict[str, str], packages: set[str]) -> list[Edge]:
    """The lab-internal edges of ``{module: source}``: one per import statement and target module."""
    known = set(sources)
    edges: dict[tuple[str, str, int], list[str]] = defaultdict(list)
    for module, source in sources.items():
        for name, line, names in imported_names(source, module, module in packages):
            target = resolve(name, known)
            if target is not None and target != module:
                edges[(module, target, line)].extend(names)
    return [Edge(s, t, line, tuple(names)) for (s, t, line), names in sorted(edges.items())]


def lab_edges() -> list[Edge]:
    modules = lab_modules()
    packages = {m for m, p in modules.items() if p.name == "__init__.py"}
    return module_edges({m: p.read_text(encoding="utf-8") for m, p in modules.items()}, packages)


def part_of(module: str) -> str:
    """The top-level entry of ``lab/`` a module belongs to: ``lab.sinks.prefill`` -> ``lab.sinks``."""
    return ".".join(module.split(".")[:2])


def part_edges(edges: list[Edge]) -> list[Edge]:
    """Edges between parts, each carried by the first file -> file edge that makes it."""
    first: dict[tuple[str, str], Edge] = {}
    for edge in edges:
        key = (part_of(edge.source), part_of(edge.target))
        if key[0] != key[1] and key not in first:
            first[key] = edge
    return [Edge(s, t, e.line, e.names, via=e) for (s, t), e in sorted(first.items())]


def cycles(edges: list[Edge]) -> list[list[Edge]]:
    """One circle per strongly connected component of more than one node (Tarjan), as its edges."""
    graph: dict[str, list[Edge]] = defaultdict(list)
    for edge in edges:
        graph[edge.source].append(edge)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:  # recursion depth is bounded by the module count (~100)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for edge in graph[node]:
            if edge.target not in index:
                visit(edge.target)
                low[node] = min(low[node], low[edge.target])
            elif edge.target in on_stack:
                low[node] = min(low[node], index[edge.target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted({e.source for e in edges} | {e.target for e in edges}):
        if node not in index:
            visit(node)
    return [_circle_in(component, graph) for component in sorted(components, key=min)]


def _circle_in(component: set[str], graph: dict[str, list[Edge]]) -> list[Edge]:
    """A shortest circle through the component's first node, by breadth-first search inside it."""
    start = min(component)
    came_by: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for edge in graph[node]:
                if edge.target == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, came_by[path[0].source])
                    return path
                if edge.target in component and edge.target not in came_by:
                    came_by[edge.target] = edge
                    following.append(edge.target)
        frontier = following
    raise AssertionError(f"no circle through {start} in its own component")


def describe(circles: list[list[Edge]]) -> str:
    return "\n".join("circle:\n  " + "\n  ".join(str(e) for e in circle) for circle in circles)


# The math at the bottom of the graph (STYLE.md, house rule 1): each imports nothing from `lab`, and no
# Rich, transformers or model code; torch, numpy and scipy are what the math is written in.
MATH_MODULES = ("lab.entropy", "lab.sampling", "lab.sinks.scores", "lab.speculative.verify",
                "lab.speculative.theory", "lab.health.measures")
MATH_THIRD_PARTY = {"torch", "numpy", "scipy"}
# Rich renders; only the rendering modules and the commands that print hold it.
RICH_HOMES = ("lab.render", "lab.commands")


def top_level_names(module: str) -> set[str]:
    path = lab_modules()[module]
    return {name.split(".")[0] for name, _, _ in imported_names(path.read_text(encoding="utf-8"), module,
                                                                path.name == "__init__.py")}


def test_module_graph_real_tree_has_no_circle():
    """Every import statement of lab/, function-local and TYPE_CHECKING ones included, forms no circle."""
    found = cycles(lab_edges())
    assert not found, "import circles between modules:\n" + describe(found)


def test_part_graph_real_tree_has_no_circle():
    """The parts of lab/ (one node per top-level package or module) import each other in one direction."""
    found = cycles(part_edges(lab_edges()))
    assert not found, "import circles between parts of lab/:\n" + describe(found)


def test_math_modules_import_nothing_from_lab_nor_rich_nor_transformers():
    for module in MATH_MODULES:
        names = top_level_names(module)
        stdlib = {n for n in names if n in sys.stdlib_module_names}
        assert names - stdlib <= MATH_THIRD_PARTY, (module, sorted(names - stdlib - MATH_THIRD_PARTY))
        assert "lab" not in names, (module, [str(e) for e in lab_edges() if e.source == module])


# The ground floor every layer may import (the schemas, the math's callers, the renderers and the page): the
# number formatter and the verdict words, standard library only.
GROUND_FLOOR = ("lab.numbers", "lab.verdicts")


def test_ground_floor_modules_import_only_the_standard_library():
    for module in GROUND_FLOOR:
        names = top_level_names(module)
        assert names <= set(sys.stdlib_module_names), (module, sorted(names - set(sys.stdlib_module_names)))


def test_rich_is_imported_only_by_rendering_and_commands():
    holders = sorted(m for m in lab_modules() if "rich" in top_level_names(m)
                     and not any(m == home or m.startswith(home + ".") for home in RICH_HOMES))
    assert not holders, f"Rich imported outside {RICH_HOMES}: {holders}"


# Negative controls: the detector must find what is planted.

PLANTED = {
    "lab": "",
    "lab.a": "import os\nfrom lab import b\n",
    "lab.b": "def late():\n    from lab.c import thing\n    return thing\n",  # the circle's hidden edge
    "lab.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lab.a import x\n",
    "lab.d": "from . import a\n",  # outside the circle: an edge into it
}


def test_module_edges_planted_source_finds_local_and_type_checking_imports():
    edges = {(e.source, e.target, e.line) for e in module_edges(PLANTED, packages={"lab"})}
    assert edges == {("lab.a", "lab.b", 2), ("lab.b", "lab.c", 2), ("lab.c", "lab.a", 3), ("lab.d", "lab.a", 1)}


def test_cycles_planted_circle_found_with_files_and_names():
    found = cycles(module_edges(PLANTED, packages={"lab"}))
    assert [[(e.source, e.target) for e in circle] for circle in found] == [
        [("lab.a", "lab.b"), ("lab.b", "lab.c"), ("lab.c", "lab.a")]]
    message = describe(found)
    assert "lab/b.py -> lab/c.py (line 2: thing)" in message
    assert "lab/c.py -> lab/a.py (line 3: x)" in message


def test_cycles_planted_dag_finds_nothing():
    dag = dict(PLANTED, **{"lab.b": "def late():\n    return 1\n"})  # the circle's hidden edge removed
    assert cycles(module_edges(dag, packages={"lab"})) == []


def test_part_edges_planted_parts_collapse_files():
    sources = {"lab": "", "lab.p": "", "lab.p.x": "from lab.q import y\n", "lab.q": "", "lab.q.y": "",
               "lab.q.z": "import lab.p.x\n", "lab.r": "from lab.p import x\n"}
    parts = part_edges(module_edges(sources, packages={"lab", "lab.p", "lab.q"}))
    assert {(e.source, e.target) for e in parts} == {("lab.p", "lab.q"), ("lab.q", "lab.p"), ("lab.r", "lab.p")}
    assert [[(e.source, e.target) for e in c] for c in cycles(parts)] == [[("lab.p", "lab.q"), ("lab.q", "lab.p")]]
