"""References in docstrings and Markdown that name code which does not exist (a hard rule of the review).

A *reference* is a span between one or two backticks on each side (in any docstring of a scanned
module, or in any ``*.md`` of the checkout but ``HISTORY``, fenced code blocks left out) whose whole text,
once a call's arguments (``f(...)``) and a line suffix (``:12``, ``:12-30``) are dropped, is one of:

- a *dotted name*, ``package.module.Name.attr``, whose first part is a project package
  (``PROJECT_PACKAGES``): its longest prefix that is a module must exist (a scanned ``.py``, a
  folder, or a C extension's ``.c`` source), then each further part must be defined there: a
  name the module defines or imports at its top level (an import is followed to the module it
  comes from), then a member of that class (its body, ``self.x = ...`` in its methods, or a
  scanned base class; a base from outside the checkout accepts any member); what comes after
  a function, a constant or a member is not checked;
- ``python -m package.module ...``: that module must exist;
- a *path* (``/``-separated, no spaces) whose first part is a project package: the file or
  folder must exist in the checkout;
- another path ending in ``.py`` (a folder-relative path, or, in Markdown only, a bare file name
  as a package README's module table gives it): it must exist in the folder of the text or
  one of its parents, in the tests' mirror of one of those (``tests/`` + the folder), or below
  the text's package (below the checkout for a text at its top),
  unless its first folder is in none of those places (a path of another project, such as
  torch's tests).

Package ``__init__`` docstrings that map their modules (a line ``Modules...:`` and then one
indented ``name  what it does`` line per module) must name modules of that package.

``readme_gaps`` (reported, not a hard rule): a folder of more than five modules has a
``README.md`` whose first line says its one job, ``# path — its job``.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.review.scans import Finding
from tools.review.source import SKIPPED_DIRS, Module, assigned_names, top_level

PROJECT_PACKAGES = ("dataprep", "loaders", "tools", "tests", "examples")
# A dated log of measurements: it names the code as it was when each entry was written.
HISTORY = frozenset({"tools/RESULTS.md"})
_SPAN = re.compile(r"``(?P<double>[^`\n]+?)``|`(?P<single>[^`\n]+)`")
_FENCE = re.compile(r"^\s*(```|~~~)")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_PATH = re.compile(r"\w[\w.\-]*(?:/[\w.\-]+)*/?")
_RUN_MODULE = re.compile(r"python3? -m (?P<module>[\w.]+)(?:\s.*)?")
_CALL = re.compile(r"(?P<name>[\w.]+)\(.*\)")
_LINE_SUFFIX = re.compile(r":\d+(?:-\d+)?$")
_MODULE_MAP = re.compile(r"^Modules\b.*:$")
_MAP_ENTRY = re.compile(r"^(?P<indent>\s+)(?P<name>\w+)\s")
_MAX_DEPTH = 20  # import chains followed before giving up (a re-export loop)
MAX_MODULES_WITHOUT_README = 5
_JOB_LINE = re.compile(r"^# \S+ — \S")  # "# dataprep/output — where a run's files go"


@dataclass(frozen=True)
class Text:
    """One text to scan: a docstring or a Markdown file; ``line`` is the file line its first line is on."""

    package: str
    path: Path
    line: int
    body: str

    @property
    def folder(self) -> Path:
        return self.path.parent


def _package_of(path: Path) -> str:
    return path.parts[0] if len(path.parts) > 1 and path.parts[0] in PROJECT_PACKAGES else ""


def _docstring_nodes(tree: ast.Module) -> Iterator[ast.Constant]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                yield first.value


def docstrings(modules: Iterable[Module]) -> list[Text]:
    return [Text(m.package, m.path, node.lineno, str(node.value)) for m in modules for node in _docstring_nodes(m.tree)]


def _without_fences(text: str) -> str:
    """``text`` with its fenced code blocks blanked (their lines kept, so line numbers hold)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def checkout_files(root: Path) -> list[Path]:
    """Every file under ``root``, relative to it, sorted; hidden, build and environment folders left out."""
    out: list[Path] = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders
                         if not (d in SKIPPED_DIRS or d.startswith(".") or d.endswith(".egg-info"))]
        out.extend(Path(folder, name).relative_to(root) for name in files)
    return sorted(out)


def markdown(root: Path, files: Iterable[Path]) -> list[Text]:
    """Every ``*.md`` of ``files`` (relative to ``root``) but ``HISTORY``, its fenced code blocks blanked."""
    out = []
    for relative in files:
        if relative.suffix == ".md" and relative.as_posix() not in HISTORY:
            text = _without_fences((root / relative).read_text(encoding="utf-8"))
            out.append(Text(_package_of(relative), relative, 1, text))
    return out


