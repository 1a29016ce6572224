"""A Ctrl-C that lands in a finaliser or weakref callback (Python prints "Exception ignored"
and drops it) still stops ``dataprep``, silently, instead of being printed and lost."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.dataprep.helpers import default_sigint

ROOT = Path(__file__).resolve().parents[3]

# No clock: with the hook the script waits for the interrupt itself (the subprocess timeout is only
# the guard against a hang); without it Python has printed and dropped the interrupt by the time
# ``Bomb()`` returns, so there is nothing to wait for.
SCRIPT = """
import time
from dataprep.cli.interrupts import keep_interrupts
{install}
class Bomb:
    def __del__(self):
        raise KeyboardInterrupt  # as if SIGINT arrived while a finaliser ran
try:
    Bomb()
    while {wait}:
        time.sleep(0.001)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
"""


def _run(install: str) -> subprocess.CompletedProcess[str]:
    script = SCRIPT.format(install=install, wait=bool(install))
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, preexec_fn=default_sigint)


def test_an_interrupt_in_a_finaliser_reaches_the_main_flow_silently() -> None:
    done = _run("keep_interrupts(); keep_interrupts()")  # twice: installed once
    assert done.stdout.strip() == "interrupted"
    assert done.stderr == ""


def test_without_the_hook_python_prints_and_drops_it() -> None:
    done = _run("")
    assert done.stdout.strip() == "not interrupted"
    assert "Exception ignored" in done.stderr
