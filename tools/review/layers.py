"""The folder graph of each package against its declared layers, what loaders may import of dataprep, and
names that mean two things.

Each package's folders (and top-level modules) are stages in an order (``LAYERS``): one may
import those before it, never one after it, so the folder graph has no circle and reads in
the order of the data flow. A folder missing from the order is reported (a new folder must
be given its place). ``loaders`` reads shards through ``dataprep.formats``, object
storage through ``dataprep.remote`` and counts CPUs with ``dataprep.cpus``, and imports
nothing else of ``dataprep``. A class,
function or constant defined at module level in two product modules is one name with two
meanings (re-exports are imports, not definitions, and do not count).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from tools.review.scans import Finding
from tools.review.source import Module, assigned_names, top_level

# Per package, its folders and top-level modules from the bottom up: each may import only those before it.
LAYERS: dict[str, tuple[str, ...]] = {
    "dataprep": ("errors", "cpus", "phases", "formats", "remote", "output", "inputs", "clean", "tokenize", "plan",
                 "engines", "commands", "cli", "synthetic"),
    "loaders": ("errors", "validate", "state_keys", "stage_clock", "cache", "read", "augment", "batch_decode",
                "loader", "tokens", "profiler"),
}
# What loaders may import of dataprep: the CPU count, the shard formats and the object-store client.
LOADERS_READS_DATAPREP = ("dataprep.cpus", "dataprep.formats", "dataprep.remote")


def _stage(name: str) -> tuple[str, str] | None:
    """``dataprep.plan.seen`` -> ("dataprep", "plan"); a package's own ``__init__`` -> None."""
    parts = name.split(".")
    return (parts[0], parts[1]) if len(parts) > 1 else None


def unplaced_stages(modules: Sequence[Module]) -> list[Finding]:
    """Folders and top-level modules of a layered package that its order does not name (one finding each)."""
    seen: dict[str, Finding] = {}
    for module in modules:
        here = _stage(module.name)
        if here is not None and here[0] in LAYERS and here[1] not in LAYERS[here[0]]:
            seen.setdefault(".".join(here), Finding(module.package, str(module.path), 1, ".".join(here)))
    return list(seen.values())


def layer_violations(modules: Sequence[Module], graph: Mapping[str, set[str]]) -> list[Finding]:
    """Imports of a later stage of the same package (stages the order does not name: ``unplaced_stages``)."""
    out = []
    for module in modules:
        here = _stage(module.name)
        if here is None or here[0] not in LAYERS or here[1] not in LAYERS[here[0]]:
            continue
        order = LAYERS[here[0]]
        for target in sorted(graph.get(module.name, ())):
            there = _stage(target)
            if there is None or there[0] != here[0] or there[1] == here[1] or there[1] not in order:
                continue
            if order.index(there[1]) > order.index(here[1]):
                out.append(Finding(module.package, str(module.path), 1, f"{module.name} -> {target}"))
    return out


def foreign_reads(modules: Sequence[Module], graph: Mapping[str, set[str]]) -> list[Finding]:
    """Imports of dataprep by loaders outside ``LOADERS_READS_DATAPREP``."""
    out = []
    for module in modules:
        if module.package != "loaders":
            continue
        for target in sorted(graph.get(module.name, ())):
            allowed = any(target == p or target.startswith(p + ".") for p in LOADERS_READS_DATAPREP)
            if target.split(".")[0] == "dataprep" and not allowed:
                out.append(Finding(module.package, str(module.path), 1, f"{module.name} -> {target}"))
    return out


def _is_type_variable(value: ast.expr | None) -> bool:
    """``TypeVar("T")``: a name local to its module's signatures, not a meaning."""
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "TypeVar"


def _defined_names(module: Module) -> Iterable[tuple[str, int]]:
    """Public classes, functions and UPPER_CASE constants defined at the top of ``module`` (under
    ``if``/``try`` too), constants in any assignment form: ``A = 1``, ``A, B = 1, 2``, ``A: int = 1``, ``A += 1``."""
    for node in top_level(module.tree.body):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno
        elif not _is_type_variable(getattr(node, "value", None)):
            for name in assigned_names(node):
                if name.isupper():
                    yield name, node.lineno


def duplicate_names(modules: Iterable[Module], packages: tuple[str, ...] = ("dataprep", "loaders")) -> list[Finding]:
    """Public names defined in more than one product module of ``packages``; one finding per name, at its
    first definition, counting the modules (programs' own entry points left out)."""
    places: dict[str, list[tuple[Module, int]]] = defaultdict(list)
    for module in modules:
        if module.package not in packages or module.name.endswith("__main__"):
            continue
        for name, line in _defined_names(module):
            if not name.startswith("_") and name not in ("main", "log"):
                places[name].append((module, line))
    out = []
    for name, where in sorted(places.items()):
        if len({m.name for m, _ in where}) > 1:
            first, line = where[0]
            out.append(Finding(first.package, str(first.path), line, name, len({m.name for m, _ in where})))
    return out