@dataclass(frozen=True)
class _Binding:
    """What a top-level name of a module is: a class, something else defined there, or an import of
    ``source`` (a dotted module name, then ``attr`` in it; ``attr`` None for ``import a.b``)."""

    node: ast.ClassDef | None = None
    home: str = ""
    source: str | None = None
    attr: str | None = None


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.name.split(".")
    keep = len(parts) - node.level + (1 if module.is_package else 0)
    return ".".join(parts[:keep] + ([node.module] if node.module else []))


def _namespace(module: Module) -> dict[str, _Binding]:
    """Top-level name -> binding; ``"*"`` for a module-level ``__getattr__`` or a star import (then any name)."""
    names: dict[str, _Binding] = {}
    for node in top_level(module.tree.body):
        if isinstance(node, ast.ClassDef):
            names[node.name] = _Binding(node=node, home=module.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names["*" if node.name == "__getattr__" else node.name] = _Binding()
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                names[bound] = _Binding(source=alias.name if alias.asname else bound)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            for alias in node.names:
                names[alias.asname or alias.name] = _Binding(source=base, attr=alias.name)
        else:
            for name in assigned_names(node):
                names.setdefault(name, _Binding())
    return names


def _class_members(node: ast.ClassDef) -> set[str]:
    """Names a class body defines, and the attributes its methods assign on ``self``."""
    members = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members.add(item.name)
        else:
            members.update(assigned_names(item))
    for sub in ast.walk(node):
        if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and isinstance(sub.value, ast.Name)
                and sub.value.id in ("self", "cls")):
            members.add(sub.attr)
        elif (name := _setattr_name(sub)) is not None:  # object.__setattr__(self, "name", ...) in a frozen dataclass
            members.add(name)
    return members


def _setattr_name(node: ast.AST) -> str | None:
    """"x" of ``setattr(self, "x", v)`` or ``object.__setattr__(self, "x", v)``, else None."""
    if not isinstance(node, ast.Call) or len(node.args) != 3 or ast.unparse(node.func) not in (
            "setattr", "object.__setattr__"):
        return None
    owner, name = node.args[0], node.args[1]
    if isinstance(owner, ast.Name) and owner.id in ("self", "cls") and isinstance(name, ast.Constant):
        return name.value if isinstance(name.value, str) else None
    return None


class Resolver:
    """Answers "does this dotted name exist in the checkout?" from the scanned modules and the files at ``root``."""

    def __init__(self, root: Path, modules: Iterable[Module], files: Iterable[Path]) -> None:
        self.root = root
        self.modules = {m.name: m for m in modules}
        self.files = [f.as_posix() for f in files]
        self._namespaces: dict[str, dict[str, _Binding]] = {}

    def _names(self, module: str) -> dict[str, _Binding]:
        if module not in self._namespaces:
            self._namespaces[module] = _namespace(self.modules[module])
        return self._namespaces[module]

    def is_module(self, name: str) -> bool:
        """A scanned module, a folder (a namespace package) or a C extension's source."""
        path = self.root.joinpath(*name.split("."))
        return name in self.modules or path.is_dir() or path.with_suffix(".c").is_file()

    def has_file(self, text: Text, relative: str) -> bool:
        """A path relative to ``text``: a file or folder in its folder or a parent of it, or in the tests' mirror
        of one (``tests/loaders/cache/`` for ``loaders/cache/``), else any file below its package (below the
        checkout for a text at the top): ``read/order.py`` in ``loaders/README.md``."""
        folder = text.folder
        places = (folder, *folder.parents)
        if any((self.root / base / parent / relative).exists() for parent in places for base in (".", "tests")):
            return True
        below = f"{text.package}/" if text.package else ""
        return any(f.startswith(below) and f.endswith(f"/{relative}") for f in self.files)

    def has_folder(self, text: Text, name: str) -> bool:
        """A folder ``name`` where ``has_file`` would look for a path starting with it."""
        below = f"{text.package}/" if text.package else ""
        folder = text.folder
        return (any((self.root / parent / name).is_dir() for parent in (folder, *folder.parents))
                or any(f.startswith(below) and f"/{name}/" in f"/{f}" for f in self.files))

    def exists(self, dotted: str) -> bool:
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            name = ".".join(parts[:end])
            if name in self.modules:
                return self._in_module(name, parts[end:], 0)
            if self.is_module(name):
                return end == len(parts)
        return False

    def _in_module(self, module: str, rest: Sequence[str], depth: int) -> bool:
        if not rest:
            return True
        names = self._names(module)
        binding = names.get(rest[0])
        if binding is None:
            return "*" in names or f"{module}.{rest[0]}" in self.modules
        return self._follow(binding, rest[1:], depth)

    def _follow(self, binding: _Binding, rest: Sequence[str], depth: int) -> bool:
        if depth > _MAX_DEPTH:
            return True
        if binding.source is not None:
            target = binding.source if binding.attr is None else f"{binding.source}.{binding.attr}"
            if target in self.modules:
                return self._in_module(target, rest, depth + 1)
            if binding.attr is not None and binding.source in self.modules:
                return self._in_module(binding.source, [binding.attr, *rest], depth + 1)
            return True  # imported from outside the checkout: not ours to check
        if binding.node is None or not rest:
            return True
        return self._in_class(binding.node, binding.home, rest[0], depth)

    def _in_class(self, node: ast.ClassDef, home: str, member: str, depth: int) -> bool:
        """``member`` of the class, or of one of its bases (a base this review cannot see accepts any member)."""
        if member in _class_members(node):
            return True
        for base in node.bases:
            dotted = ast.unparse(base).split("[")[0]
            found = self._names(home).get(dotted)
            if found is None or (found.node is None and found.source is None):
                return True  # a builtin, a generic, a module's attribute, an assigned alias: trust it
            if self._follow(found, [member], depth + 1):
                return True
        return False


