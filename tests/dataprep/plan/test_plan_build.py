"""The bounded-memory planner (issue 27) plans exactly what the in-memory one did, for every layout, and its parts."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from dataprep.clean.options import TableOptions
from dataprep.errors import FormatError
from dataprep.inputs.raw_source import RawSource
from dataprep.inputs.sources import KeyAssigner, Layout, LayoutChoice
from dataprep.inputs.text import TextUnit
from dataprep.plan.external_sort import ExternalSort, SortLimits
from dataprep.plan.plan_build import SPILL_DIR, PlanLimits, make_run_plan
from dataprep.plan.run_plan import PLAN_NAME, PlanOptions, RangeSplitter, RunPlan, RunPlanInfo, split_ranges
from dataprep.plan.unique_keys import SpilledKeys
from tests.dataprep.plan.old_planner import old_plan

TINY = PlanLimits(sort=SortLimits(run_rows=3, block_rows=2, fanout=2), key_memtable_rows=2)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _image_folder(root: Path) -> Path:
    big = os.urandom(70_000)
    _write(root / "a/1.jpg", b"one" * 50)
    _write(root / "b/7.jpg", b"one" * 50)            # a duplicate of a/1.jpg in another class
    _write(root / "c/0.jpg", b"one" * 50)            # ... sorts last: a/1.jpg wins
    _write(root / "a/2.jpg", b"two" * 50)            # same size as a/1.jpg, other bytes
    _write(root / "a/3.jpg", big + b"x")             # same size and head as a/4.jpg, other tail
    _write(root / "a/4.jpg", big + b"y")
    _write(root / "b/5.jpg", big + b"x")             # a duplicate past the head
    _write(root / "a/1.txt", b"sidecar")
    _write(root / "a/x y.jpg", b"collides with x_y" * 3)
    _write(root / "a/x_y.jpg", b"and so does this" * 3)
    suffix = hashlib.sha1(b"a/x_y").hexdigest()[:10]
    _write(root / f"a/x_y-{suffix}.jpg", b"takes x_y's first suffix" * 2)
    _write(root / "a/6.jpg", b"six")
    _write(root / "a/6.png", b"six as png")
    _write(root / "a/.DS_Store", b"hidden")
    _write(root / "a/empty.jpg", b"")
    _write(root / "b/empty.jpg", b"")                # empty files are never duplicates
    _write(root / "loose.jpg", b"no class")          # bad_label
    _write(root / "README.md", b"stray")
    return root


def _grouped(root: Path) -> Path:
    _write(root / "g/s 1.jpg", b"first")
    _write(root / "g/s 1.txt", b"caption")
    _write(root / "g/s_1.jpg", b"second")
    _write(root / "g/deep/k.jpg", b"first")          # a duplicate, in a deeper folder
    _write(root / "g/deep/k.seg.png", b"mask")
    _write(root / "h/only.txt", b"no image")
    return root


def _table(root: Path) -> Path:
    _write(root / "t 1.csv", b"id,text\n1,a\n2,b\n")
    _write(root / "t_1.csv", b"id,text\n3,c\n")
    _write(root / "big.jsonl", b"".join(json.dumps({"id": i, "text": "x" * (i % 50)}).encode() + b"\n"
                                        for i in range(300)))
    _write(root / "notes.md", b"not a table")
    return root


def _text(root: Path) -> Path:
    _write(root / "d 1.txt", b"".join(b"line %d\n" % i for i in range(400)))
    _write(root / "d_1.txt", b"other\n")
    _write(root / "sub/e.txt", b"e\n")
    _write(root / "image.jpg", b"not text")
    return root


CASES = {
    "image-folder": (_image_folder, Layout.IMAGE_FOLDER, {}),
    "image-folder-unshuffled": (_image_folder, Layout.IMAGE_FOLDER, {"shuffle": False}),
    "grouped": (_grouped, Layout.GROUPED, {"seed": 5}),
    "table": (_table, Layout.TABLE, {"table": TableOptions()}),
    "text-lines": (_text, Layout.TEXT, {"text_unit": TextUnit.LINE}),
    "text-files": (_text, Layout.TEXT, {}),
}


def _replaced(plan: RunPlan) -> dict[int, object]:
    indices = plan.replaced_index.tolist()
    sorted_units = {int(plan.order[p]): unit for p, unit in enumerate(plan.units(0, len(plan)))}
    return {i: sorted_units[i] for i in indices}


@pytest.mark.parametrize("limits", [PlanLimits(), TINY], ids=["default-limits", "tiny-limits"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_plan_is_what_the_in_memory_planner_made(tmp_path: Path, case: str, limits: PlanLimits) -> None:
    make, layout, extra = CASES[case]
    options = PlanOptions(raw=RawSource(make(tmp_path / "raw")), range_bytes=700, **extra)
    expected = old_plan(options, layout)
    state = tmp_path / "state"
    state.mkdir()
    plan = make_run_plan(options, LayoutChoice(layout, "test"), state, {"case": case}, limits=limits)
    assert [plan.order[p] for p in range(len(plan))] == expected.order
    assert list(plan.units(0, len(plan))) == [expected.units[i] for i in expected.order]
    assert plan.unit_bytes.tolist() == expected.unit_bytes
    assert plan.range_starts.tolist() == expected.range_starts
    assert _replaced(plan) == expected.replaced
    assert plan.info.label_map == expected.label_map
    assert plan.info.listing_sha256 == expected.listing_sha256
    assert not (state / SPILL_DIR).exists()
    if layout is Layout.IMAGE_FOLDER:
        assert len(expected.replaced) == 3 and len(plan) > 10  # the tree exercises what it should
        keys = sorted(u.key for u in expected.units if hasattr(u, "key"))
        assert len(keys) == len(set(keys)) and any(k.endswith("-2") for k in keys)


def test_keys_collide_exactly_as_in_memory_through_the_disk_runs(tmp_path: Path) -> None:
    """Stems whose safe keys collide, and suffixes taken by other stems, across many on-disk runs."""
    stems = [f"d/{i % 50} {'x' * (i % 3)}" for i in range(600)]
    stems += [f"d/{i % 50}_{'x' * (i % 3)}" for i in range(300)]
    stems += [f"d/{i % 50}_{'x' * (i % 3)}-{hashlib.sha1(f'd/{i % 50} '.encode()).hexdigest()[:10]}"
              for i in range(50)]
    memory = KeyAssigner()
    with SpilledKeys(tmp_path / "keys", expected=len(stems), memtable_rows=7) as used:
        disk = KeyAssigner(used)
        assert [disk.assign(s) for s in stems] == [memory.assign(s) for s in stems]


def test_a_digest_collision_is_confirmed_against_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Different keys with one digest are still told apart (the digest is forced to collide here)."""
    import dataprep.plan.unique_keys as unique_keys

    class _OneDigest:
        def __init__(self, data: bytes, digest_size: int) -> None:
            self.size = digest_size

        def digest(self) -> bytes:
            return b"\x01" * self.size

    monkeypatch.setattr(unique_keys.hashlib, "blake2b", _OneDigest)
    with SpilledKeys(tmp_path / "keys", expected=4, memtable_rows=2) as used:
        assert [used.claim(k) for k in ("a", "b", "a", "c", "b", "c", "d")] == [True, True, False, True, False,
                                                                                   False, True]


