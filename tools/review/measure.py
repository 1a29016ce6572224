"""One review of a checkout: every measurement over its packages, the summary table and the JSON results.

The hard rules are ``cycles`` (an import cycle), ``layer_violations`` (an import against a
package's layer order, ``tools.review.layers``), ``foreign_reads`` (loaders importing
dataprep outside its formats and remote client), ``duplicate_names`` (a public class,
function or constant, in any assignment form, defined in two product modules) and
``stale_references`` (a docstring or Markdown reference to code that does not exist,
``tools.review.references``): any of them fails the review. The other measurements are
reported. Per-package columns count findings in that top-level folder (the total also
counts the Markdown at the top of the checkout and in ``docs/``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.common.report import format_table
from tools.review import layers, references, scans
from tools.review.imports import Graph, cycles, import_graph, imports_of_programs
from tools.review.scans import Finding
from tools.review.source import Module, load_tree

CODE_PACKAGES = ("dataprep", "loaders", "tools")  # import graph, sizes, records, private reads
ALL_PACKAGES = (*CODE_PACKAGES, "tests", "examples")  # duplicates, line lengths, type: ignore
# (key, label, which packages it covers); the order of the table.
MEASURES = (
    ("cycles", "import cycles (strongly connected groups; hard rule)", CODE_PACKAGES),
    ("layer_violations", "imports against the package's layer order (hard rule)", ("dataprep", "loaders")),
    ("foreign_reads", "loaders importing dataprep beyond formats, remote and cpus (hard rule)", ("loaders",)),
    ("unplaced_stages", "folders missing from their package's layer order", ("dataprep", "loaders")),
    ("program_imports", "tools modules importing a program", ("tools",)),
    ("long_modules", f"modules over {scans.MAX_MODULE_LINES} lines", CODE_PACKAGES),
    ("long_functions", f"functions over {scans.MAX_FUNCTION_LINES} lines", CODE_PACKAGES),
    ("wide_constructors", f"constructors over {scans.MAX_INIT_PARAMS} parameters", CODE_PACKAGES),
    ("positional_records", f"classes built with over {scans.MAX_POSITIONAL_FIELDS} positional fields",
     CODE_PACKAGES),
    ("private_reads", "reads of another module's private names", CODE_PACKAGES),
    ("duplicate_helpers", "helper names defined in more than one file", ALL_PACKAGES),
    ("duplicate_names", "public names defined in two product modules (hard rule)", ("dataprep", "loaders")),
    ("stale_references", "docstring and Markdown references that do not resolve (hard rule)", ALL_PACKAGES),
    ("readme_gaps", f"folders of over {references.MAX_MODULES_WITHOUT_README} modules without a README of their job",
     CODE_PACKAGES),
    ("library_prints", "print() in library code", CODE_PACKAGES),
    ("long_lines", f"lines over {scans.MAX_LINE} characters", ALL_PACKAGES),
    ("type_ignores", "# type: ignore", CODE_PACKAGES),
    ("bare_type_ignores", "# type: ignore without a code and a reason", CODE_PACKAGES),
)


HARD_RULES = ("cycles", "layer_violations", "foreign_reads", "duplicate_names", "stale_references")
_BROKEN = {"cycles": "import cycles", "layer_violations": "imports against the layers",
           "foreign_reads": "loaders reading dataprep beyond formats, remote and cpus",
           "duplicate_names": "names defined twice", "stale_references": "references that do not resolve"}


@dataclass(frozen=True)
class Review:
    """Findings per measurement key (see ``MEASURES``) for the checkout at ``root``."""

    root: str
    findings: dict[str, list[Finding]]

    @property
    def failed(self) -> bool:
        """A hard rule broken (``HARD_RULES``): an import cycle, an import against the layers, a read of
        dataprep's insides, a name defined twice, a reference to nothing."""
        return any(self.findings[key] for key in HARD_RULES)

    def count(self, key: str, package: str | None = None) -> int:
        return sum(1 for f in self.findings[key] if package is None or f.package == package)

    def to_json(self) -> dict[str, Any]:
        return {"root": self.root, "failed": self.failed,
                "counts": {key: {p: self.count(key, p) for p in packages} | {"total": self.count(key)}
                           for key, _, packages in MEASURES},
                "findings": {key: [{"where": f.where(), "name": f.name, "count": f.count} for f in found]
                             for key, found in self.findings.items()}}


