"""The checkpoint document (``dataprep.plan.checkpoint``): version 4, one document every engine resumes (a run
in one process or of whole ranges, the open ranges of writer processes), versions 3 and 2 still read, others
refused; the places of ranges recorded and completed; the automatic range size."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dataprep.errors import FormatError
from dataprep.formats.manifest import ShardInfo, Totals
from dataprep.plan.checkpoint import (MODE_RANGES, MODE_SEQUENTIAL, Checkpoint, load_checkpoint,
                                      save_checkpoint)
from dataprep.plan.range_size import (AUTO_RANGES, MAX_AUTO_RANGE_BYTES, MIN_AUTO_RANGE_BYTES, auto_range_count,
                                      even_range_starts_of_chunks)
from dataprep.plan.run_plan import split_ranges
from dataprep.output.store import LocalStore


def _shard(index: int, n: int, samples: int = 2) -> ShardInfo:
    return ShardInfo(name=f"shard-{index:05d}-{n:06d}.tar", num_samples=samples, bytes=100 + n, sha256="0" * 64,
                     index=f"shard-{index:05d}-{n:06d}.tar.idx")


def _place(index: int, shards: int, rejected: int = 1) -> Checkpoint:
    totals = Totals(2 * shards + rejected, 2 * shards, rejected, {"duplicate": rejected})
    return Checkpoint(range=index, next_shard=shards, position=10 * index + shards, skip=1, records_done=5,
                      rejects_bytes=40, totals=totals, shards=tuple(_shard(index, n) for n in range(shards)))


def test_open_ranges_then_done_ranges_keep_every_completed_shard_once(tmp_path):
    run = Checkpoint().with_open_range(_place(2, 1)).with_open_range(_place(0, 2)).with_open_range(_place(2, 3))
    assert run.mode == MODE_RANGES and sorted(run.open_ranges) == [0, 2]
    names = [_shard(0, 0).name, _shard(0, 1).name, *(_shard(2, n).name for n in range(3))]
    assert [s.name for s in run.shards] == names
    done = run.with_range_done(0, _place(0, 4).totals, _place(0, 4).shards)
    assert done.ranges_done == (0,) and sorted(done.open_ranges) == [2]
    assert [s.name for s in done.shards] == [*(_shard(0, n).name for n in range(4)), *(_shard(2, n).name
                                                                                       for n in range(3))]
    assert done.totals == _place(0, 4).totals and done.with_range_done(0, Totals(), ()) is done
    save_checkpoint(LocalStore(tmp_path), done)
    assert load_checkpoint(tmp_path) == done
    assert not done.is_started  # a run of writer processes is not the sequential loop's
    whole = done.whole_ranges()  # as Ray resumes it: the open range 2 dropped, its shards no longer kept
    assert whole.ranges_done == (0,) and not whole.open_ranges and whole.shards == _place(0, 4).shards


def test_a_run_in_one_process_resumes_as_whole_ranges_from_where_its_range_began(tmp_path):
    start = Checkpoint(range=2, position=20, records_done=40, rejects_bytes=120, totals=Totals(40, 30, 10, {"x": 10}),
                       shards=(_shard(0, 0), _shard(1, 0)))
    run = Checkpoint(range=2, next_shard=1, position=23, skip=4, records_done=47, rejects_bytes=150,
                     totals=Totals(47, 36, 11, {"x": 11}), shards=(*start.shards, _shard(2, 0)), mode=MODE_SEQUENTIAL,
                     range_start=start)
    whole = run.whole_ranges()
    assert whole.mode == MODE_RANGES and whole.ranges_done == (0, 1) and whole.totals == start.totals
    assert whole.shards == start.shards and not whole.open_ranges and not whole.is_started
    save_checkpoint(LocalStore(tmp_path), run)
    assert load_checkpoint(tmp_path) == run  # its range's start kept as the count of its shards


def _write_doc(tmp_path, doc: dict) -> None:
    (tmp_path / ".dataprep").mkdir(exist_ok=True)
    (tmp_path / ".dataprep" / "checkpoint.json").write_text(json.dumps(doc))


def test_a_version_3_document_resumes_or_is_refused_saying_what_to_do(tmp_path):
    """Version 3's runs of Ray tasks are runs of whole ranges; its runs in one process resume in one process."""
    doc = json.loads(Checkpoint(ranges_done=(0, 3), mode=MODE_RANGES).to_bytes())
    doc.pop("range_start")
    _write_doc(tmp_path, {**doc, "version": 3, "mode": "ray"})
    read = load_checkpoint(tmp_path)
    assert read is not None and read.mode == MODE_RANGES and read.ranges_done == (0, 3)
    assert read.whole_ranges() == read
    doc = json.loads(Checkpoint(range=1, next_shard=2, position=7, records_done=9).to_bytes())
    doc.pop("range_start")
    _write_doc(tmp_path, {**doc, "version": 3, "mode": MODE_SEQUENTIAL})
    read = load_checkpoint(tmp_path)
    assert read is not None and read.is_started and read.range_start is None
    with pytest.raises(FormatError, match=r"version 3.*range 1.*--engine local --workers 1, or pass --overwrite"):
        read.whole_ranges()


