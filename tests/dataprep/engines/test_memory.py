"""Peak memory of `dataprep shard` does not grow with the rows and lines of tables and text
(issue 12, item 9): keys are unique by construction and duplicates are looked up in an
on-disk set, so nothing is kept per row. The image case is in engines/test_local.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork+exec, so a child of pytest (which holds
# torch and more) reports pytest's peak whatever dataprep does; VmHWM starts afresh at exec.
_PEAK_RSS_SCRIPT = """
import sys
from dataprep.cli import main
status = main(["shard", *sys.argv[1:], "--workers", "1", "--no-progress", "--shard-size", "4MiB"])
with open("/proc/self/status") as f:
    print(status, next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")))
"""


def _peak_rss_kib(raw: Path, out: Path, *options: str) -> int:
    """Peak RSS (KiB, VmHWM) of a ``dataprep shard`` process (``--workers 1``: it does everything)."""
    # Arrow's default allocator (jemalloc/mimalloc) keeps per-thread caches whose size varies
    # from run to run by ~12 MiB; the system allocator makes the peak repeatable.
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS_SCRIPT, os.fspath(raw), os.fspath(out), *options],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[3], env=env)
    assert done.returncode == 0 and done.stdout, done.stderr
    status, peak = map(int, done.stdout.splitlines()[-1].split())
    assert status == 0, done.stderr
    return peak


def _text(root: Path, lines: int) -> Path:
    root.mkdir(parents=True)
    with open(root / "corpus.txt", "w") as f:
        for i in range(lines):
            f.write(f"line {i} {i * 7919 % 100003}\n")  # every line distinct: the duplicate set sees them all
    return root


def _table(root: Path, rows: int) -> Path:
    root.mkdir(parents=True)
    with open(root / "rows.csv", "w") as f:
        f.write("id,name\n")
        for i in range(rows):
            f.write(f"{i},n{i * 7919 % 100003}\n")
    return root


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS (VmHWM) from Linux /proc")
@pytest.mark.parametrize(("make", "options"), [(_text, ("--text-unit", "line")), (_table, ("--dedup-on", "id"))],
                         ids=["text", "table"])
def test_peak_memory_does_not_grow_with_rows(tmp_path, make, options):
    """4x the rows (300k more: ~33 MB with ~110 bytes kept per row, as before) must not raise
    the peak RSS by more than a few MiB.

    Can fail: with every cleaned record kept in a list (``WriteLoop._consume`` appending to a
    global, tried by hand) the text case grew by far more than the bound, as did the
    previous measurement's blind spot (ru_maxrss, which reported pytest's peak for both)."""
    small = _peak_rss_kib(make(tmp_path / "small", 100_000), tmp_path / "out-small", *options)
    large = _peak_rss_kib(make(tmp_path / "large", 400_000), tmp_path / "out-large", *options)
    assert (large - small) * 1024 < 12 * 2**20, f"peak RSS grew from {small} to {large} KiB"