def _exempt_from_prints(root: Path) -> dict[str, list[str]]:
    """The pyproject's ``[tool.ruff.lint.per-file-ignores]`` (empty without a pyproject)."""
    path = root / "pyproject.toml"
    if not path.is_file():
        return {}
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    return dict(doc.get("tool", {}).get("ruff", {}).get("lint", {}).get("per-file-ignores", {}))


def _cycle_findings(modules: Sequence[Module], graph: Graph) -> tuple[list[Finding], list[Finding]]:
    by_name = {m.name: m for m in modules}
    groups = []
    for group in cycles(graph):
        first = by_name[group[0]]
        groups.append(Finding(first.package, str(first.path), 1, " <-> ".join(group), len(group)))
    pairs = [Finding(by_name[a].package, str(by_name[a].path), 1, f"{a} -> {b}")
             for a, b in imports_of_programs(modules, graph)]
    return groups, pairs


def review(root: Path) -> Review:
    """Run every measurement over the checkout at ``root``. Raises ``ToolError`` for a bad root or file."""
    every = load_tree(root, ALL_PACKAGES)
    code = [m for m in every if m.package in CODE_PACKAGES]
    graph = import_graph(code)
    groups, pairs = _cycle_findings(code, graph)
    ignores, bare = scans.type_ignores(code)
    findings = {
        "cycles": groups,
        "layer_violations": layers.layer_violations(code, graph),
        "foreign_reads": layers.foreign_reads(code, graph),
        "unplaced_stages": layers.unplaced_stages(code),
        "program_imports": pairs,
        "long_modules": scans.long_modules(code),
        "long_functions": scans.long_functions(code),
        "wide_constructors": scans.wide_constructors(code),
        "positional_records": scans.positional_records(code),
        "private_reads": scans.private_reads(code),
        "duplicate_helpers": scans.duplicate_helpers(every),
        "duplicate_names": layers.duplicate_names(code),
        "stale_references": references.stale_references(root, every),
        "readme_gaps": references.readme_gaps(root, code),
        "library_prints": scans.library_prints(code, _exempt_from_prints(root)),
        "long_lines": scans.long_lines(every),
        "type_ignores": ignores,
        "bare_type_ignores": bare,
    }
    ordered = {key: sorted(found, key=lambda f: (f.path, f.line, f.name)) for key, found in findings.items()}
    return Review(str(root), ordered)


def format_review(result: Review, *, details: int) -> str:
    """The summary table (measurement x package), then up to ``details`` findings per measurement."""
    rows = [[label, *(result.count(key, p) if p in packages else None for p in ALL_PACKAGES), result.count(key)]
            for key, label, packages in MEASURES]
    lines = [format_table(["measurement", *ALL_PACKAGES, "total"], rows, title=f"review of {result.root}")]
    for key, label, _ in MEASURES:
        found = result.findings[key]
        if not found or details <= 0:
            continue
        lines += ["", f"{label}:"]
        lines += [f"  {f.where()}  {f.name}" + (f"  ({f.count})" if f.count != 1 else "") for f in found[:details]]
        if len(found) > details:
            lines.append(f"  ... {len(found) - details} more (--details N)")
    broken = [_BROKEN[key] for key in HARD_RULES if result.findings[key]]
    verdict = f"FAILED: {', '.join(broken)}" if broken else "ok: every hard rule holds"
    return "\n".join([*lines, "", verdict])