def test_a_version_2_document_is_read_as_the_engine_that_wrote_it(tmp_path):
    (tmp_path / ".dataprep").mkdir()
    doc = json.loads(Checkpoint(range=1, position=7, records_done=9).to_bytes())
    for key in ("mode", "open_ranges"):
        doc.pop(key)
    doc["version"] = 2
    (tmp_path / ".dataprep" / "checkpoint.json").write_text(json.dumps(doc))
    read = load_checkpoint(tmp_path)
    assert read is not None and read.mode == MODE_SEQUENTIAL and read.is_started and read.position == 7
    doc["ranges_done"] = [0, 3]
    (tmp_path / ".dataprep" / "checkpoint.json").write_text(json.dumps(doc))
    read = load_checkpoint(tmp_path)
    assert read is not None and read.mode == MODE_RANGES and read.ranges_done == (0, 3)
    doc["version"] = 9
    (tmp_path / ".dataprep" / "checkpoint.json").write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=r"version 9, but this dataprep reads versions 2, 3, 4: finish the run with "
                                          r"the dataprep that started it, or pass --overwrite"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize(("total", "want"), [(0, 1), (7 * 2**20, 1), (9 * 2**20, 2), (25 * 2**20, 6),
                                             (150 * 2**20, 32), (300 * 2**20, 64), (64 * MAX_AUTO_RANGE_BYTES, 64),
                                             (64 * MAX_AUTO_RANGE_BYTES + 1, 65)])
def test_the_automatic_range_count(total, want):
    """64 ranges; fewer below 4 MiB each, rounded down to a count that many core counts divide; more above 4 GiB."""
    assert auto_range_count(total) == want
    if 1 < want <= AUTO_RANGES:
        assert total / want >= MIN_AUTO_RANGE_BYTES


@pytest.mark.parametrize("seed", range(5))
def test_auto_ranges_are_of_equal_bytes_and_depend_on_the_plan_alone(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(50_000, 500_000, 2000).astype(np.int64)  # ~520 MiB of photo-sized units
    starts = split_ranges(sizes, None)
    assert np.array_equal(starts, split_ranges(sizes.copy(), None)) and starts[0] == 0 and starts[-1] == len(sizes)
    assert len(starts) - 1 == AUTO_RANGES and np.all(np.diff(starts) > 0)
    per_range = np.add.reduceat(sizes, starts[:-1])
    assert per_range.max() - per_range.min() <= 2 * sizes.max()  # equal but for a unit at either end


@pytest.mark.parametrize("chunk", [1, 7, 333, 5000])
def test_auto_ranges_read_in_chunks_split_as_the_whole(chunk):
    """The planner splits a plan of 10^8 units from its sizes on disk, a chunk at a time: the same starts."""
    rng = np.random.default_rng(chunk)
    sizes = np.concatenate([rng.integers(0, 500_000, 3000), [2**31], rng.integers(0, 9, 500)]).astype(np.int64)
    whole = split_ranges(sizes, None)
    assert len(whole) > 3  # several ranges, a unit larger than one among them
    chunked = even_range_starts_of_chunks(lambda: (sizes[i:i + chunk] for i in range(0, len(sizes), chunk)))
    assert chunked.tolist() == whole.tolist()


def test_small_and_odd_plans_split_sensibly():
    assert split_ranges(np.zeros(0, dtype=np.int64), None).tolist() == [0, 0]
    assert split_ranges(np.full(10, 1000, dtype=np.int64), None).tolist() == [0, 10]  # 10 KB: one range
    one_big = np.asarray([2**30, 10, 10], dtype=np.int64)  # a unit larger than a range makes its range larger
    starts = split_ranges(one_big, None)
    assert starts[0] == 0 and starts[-1] == 3 and np.all(np.diff(starts) > 0)