def _spans(text: Text) -> Iterator[tuple[int, str]]:
    """(file line, content) of every backticked span of ``text``."""
    for match in _SPAN.finditer(text.body):
        content = (match.group("double") or match.group("single") or "").strip()
        yield text.line + text.body.count("\n", 0, match.start()), content


def _broken(resolver: Resolver, text: Text, content: str) -> bool:
    """Whether ``content`` is a reference (see the module docstring) that does not resolve."""
    run = _RUN_MODULE.fullmatch(content)
    if run is not None:
        module = run.group("module")
        return module.split(".")[0] in PROJECT_PACKAGES and not resolver.is_module(module)
    call = _CALL.fullmatch(content)
    name = _LINE_SUFFIX.sub("", call.group("name") if call else content)
    is_file_name = name.endswith((".py", ".md"))  # ``store.py``: a file, not the attribute ``py`` of ``store``
    if _DOTTED.fullmatch(name) and not is_file_name:
        return name.split(".")[0] in PROJECT_PACKAGES and not resolver.exists(name)
    if not _PATH.fullmatch(name) or not ("/" in name or name.endswith(".py")):
        return False
    if name.split("/")[0] in PROJECT_PACKAGES:
        return not (resolver.root / name).exists()
    if not name.endswith(".py"):
        return False
    if "/" not in name and text.path.suffix != ".md":
        return False  # a bare file name in a docstring is prose (``sitecustomize.py``); READMEs' tables are checked
    if "/" in name and not resolver.has_folder(text, name.split("/")[0]):
        return False  # a path of another project (torch's ``test/test_dataloader.py``)
    return not resolver.has_file(text, name)


def _unmapped_modules(resolver: Resolver, text: Text) -> Iterator[tuple[int, str]]:
    """(line, name) of the entries of a package docstring's module map that are no module of it."""
    if text.path.name != "__init__.py" or text.line != 1:
        return
    package = ".".join(text.path.parent.parts)
    lines = text.body.splitlines()
    for start, line in enumerate(lines):
        if not _MODULE_MAP.match(line):
            continue
        indent = None
        for offset, entry in enumerate(lines[start + 1:], start + 1):
            found = _MAP_ENTRY.match(entry)
            if found is None:
                break
            indent = indent or found.group("indent")
            if found.group("indent") == indent and not resolver.is_module(f"{package}.{found.group('name')}"):
                yield text.line + offset, found.group("name")


def stale_references(root: Path, modules: Sequence[Module]) -> list[Finding]:
    """References (module docstring) in ``modules``' docstrings and the checkout's Markdown that name
    nothing: one finding per reference, at its line, named by the reference as written."""
    files = checkout_files(root)
    resolver = Resolver(root, modules, files)
    out = []
    for text in [*docstrings(modules), *markdown(root, files)]:
        for line, content in _spans(text):
            if _broken(resolver, text, content):
                out.append(Finding(text.package, text.path.as_posix(), line, content))
        for line, name in _unmapped_modules(resolver, text):
            out.append(Finding(text.package, text.path.as_posix(), line, f"module map: {name}"))
    return out


def readme_gaps(root: Path, modules: Sequence[Module], *, more_than: int = MAX_MODULES_WITHOUT_README) -> list[Finding]:
    """Folders of more than ``more_than`` modules (``__init__`` not counted) with no ``README.md``, or whose README's
    first line does not say the folder's job (``# path — its job``); one finding per folder, counting its modules."""
    counts: dict[Path, int] = {}
    packages: dict[Path, str] = {}
    for module in modules:
        if module.path.name != "__init__.py":
            counts[module.path.parent] = counts.get(module.path.parent, 0) + 1
            packages[module.path.parent] = module.package
    out = []
    for folder, count in sorted(counts.items()):
        readme = root / folder / "README.md"
        first = readme.read_text(encoding="utf-8").split("\n", 1)[0] if readme.is_file() else ""
        if count > more_than and not _JOB_LINE.match(first):
            out.append(Finding(packages[folder], (folder / "README.md").as_posix(), 1, folder.as_posix(), count))
    return out
