"""Loop 14 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
nothing outlives the loop.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

import gc
import os
from typing import Any

import pytest

from loaders import DataLoader
from tests.loaders.helpers import SlowDataset, children_of_self
from tests.samples import wait_until

# ---------------------------------------------------------------------------------------------
# 14. nothing outlives the loop: a script that errs, breaks and times out, never calling close()
# ---------------------------------------------------------------------------------------------

EXIT_SCRIPT = r"""
import multiprocessing, sys, threading
sys.path.insert(0, sys.argv[1])
from tests.loaders.helpers import BlockedDataset, KeyErrorDataset, RangeDataset
from loaders import DataLoader
keep = []
never = {"thread": threading.Event(), "process": multiprocessing.Event()}  # never set: the read stays stuck
for wt in ("thread", "process"):
    loader = DataLoader(KeyErrorDataset(), batch_size=2, num_workers=2, worker_type=wt, persistent_workers=True)
    try:
        for _ in loader:
            pass
    except KeyError:
        pass
    keep.append(loader)
    train = DataLoader(RangeDataset(), batch_size=2, num_workers=2, worker_type=wt, persistent_workers=True)
    for i, _ in enumerate(train):
        if i == 1:
            break
    keep.append(train)
    stuck = BlockedDataset(never[wt], threading.Event() if wt == "thread" else multiprocessing.Event(), 4, 300.0)
    slow = DataLoader(stuck, batch_size=1, num_workers=1, worker_type=wt, timeout=0.2)
    try:
        next(iter(slow))
    except RuntimeError:
        pass
    keep.append(slow)
print("done", flush=True)
"""


@pytest.mark.slow
def test_a_script_that_never_closes_its_loaders_exits_promptly(tmp_path: Any) -> None:
    """Promptly: while a worker of each kind is still stuck in a sample for 300 s (liveness limit 60 s)."""
    import subprocess
    import sys

    script = tmp_path / "exit.py"
    script.write_text(EXIT_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), os.getcwd()], capture_output=True, text=True, timeout=60,
                          cwd=os.getcwd())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done" in proc.stdout


def test_no_worker_process_left_after_a_timeout() -> None:
    before = children_of_self()
    loader = DataLoader(SlowDataset(4), batch_size=1, num_workers=1, worker_type="process", timeout=0.2)
    with pytest.raises(RuntimeError):
        next(iter(loader))
    gc.collect()
    assert wait_until(lambda: children_of_self() <= before), children_of_self() - before
    loader.close()
