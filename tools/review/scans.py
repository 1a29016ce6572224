"""AST and text scans of the review, one function per measurement, each returning its findings.

A finding is a ``Finding``: where (``path:line``), what (a name), and a number where one
applies (lines, parameters, positional arguments, occurrences). Budgets are those of
``/work/shared/STYLE.md`` and the CI rules: modules <= 400 lines, functions <= 40,
constructors <= 8 parameters, records of more than five fields built by keyword, lines
<= 120 characters.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import re
import tokenize
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from tools.review.source import Module

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40
MAX_INIT_PARAMS = 8
MAX_POSITIONAL_FIELDS = 5
MAX_LINE = 120
# Names every program defines for itself (its entry point, parser and report): not helpers.
PROGRAM_PROTOCOL = frozenset({"main", "parse_args", "_parser", "format_report", "render"})
_TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore\b(\[[^\]]*\])?")


@dataclass(frozen=True)
class Finding:
    """One place the review points at: ``path:line``, a name (module, function, class, attribute) and a count."""

    package: str
    path: str
    line: int
    name: str
    count: int = 1

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _functions(module: Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def long_modules(modules: Iterable[Module]) -> list[Finding]:
    return [Finding(m.package, str(m.path), 1, m.name, len(m.lines)) for m in modules
            if len(m.lines) > MAX_MODULE_LINES]


def long_functions(modules: Iterable[Module]) -> list[Finding]:
    """Functions (methods and nested ones too) whose ``def`` line to last line spans more than 40 lines."""
    out = []
    for m in modules:
        for fn in _functions(m):
            length = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            if length > MAX_FUNCTION_LINES:
                out.append(Finding(m.package, str(m.path), fn.lineno, fn.name, length))
    return out


def wide_constructors(modules: Iterable[Module]) -> list[Finding]:
    """``__init__`` methods with more than 8 parameters besides ``self`` (``*args``/``**kwargs`` not counted)."""
    out = []
    for m in modules:
        for fn in _functions(m):
            if fn.name == "__init__":
                params = len(fn.args.posonlyargs) + len(fn.args.args) + len(fn.args.kwonlyargs) - 1
                if params > MAX_INIT_PARAMS:
                    out.append(Finding(m.package, str(m.path), fn.lineno, fn.name, params))
    return out


def _enclosing_classes(tree: ast.Module) -> dict[ast.AST, str]:
    """Node -> the name of the innermost class whose body holds it (for ``cls(...)`` calls)."""
    owner: dict[ast.AST, str] = {}
    # ast.walk is breadth first: an inner class comes after its outer one and overwrites it.
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            owner[node] = cls.name
    return owner


def positional_records(modules: Sequence[Module]) -> list[Finding]:
    """Calls of a class defined in the scanned code with more than five positional arguments."""
    classes = {n.name for m in modules for n in ast.walk(m.tree) if isinstance(n, ast.ClassDef)}
    out = []
    for m in modules:
        owner = _enclosing_classes(m.tree)
        for call in (n for n in ast.walk(m.tree) if isinstance(n, ast.Call)):
            func = call.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name == "cls" and call in owner:
                name = owner[call]
            positional = [a for a in call.args if not isinstance(a, ast.Starred)]
            if name in classes and len(positional) > MAX_POSITIONAL_FIELDS:
                out.append(Finding(m.package, str(m.path), call.lineno, name, len(positional)))
    return out


# The public API of named tuples (and enum members' value/name), underscored to avoid field names.
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_value_", "_name_"})


def _is_private(name: str) -> bool:
    return (name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
            and name not in PUBLIC_UNDERSCORED)


def _private_definitions(module: Module) -> set[str]:
    """Private names a module defines: functions, classes, assigned names and attributes, slots."""
    names: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_self(node.value):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)  # __slots__ entries, setattr/getattr names
    return {n for n in names if _is_private(n)}


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def private_reads(modules: Sequence[Module]) -> list[Finding]:
    """``obj._x`` (obj not self/cls; read, assigned or deleted) and ``from m import _x`` where ``_x``
    is defined by another scanned module and not by this one: a module reaching into another's internals."""
    defined = {m.name: _private_definitions(m) for m in modules}
    owners: dict[str, set[str]] = defaultdict(set)
    for name, names in defined.items():
        for private in names:
            owners[private].add(name)
    known = set(defined)
    out = []
    for m in modules:
        own = defined[m.name]
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                if _is_self(node.value):
                    continue
                if node.attr not in own and owners.get(node.attr, set()) - {m.name}:
                    out.append(Finding(m.package, str(m.path), node.lineno, node.attr))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in known:
                for alias in node.names:
                    private_module = f"{node.module}.{alias.name}" in known
                    if _is_private(alias.name) and not private_module and alias.name in defined[node.module]:
                        out.append(Finding(m.package, str(m.path), node.lineno, alias.name))
    return out


def duplicate_helpers(modules: Iterable[Module]) -> list[Finding]:
    """Module-level functions whose name is defined in more than one file (tests and fixtures
    included, ``test_*`` functions, pytest hooks and a program's own entry points left out);
    one finding per name, at its first definition, counting the files."""
    places: dict[str, list[tuple[Module, int]]] = defaultdict(list)
    for m in modules:
        for node in m.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = node.name
                if name.startswith(("test_", "pytest_")) or name in PROGRAM_PROTOCOL:
                    continue
                places[name].append((m, node.lineno))
    out = []
    for name, where in sorted(places.items()):
        files = {m.path for m, _ in where}
        if len(files) > 1:
            first, line = where[0]
            out.append(Finding(first.package, str(first.path), line, name, len(files)))
    return out


def library_prints(modules: Iterable[Module], exempt: Mapping[str, Sequence[str]]) -> list[Finding]:
    """``print(...)`` calls in files that ruff's ``T20`` rule covers: ``exempt`` holds the
    pyproject's per-file-ignores (glob -> rule codes); programs and tests are exempted there."""
    patterns = [glob for glob, codes in exempt.items() if any(c in ("T20", "T201", "T2") for c in codes)]
    out = []
    for m in modules:
        if any(fnmatch.fnmatch(str(m.path), p) or fnmatch.fnmatch(str(m.path), p.replace("/**", "/*"))
               for p in patterns):
            continue
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                out.append(Finding(m.package, str(m.path), node.lineno, "print"))
    return out


def long_lines(modules: Iterable[Module]) -> list[Finding]:
    return [Finding(m.package, str(m.path), i, "line", len(line)) for m in modules
            for i, line in enumerate(m.lines, 1) if len(line) > MAX_LINE]


def _comments(module: Module) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment: strings that mention a pragma are not comments."""
    for token in tokenize.generate_tokens(io.StringIO(module.text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def type_ignores(modules: Iterable[Module]) -> tuple[list[Finding], list[Finding]]:
    """(every ``type: ignore`` comment, those with no reason: no error code, or no comment after it)."""
    every, bare = [], []
    for m in modules:
        for line, comment in _comments(m):
            match = _TYPE_IGNORE.search(comment)
            if match is None:
                continue
            found = Finding(m.package, str(m.path), line, match.group(0))
            every.append(found)
            if match.group(1) is None or "#" not in comment[match.end():]:
                bare.append(found)
    return every, bare
