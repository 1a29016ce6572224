"""The examples' tests run each example as a user would (a child interpreter) or import it (its functions)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    """``examples/<name>.py`` imported as a module (its ``main``, its model)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(name: str, *args: str, timeout_s: float) -> str:
    """Run ``python examples/<name>.py ARGS``; its stdout, after checking it exited 0 (``timeout_s``: a hang)."""
    proc = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *args], capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    assert proc.returncode == 0, f"{name}.py {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc.stdout
