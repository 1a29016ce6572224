"""What pyproject.toml claims is what CI installs and runs."""

from __future__ import annotations

import re
import sys
import tomllib
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
