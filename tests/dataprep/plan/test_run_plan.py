"""The run plan: file parts, ranges, RAW's listing; a range's output depends only on the plan and the range."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dataprep.plan.checkpoint import Checkpoint, save_checkpoint
from dataprep.inputs.listing import Entry, changes
from dataprep.formats.manifest import read_manifest
from dataprep.plan.file_units import line_parts
from dataprep.plan.run_plan import RunPlan, split_ranges
from dataprep.output.store import LocalStore
from tests.dataprep.helpers import numbered_images, shard_cli


@pytest.mark.parametrize("part_bytes", [1, 7, 30, 1000])
def test_line_parts_start_at_lines_and_know_their_line_numbers(tmp_path, part_bytes):
    lines = [b"x" * (i % 9) + b"\n" for i in range(40)] + [b"no newline at the end"]
    path = tmp_path / "f.txt"
    path.write_bytes(b"".join(lines))
    parts = line_parts(path, part_bytes)
    data = path.read_bytes()
    assert parts[0][0] == 0 and parts[-1][1] is None
    for (start, end, first_row), nxt in zip(parts, parts[1:] + [None]):
        assert start == 0 or data[start - 1 : start] == b"\n"
        assert data[:start].count(b"\n") + 1 == first_row
        assert nxt is None or end == nxt[0]


def test_split_ranges_is_a_pure_function_of_sizes():
    sizes = np.array([5, 5, 5, 20, 1, 1, 1, 0], dtype=np.int64)
    assert split_ranges(sizes, 10).tolist() == [0, 2, 4, 8]
    assert split_ranges(sizes, 1000).tolist() == [0, 8]
    assert split_ranges(np.zeros(0, dtype=np.int64), 10).tolist() == [0, 0]


def test_listing_changes_name_files_added_removed_and_changed():
    old = [Entry(b"a/1.jpg", 3, 1), Entry(b"a/2.jpg", 3, 1), Entry(b"b/1.jpg", 3, 1)]
    new = [Entry(b"a/1.jpg", 4, 1), Entry(b"a/10.jpg", 3, 1), Entry(b"b/1.jpg", 3, 2)]
    assert changes(iter(old), iter(new)) == [
        "changed a/1.jpg (size 3 -> 4 bytes)", "added a/10.jpg", "removed a/2.jpg",
        "changed b/1.jpg (modified since the plan was made)",
    ]


def _table(root: Path) -> Path:
    root.mkdir(parents=True)
    with open(root / "t.jsonl", "w") as f:
        for i in range(400):
            f.write(json.dumps({"id": i, "text": f"row {i}"}) + "\n")
    return root


@pytest.mark.parametrize(("make", "options"), [
    (lambda root: numbered_images(root, 30), ["--samples-per-shard", "4", "--range-size", "6KiB"]),
    (_table, ["--samples-per-shard", "50", "--range-size", "3KiB"]),
], ids=["images", "table"])
def test_a_range_is_written_the_same_from_the_plan_alone(tmp_path, make, options):
    """Write a run whole; then, in another OUT holding only its plan, write ranges from 1 on:
    the shards of those ranges are the same bytes (as another machine would write them)."""
    raw = make(tmp_path / "raw")
    args = ["--workers", "1", *options]
    whole = tmp_path / "whole"
    assert shard_cli(raw, whole, *args, "--json") == 0
    names = [s.name for s in read_manifest(whole).shards]
    assert len({n.split("-")[1] for n in names}) >= 3, names  # several ranges, shards numbered within each
    # Plan only (stopped right after planning), then start at range 1 as a second machine would.
    other = tmp_path / "other"
    from dataprep.commands import shard

    real = shard.make_run_plan
    plans: list[RunPlan] = []

    def plan_and_stop(*a, **k):
        plans.append(real(*a, **k))
        raise KeyboardInterrupt

    shard.make_run_plan = plan_and_stop
    try:
        assert shard_cli(raw, other, *args) == 130
    finally:
        shard.make_run_plan = real
    plan = plans[0]
    start, _ = plan.range_bounds(1)
    save_checkpoint(LocalStore(other), Checkpoint(range=1, position=start))
    assert shard_cli(raw, other, *args, "--allow-empty") == 0
    later = [n for n in names if not n.split("-")[1] == "00000"]
    assert later and all((other / n).read_bytes() == (whole / n).read_bytes() for n in later)
    assert not any((other / n).exists() for n in names if n.split("-")[1] == "00000")
    shutil.rmtree(other)


def test_plan_records_are_what_a_run_cleans(tmp_path):
    from dataprep.commands.config import ShardConfig
    from dataprep.commands.shard import plan_records
    from dataprep.engines.write_loop import clean_item

    raw = numbered_images(tmp_path / "raw", 8)
    (tmp_path / "spill").mkdir()
    handler, items = plan_records(ShardConfig(raw=raw, out=tmp_path / "out", seed=3), tmp_path / "spill", "wds")
    results = [clean_item(handler, item) for item in items]
    assert len(results) == 8
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--seed", "3") == 0
    assert read_manifest(out).totals.samples_kept == sum(not hasattr(r, "reason") for r in results)



def _plan_peak_bytes(raw: Path, spill: Path, dirs: int, per_dir: int) -> int:
    import tracemalloc

    from dataprep.commands.config import ShardConfig
    from dataprep.commands.stage_options import plan_options
    from dataprep.plan.plan_build import make_run_plan
    from dataprep.inputs.sources import Layout, LayoutChoice

    for c in range(dirs):
        (raw / f"c{c:03d}").mkdir(parents=True, exist_ok=True)
        for i in range(per_dir):
            (raw / f"c{c:03d}" / f"{i:04d}.jpg").write_bytes(b"%d/%d" % (c, i) * (1 + i % 7))  # distinct bytes
    spill.mkdir(exist_ok=True)
    tracemalloc.start()
    config = ShardConfig(raw=raw, out=raw.parent / "out")
    choice = LayoutChoice(Layout.IMAGE_FOLDER, "test")
    plan = make_run_plan(plan_options(config), choice, spill, config.fingerprint())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(plan) == dirs * per_dir
    return peak


def test_plan_memory_per_input_is_small(tmp_path):
    """Planned inputs are spilled to disk: Python-traced memory grows by ~30 bytes per input at
    1,000-4,000 inputs (the int32 order and sizes, and sort buffers of up to 4,096 rows that stop
    growing there), not by a RawRecord (~525 bytes) or a key in a set (~100 bytes, before issue 27)
    each. At scale, peak RSS: tests/tools/bench/test_plan_bench.py (<= 16 bytes per input)."""
    _plan_peak_bytes(tmp_path / "warm", tmp_path / "spill0", 1, 5)  # lazy imports out of the way
    small = _plan_peak_bytes(tmp_path / "small", tmp_path / "spill1", 20, 50)
    large = _plan_peak_bytes(tmp_path / "large", tmp_path / "spill2", 80, 50)
    per_input = (large - small) / 3000
    assert per_input < 64, per_input
