"""Duplicates across ranges (``dataprep.engines.grouping``): sorted in memory or streamed through a ``SeenSet``, the
same answer as one pass over the plan in order; a range's records spilled and read back (``spill``)."""

from __future__ import annotations

import hashlib
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from dataprep.engines import grouping
from dataprep.engines.grouping import DigestWriter, dups_bytes, has_digests, load_duplicates, partition_duplicates
from dataprep.engines.spill import FRAME_RECORDS, SpillWriter, read_spill
from dataprep.engines.state_files import DIGEST_PARTITIONS, dups_name
from dataprep.formats.samples import CleanRecord
from dataprep.inputs.records import Reject, RejectReason
from dataprep.output.store import LocalStore


def _plan(seed: int, ranges: int, records: int, values: int) -> list[list[bytes | None]]:
    """Per range, the digest of each record (None: a record without one, e.g. a reject); repeats across ranges."""
    rng = np.random.default_rng(seed)
    return [[None if rng.random() < 0.1 else hashlib.blake2b(str(int(rng.integers(values))).encode(),
                                                              digest_size=16).digest()
             for _ in range(records)] for _ in range(ranges)]


def _expected(plan: list[list[bytes | None]]) -> list[list[int]]:
    """One pass in plan order: a record repeats an earlier one (first in plan order wins)."""
    seen: set[bytes] = set()
    found: list[list[int]] = []
    for digests in plan:
        found.append([])
        for ordinal, digest in enumerate(digests):
            if digest is None:
                continue
            if digest in seen:
                found[-1].append(ordinal)
            seen.add(digest)
    return found


def _write(store: LocalStore, plan: list[list[bytes | None]]) -> None:
    for index, digests in enumerate(plan):
        with DigestWriter(store, index) as writer:
            for ordinal, digest in enumerate(digests):
                if digest is not None:
                    writer.add(ordinal, digest)
        assert has_digests(store, index)


@pytest.mark.parametrize("how", ["sorted", "streamed"])
def test_grouping_finds_what_one_pass_in_plan_order_finds(tmp_path, monkeypatch, how):
    if how == "streamed":
        monkeypatch.setattr(grouping, "SORT_MAX_RECORDS", 10)
    monkeypatch.setattr(grouping, "CHUNK_BYTES", 200)  # many chunks per partition
    store = LocalStore(tmp_path)
    plan = _plan(7, ranges=5, records=700, values=900)
    _write(store, plan)
    for part in range(DIGEST_PARTITIONS):
        store.write_bytes(dups_name(part), dups_bytes(partition_duplicates(store, part, len(plan), tmp_path)))
    found = [load_duplicates(store, index).tolist() for index in range(len(plan))]
    assert found == _expected(plan)
    assert sum(map(len, found)) > 500


def test_a_range_without_records_and_an_empty_plan(tmp_path):
    store = LocalStore(tmp_path)
    plan: list[list[bytes | None]] = [[], [hashlib.sha256(b"a").digest()[:16]] * 3, []]
    _write(store, plan)
    per_part = [partition_duplicates(store, part, 3) for part in range(DIGEST_PARTITIONS)]
    joined = [sorted(int(o) for part in per_part for o in part[index]) for index in range(3)]
    assert joined == [[], [1, 2], []]


def test_spilled_records_come_back_as_they_went_from_any_place(tmp_path):
    store = LocalStore(tmp_path)
    results: list[tuple[tuple[int, int], object]] = []
    for position in range(3):
        for k in range(FRAME_RECORDS + 5):
            if k % 97 == 3:
                result: object = Reject(f"f{position}.txt", RejectReason.EMPTY_TEXT, "blank", k + 1)
            else:
                result = CleanRecord(f"f{position}_{k:08d}", f"f{position}.txt",
                                     {"text": f"line {k} é", "__source__": f"f{position}.txt", "__row__": k + 1})
            results.append(((position, k), result))
    with SpillWriter(store, "spill.bin") as spill:
        for tag, result in results:
            spill.add(tag, result)  # type: ignore[arg-type]
    for start in [(0, 0), (1, 7), (1, FRAME_RECORDS + 4), (2, 0), (3, 0)]:
        tags: deque[tuple[int, int]] = deque()
        got = list(read_spill(store, "spill.bin", start, tags))
        want = [(tag, result) for tag, result in results if tag >= start]
        assert got == [result for _, result in want]
        assert list(tags) == [tag for tag, _ in want]


def test_a_spill_is_there_whole_or_not_at_all(tmp_path):
    store = LocalStore(tmp_path)
    with pytest.raises(RuntimeError), SpillWriter(store, "spill.bin") as spill:
        spill.add((0, 0), CleanRecord("k", "s", {"text": "x"}))
        raise RuntimeError("killed")
    assert not (tmp_path / "spill.bin").exists() and not list(Path(tmp_path).glob(".*"))
