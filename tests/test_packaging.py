"""What pyproject.toml claims is what CI installs and runs."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _lower_bound(spec: str) -> tuple[int, ...]:
    match = re.search(r">=\s*([\d.]+)", spec)
    assert match, f"no lower bound in {spec!r}"
    return tuple(int(part) for part in match.group(1).split("."))


def test_python_claim_is_the_tested_interpreter() -> None:
    claimed = _lower_bound(_pyproject()["project"]["requires-python"])
    assert claimed == (3, 11), "CI tests Python 3.11: claim exactly what it tests"
    assert sys.version_info[:2] >= claimed


def test_torch_claim_matches_the_makefile_pin_and_the_installed_torch() -> None:
    deps = [d for d in _pyproject()["project"]["dependencies"] if re.match(r"torch\b", d)]
    assert len(deps) == 1
    claimed = _lower_bound(deps[0])
    pin = re.search(r"^TORCH\s*\?=\s*torch==([\d.]+)", (ROOT / "Makefile").read_text(), re.M)
    assert pin, "the Makefile pins torch for this machine"
    assert claimed[:2] == tuple(int(p) for p in pin.group(1).split("."))[:2], "claim the torch that CI installs"
    installed = tuple(int(p) for p in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
    assert installed >= claimed[:2]


# Imports that need not be declared, and why: tools that use them only where they are installed.
OPTIONAL_IMPORTS = {
    "torchvision": "tools.gpu and the device suite only, where it imports (a CUDA machine's matching build): "
                   "its batched decode as a measured row and the stock feed; the product does not use it",
    "litdata": "tools.bench.remote_peers only, run in the peers' own venv (--peers-python): they pin other torch",
    "streaming": "tools.bench.remote_peers only, run in the peers' own venv (--peers-python): they pin other torch",
    "compression": "dataprep.inputs.compressed: the standard library's zstd from Python 3.14 (backports.zstd before)",
    "zstandard": "tools.bench.codec_bench only: compared with the zstd reader dataprep uses, when installed",
}
# Distributions that stand in for a declared one (the Makefile's PILLOW=simd replaces pillow).
STANDS_IN_FOR = {"pillow-simd": "pillow"}
SCANNED = ("dataprep", "loaders", "tools", "tests", "examples")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    """Distribution names in ``dependencies`` and every extra, normalized, without versions or extras."""
    project = _pyproject()["project"]
    specs = [*project["dependencies"], *(s for extra in project["optional-dependencies"].values() for s in extra)]
    return {_normalized(re.match(r"[A-Za-z0-9_.-]+", spec).group(0)) for spec in specs}


def _third_party_imports(roots: Sequence[Path]) -> dict[str, set[str]]:
    """Top-level module imported -> files importing it, for every import of something outside the
    standard library and this repository (inside functions and ``try`` blocks too)."""
    ours = {"__future__", *SCANNED}
    found: dict[str, set[str]] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {name.split(".")[0] for name in names} - ours - sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def undeclared(imports: Mapping[str, set[str]], declared: set[str]) -> dict[str, str]:
    """Module -> why it is not covered by ``declared``: not installed, or installed by a
    distribution that pyproject.toml does not name (a transitive dependency is not a declaration)."""
    owners = importlib.metadata.packages_distributions()
    problems = {}
    for module, files in sorted(imports.items()):
        if module in OPTIONAL_IMPORTS:
            continue
        dists = {STANDS_IN_FOR.get(_normalized(d), _normalized(d)) for d in owners.get(module, ())}
        if not dists:
            problems[module] = f"not installed (imported by {sorted(files)[0]})"
        elif not dists & declared:
            problems[module] = f"from {sorted(dists)}, not declared in pyproject.toml (imported by {sorted(files)[0]})"
    return problems


def test_every_imported_package_is_declared() -> None:
    imports = _third_party_imports([ROOT / name for name in SCANNED])
    assert {"numpy", "torch", "PIL", "pytest", "moto"} <= set(imports)  # the scan sees code and tests
    assert undeclared(imports, _declared()) == {}


def test_an_undeclared_or_missing_import_is_caught() -> None:
    problems = undeclared({"requests": {"tools/x.py"}, "no_such_module_here": {"tests/y.py"}}, _declared())
    assert problems["requests"].startswith("from ['requests'], not declared")  # installed, but only transitively
    assert problems["no_such_module_here"].startswith("not installed")


# Extras the Makefile leaves out, and why.
NOT_IN_MAKE_EXTRAS = {
    "gpu": "nvImageCodec with the CUDA nvJPEG libraries for DataLoader(decode='device') on a GPU; CI installs the "
           "codec alone (the test extra), whose CPU backend runs the same decode path",
}


def test_the_makefile_installs_every_extra_from_pyproject_and_lists_no_package_itself() -> None:
    makefile = (ROOT / "Makefile").read_text()
    extras = re.search(r"^EXTRAS\s*\?=\s*(\S+)", makefile, re.M)
    declared = set(_pyproject()["project"]["optional-dependencies"])
    assert set(NOT_IN_MAKE_EXTRAS) <= declared
    assert extras and set(extras.group(1).split(",")) == declared - set(NOT_IN_MAKE_EXTRAS)
    assert '$(PIP) install -e ".[$(EXTRAS)]"' in makefile
    # Besides pip itself, torch (pinned first) and the Pillow step, nothing is named on a pip line.
    for line in re.findall(r"\$\(PIP\) install ([^;\\\n]*)", makefile):
        names = [w for w in line.split() if not w.startswith("-") and w not in (":all:",)]
        assert all(n in ('"$(TORCH)"', '".[$(EXTRAS)]"', "pip", "pillow", "pillow-simd") for n in names), line


def test_every_console_script_names_a_callable_of_an_installed_package() -> None:
    scripts = _pyproject()["project"]["scripts"]
    assert scripts == {"dataprep": "dataprep.cli:main", "shardfeed-profile": "loaders.profiler.cli:main"}
    packaged = _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    for target in scripts.values():
        module, _, attr = target.partition(":")
        assert any(re.fullmatch(pattern.replace("*", ".*"), module) for pattern in packaged), target
        assert callable(getattr(importlib.import_module(module), attr)), target