@pytest.mark.parametrize("rows", [1, 2, 3, 1000])
def test_external_sort_sorts_across_runs_and_merges(tmp_path: Path, rows: int) -> None:
    dtype = np.dtype([("k", "<i8"), ("index", "<i8")])
    rng = np.random.default_rng(rows)
    records = np.empty(997, dtype=dtype)
    records["k"], records["index"] = rng.integers(0, 20, 997), rng.permutation(997)
    sorter = ExternalSort(tmp_path / "s", dtype, SortLimits(run_rows=max(2, rows), block_rows=rows, fanout=3))
    for start in range(0, 997, 101):
        sorter.add(records[start:start + 101])
    out = np.concatenate(list(sorter.sorted()))
    assert out.tolist() == sorted(records.tolist())
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("range_bytes", [-3, 1, 2, 7, 50, 10**9])
@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_range_splitter_splits_as_split_ranges(range_bytes: int, chunk: int) -> None:
    rng = np.random.default_rng(abs(range_bytes) + chunk)
    for n in (0, 1, 2, 5, 200):
        sizes = rng.integers(-1, 12, n).astype(np.int64)
        splitter = RangeSplitter(range_bytes)
        for start in range(0, n, chunk):
            splitter.add(sizes[start:start + chunk])
        assert splitter.finish().tolist() == split_ranges(sizes, range_bytes).tolist(), (n, sizes.tolist())


def test_a_plan_of_another_version_says_to_rerun_with_overwrite(tmp_path: Path) -> None:
    (tmp_path / PLAN_NAME).write_text(json.dumps({"version": 1, "layout": "image-folder"}))
    with pytest.raises(FormatError, match=r"plan version 1 not supported \(expected 2\).*rerun with --overwrite"):
        RunPlanInfo.from_path(tmp_path / PLAN_NAME)


def test_a_run_planned_by_an_older_version_is_refused_until_overwritten(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A plan of version 1 (``replaced.pkl``) cannot be read: resuming says to rerun with --overwrite, which plans
    again."""
    from dataprep.commands import shard
    from dataprep.output.store import LocalStore
    from dataprep.plan.checkpoint import Checkpoint, save_checkpoint
    from tests.dataprep.helpers import numbered_images, shard_cli

    raw, out = numbered_images(tmp_path / "raw", 6), tmp_path / "out"
    real = shard.make_run_plan

    def plan_and_stop(*args: object, **kwargs: object) -> RunPlan:
        real(*args, **kwargs)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    shard.make_run_plan = plan_and_stop  # type: ignore[assignment]
    try:
        assert shard_cli(raw, out, "--workers", "1") == 130
    finally:
        shard.make_run_plan = real
    save_checkpoint(LocalStore(out), Checkpoint())
    plan_json = out / ".dataprep" / PLAN_NAME
    plan_json.write_text(plan_json.read_text().replace('"version": 2', '"version": 1'))
    capsys.readouterr()
    assert shard_cli(raw, out, "--workers", "1") != 0
    assert "plan version 1 not supported (expected 2)" in capsys.readouterr().err
    assert shard_cli(raw, out, "--workers", "1", "--overwrite") == 0
