"""The import graph of the scanned modules, its cycles, and tools modules that import a program.

Every import statement counts: module level, inside functions (a lazy import that breaks a
cycle at run time is still a cycle in the design) and under ``if TYPE_CHECKING:``. An edge
goes to the module imported (``from a.b import c`` -> ``a.b.c`` when that is a module,
else ``a.b``); importing a package runs its ``__init__``, so ``from loaders import X`` from
inside ``loaders`` is an edge to ``loaders``. Imports of anything not scanned are ignored.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence

from tools.review.source import Module

Graph = dict[str, set[str]]


def _imported_names(module: Module) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(base module, names imported from it) per import statement; ``import a.b`` gives ("a.b", ())."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.name.split(".")
                # A package's own name is its __init__: "from . import x" stays inside it.
                keep = len(parts) - node.level + (1 if module.is_package else 0)
                base = ".".join(parts[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            yield base, tuple(alias.name for alias in node.names)


def _resolve(name: str, known: Mapping[str, Module]) -> str | None:
    """The longest dotted prefix of ``name`` that is a scanned module, None if there is none."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def import_graph(modules: Sequence[Module]) -> Graph:
    """Module name -> the scanned modules it imports (itself left out)."""
    known = {m.name: m for m in modules}
    graph: Graph = {m.name: set() for m in modules}
    for module in modules:
        for base, names in _imported_names(module):
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in known]
            if len(targets) < len(names) or not names:
                targets.append(base)
            for target in targets:
                resolved = _resolve(target, known)
                if resolved is not None and resolved != module.name:
                    graph[module.name].add(resolved)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each one or more import
    cycles), members sorted, components sorted (Tarjan's algorithm)."""
    search = _Tarjan(graph)
    for start in sorted(graph):
        if start not in search.index:
            search.visit(start)
    return sorted(sorted(c) for c in search.components if len(c) > 1)


class _Tarjan:
    """One depth-first search over ``graph``, iterative (import graphs can be deeper than the recursion limit)."""

    def __init__(self, graph: Mapping[str, set[str]]) -> None:
        self.graph = graph
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.stack: list[str] = []
        self.on_stack: set[str] = set()
        self.components: list[list[str]] = []

    def _enter(self, node: str) -> tuple[str, Iterator[str]]:
        self.index[node] = self.low[node] = len(self.index)
        self.stack.append(node)
        self.on_stack.add(node)
        return node, iter(sorted(self.graph.get(node, ())))

    def visit(self, start: str) -> None:
        work = [self._enter(start)]
        while work:
            node, edges = work[-1]
            target = next((t for t in edges if t not in self.index or t in self.on_stack), None)
            if target is not None and target not in self.index:
                work.append(self._enter(target))
            elif target is not None:
                self.low[node] = min(self.low[node], self.index[target])
            else:
                work.pop()
                if work:
                    self.low[work[-1][0]] = min(self.low[work[-1][0]], self.low[node])
                if self.low[node] == self.index[node]:
                    self._pop_component(node)

    def _pop_component(self, root: str) -> None:
        component = []
        while True:
            member = self.stack.pop()
            self.on_stack.discard(member)
            component.append(member)
            if member == root:
                break
        self.components.append(component)


def is_program(module: Module) -> bool:
    """A module run as a program: a ``__main__`` module or one with ``if __name__ == "__main__":``."""
    if module.name.endswith(".__main__"):
        return True
    for node in module.tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            sides = [node.test.left, *node.test.comparators]
            if any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
                    isinstance(s, ast.Constant) and s.value == "__main__" for s in sides):
                return True
    return False


def imports_of_programs(modules: Sequence[Module], graph: Mapping[str, set[str]], *,
                        package: str = "tools") -> list[tuple[str, str]]:
    """(module, program it imports) pairs within ``package``: a program is an entry point, and what
    it shares with others belongs in a library module. (A command line of a library package,
    such as ``dataprep.cli``, is that package's API: only ``package``'s programs count.)"""
    programs = {m.name for m in modules if m.package == package and is_program(m)}
    importers = sorted(m.name for m in modules if m.package == package)
    return [(name, target) for name in importers for target in sorted(graph.get(name, ())) if target in programs]
