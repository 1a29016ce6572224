"""The scanned tree: every Python module of the named top-level folders, parsed once.

A ``Module`` carries its dotted name, the folder (``package``) it belongs to, its text and
its AST; ``load_tree`` reads them in sorted path order so every report is reproducible.
``top_level`` and ``assigned_names`` say what a module defines at its top, for the rules
that look up names (``layers.duplicate_names``, ``references``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.common.report import ToolError

SKIPPED_DIRS = frozenset({"__pycache__", ".venv", "build", "dist"})


@dataclass(frozen=True)
class Module:
    """One ``.py`` file: ``name`` is its dotted module name (``tools.review.source``; a
    package's ``__init__`` is the package's name), ``path`` is relative to the scanned root."""

    name: str
    package: str
    path: Path
    text: str
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


def module_name(relative: Path) -> str:
    """``tools/review/source.py`` -> ``tools.review.source``; ``tools/__init__.py`` -> ``tools``."""
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def load_tree(root: Path, packages: tuple[str, ...]) -> list[Module]:
    """Every module under ``root``/P for P in ``packages`` (missing folders are skipped).

    Raises ``ToolError`` naming the file for a file that does not parse.
    """
    if not root.is_dir():
        raise ToolError(f"--root {root}: not a directory")
    modules = []
    for package in packages:
        base = root / package
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            relative = path.relative_to(root)
            if SKIPPED_DIRS.intersection(relative.parts):
                continue
            text = path.read_text(encoding="utf-8")
            try:
                tree = ast.parse(text, filename=str(relative))
            except SyntaxError as err:
                raise ToolError(f"{relative}:{err.lineno}: does not parse ({err.msg})") from err
            modules.append(Module(module_name(relative), package, relative, text, tree))
    return modules


def top_level(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements at module level, those under ``if``/``try``/``with`` included."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from top_level([*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            handlers = [s for h in node.handlers for s in h.body]
            yield from top_level([*node.body, *handlers, *node.orelse, *node.finalbody])
        elif isinstance(node, ast.With):
            yield from top_level(node.body)


def assigned_names(node: ast.stmt) -> list[str]:
    """Names a statement binds by assignment in any form: ``A = B = 1``, ``A, (B, *C) = ...``,
    ``A: int = 1``, ``A += 1``."""
    if isinstance(node, ast.Assign):
        targets: list[ast.expr] = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    else:
        return []
    names = []
    while targets:
        target = targets.pop(0)
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
    return names
