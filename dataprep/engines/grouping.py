"""Duplicates across ranges: each range's digests written by partition, then grouped in plan order.

A range-parallel run (Ray tasks, or ``--engine local``'s writer processes) finds the
duplicate rows and lines of its plan (first in plan order wins) before it writes, without
writing the ranges in sequence: a first pass writes the dedup digest of every kept record
of each range (``DigestWriter``), split into ``DIGEST_PARTITIONS`` partitions by the
digest's first byte; then each partition is grouped on its own (``partition_duplicates``):
the records of every range in that partition, in plan order, each a duplicate when an
earlier record has its digest. A digest lives in one partition only, so the result does
not depend on the number of partitions. The first pass (``clean_once``) cleans each record
once and keeps it in the range's spill (``spill``) for the pass that writes. Each range then reads its duplicates
(``load_duplicates``): the sorted ordinals of its records that repeat an earlier one.

Grouping sorts the partition in memory, vectorised (numpy: by digest, then by position; a
record is a duplicate when the one before it in that order has its digest), when it holds
at most ``SORT_MAX_RECORDS`` records of digests of a multiple of 8 bytes (16 for every
handler; about 50 bytes each while sorting: 4 Mi records, ~200 MiB); a larger one goes
through an on-disk ``SeenSet`` (bounded memory, ~400k records/s) in ``scratch_dir``.

Files (names: ``state_files``; each written whole, or not at all, by ``OutputStore.writer``):

- ``digests-RRRRR.bin``: chunks of one partition's records, ``uint8 partition, uint32 bytes``,
  then records of ``int64 ordinal, uint8 digest length, digest`` (little-endian); a writer holds
  at most ``CHUNK_BYTES`` per partition before it writes a chunk.
- ``dups-PP.npy``: int64 ``[1 + R + 1 + D]``: R, then offsets into the D ordinals that
  follow, by range (range r's duplicates in partition P are ``ordinals[offsets[r]:offsets[r + 1]]``).
"""

from __future__ import annotations

import io
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import numpy as np

from dataprep.engines.context import RunContext
from dataprep.engines.spill import SpillWriter
from dataprep.engines.state_files import DIGEST_PARTITIONS, digests_name, dups_name
from dataprep.engines.write_loop import clean_item
from dataprep.inputs.records import Reject
from dataprep.output.store import OutputStore, leaf
from dataprep.plan.seen import SeenSet

DIGEST_HEAD = struct.Struct("<qB")
_CHUNK_HEAD = struct.Struct("<BI")
CHUNK_BYTES = 64 * 2**10
# Global position of a record for the grouping: range << 40 | ordinal (ranges hold < 2**40 records).
ORDINAL_BITS = 40
SORT_MAX_RECORDS = 4 * 2**20


# Records between two reports of a first pass's counts.
COUNT_EVERY = 256


def clean_once(ctx: RunContext, index: int, digests: DigestWriter, spill: SpillWriter,
               counted: Callable[[int, int], None] | None = None) -> int:
    """First pass over range ``index``: each raw record cleaned once, the dedup digest of each kept one to
    ``digests``, every result to ``spill`` (read back by the pass that writes); the count of raw records.

    counted: called with (raw records, rejects) so far every ``COUNT_EVERY`` records, and at the end.
    """
    handler = ctx.spec.handler
    start, stop = ctx.plan.range_bounds(index)
    ordinal = rejected = 0
    for position, unit in enumerate(ctx.plan.units(start, stop), start):
        for k, item in enumerate(handler.records(unit)):
            result = clean_item(handler, item)
            digest = None if isinstance(result, Reject) else handler.dedup_digest(result)
            if digest is not None:
                digests.add(ordinal, digest)
            rejected += isinstance(result, Reject)
            spill.add((position, k), result)
            ordinal += 1
            if counted is not None and ordinal % COUNT_EVERY == 0:
                counted(ordinal, rejected)
    if counted is not None:
        counted(ordinal, rejected)
    return ordinal


class DigestWriter:
    """The digest file of range ``index`` (a context manager): ``add(ordinal, digest)`` for each kept record.

    store: where the file goes (OUT, or an attempt's folder); leaf_name: written under the last
    part of its name (an attempt's folder) instead of its name in OUT.
    """

    def __init__(self, store: OutputStore, index: int, *, leaf_name: bool = False) -> None:
        self.name = digests_name(index)
        self._writer = store.writer(leaf(self.name) if leaf_name else self.name)
        self._file: BinaryIO | None = None
        self._parts = [bytearray() for _ in range(DIGEST_PARTITIONS)]

    def __enter__(self) -> DigestWriter:
        self._file = self._writer.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            for part in range(DIGEST_PARTITIONS):
                self._chunk(part)
        self._writer.__exit__(kind, error, tb)

    def add(self, ordinal: int, digest: bytes) -> None:
        part = digest[0] % DIGEST_PARTITIONS
        buffer = self._parts[part]
        buffer += DIGEST_HEAD.pack(ordinal, len(digest))
        buffer += digest
        if len(buffer) >= CHUNK_BYTES:
            self._chunk(part)

    def _chunk(self, part: int) -> None:
        buffer = self._parts[part]
        if buffer and self._file is not None:
            self._file.write(_CHUNK_HEAD.pack(part, len(buffer)))
            self._file.write(buffer)
            buffer.clear()


def has_digests(store: OutputStore, index: int) -> bool:
    """Whether range ``index``'s digest file is there (its first pass is done)."""
    return store.exists(digests_name(index))


def partition_bytes(store: OutputStore, index: int, part: int) -> bytes:
    """The records of partition ``part`` in range ``index``'s digest file, in order."""
    chunks: list[bytes] = []
    with store.open_read(digests_name(index)) as f:
        seekable = f.seekable()  # an object store's stream is not: other partitions' chunks are read past
        while head := f.read(_CHUNK_HEAD.size):
            which, size = _CHUNK_HEAD.unpack(head)
            if which == part:
                chunks.append(f.read(size))
            elif seekable:
                f.seek(size, io.SEEK_CUR)
            else:
                f.read(size)
    return b"".join(chunks)


def read_digests(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(ordinal, digest) of every record of a partition's bytes, in order."""
    at = 0
    while at < len(data):
        ordinal, length = DIGEST_HEAD.unpack_from(data, at)
        at += DIGEST_HEAD.size
        yield ordinal, data[at:at + length]
        at += length


def partition_duplicates(store: OutputStore, part: int, num_ranges: int, scratch_dir: Path | None = None
                         ) -> list[np.ndarray]:
    """Per range, int64 [D]: the sorted ordinals of its records in partition ``part`` that repeat an earlier one."""
    records: list[np.ndarray] = []
    total = 0
    for index in range(num_ranges):
        fixed = _fixed_records(partition_bytes(store, index, part))
        total += 0 if fixed is None else len(fixed)
        if fixed is None or total > SORT_MAX_RECORDS:
            return _streamed_duplicates(store, part, num_ranges, scratch_dir)
        records.append(fixed)
    return _sorted_duplicates(records)


def dups_bytes(per_range: list[np.ndarray]) -> bytes:
    """A ``dups-PP.npy`` file's bytes: each range's duplicate ordinals in one partition (module docstring)."""
    counts = np.asarray([len(d) for d in per_range], dtype=np.int64)
    offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts)])
    buffer = io.BytesIO()
    np.save(buffer, np.concatenate([np.asarray([len(per_range)], dtype=np.int64), offsets,
                                    *[np.asarray(d, dtype=np.int64) for d in per_range]]))
    return buffer.getvalue()


def load_duplicates(store: OutputStore, index: int) -> np.ndarray:
    """int64 [D]: every duplicate ordinal of range ``index``, sorted (its part of every partition's file)."""
    parts = []
    for part in range(DIGEST_PARTITIONS):
        local = store.local_path() / dups_name(part)
        table = (np.load(local, mmap_mode="r") if local.is_file()
                 else np.load(io.BytesIO(store.read_bytes(dups_name(part)))))
        ranges = int(table[0])
        start, stop = int(table[1 + index]), int(table[2 + index])
        parts.append(np.asarray(table[2 + ranges + start:2 + ranges + stop]))
    return np.sort(np.concatenate(parts)).astype(np.int64)


def _fixed_records(data: bytes) -> np.ndarray | None:
    """A partition's records as a structured array (ordinal, length, digest words), when its digests are of
    one length that is a multiple of 8 bytes, else None."""
    length = data[DIGEST_HEAD.size - 1] if data else 16
    if length % 8 or length == 0:
        return None
    dtype = np.dtype([("ordinal", "<i8"), ("length", "u1"), ("digest", ">u8", (length // 8,))])
    if len(data) % dtype.itemsize:
        return None
    records = np.frombuffer(data, dtype=dtype)
    return records if bool(np.all(records["length"] == length)) else None


def _sorted_duplicates(records: list[np.ndarray]) -> list[np.ndarray]:
    """Duplicates by sorting (digest, position): a record whose sorted predecessor has its digest repeats it."""
    widths = {r.dtype["digest"].shape for r in records if len(r)}
    if len(widths) > 1:  # digests of two lengths never repeat one another: each length apart
        return _by_width(records)
    positions = np.concatenate([np.zeros(0, dtype=np.int64),
                                *[r["ordinal"].astype(np.int64) | (index << ORDINAL_BITS)
                                  for index, r in enumerate(records)]])
    if not len(positions):
        return [np.zeros(0, dtype=np.int64) for _ in records]
    words = np.concatenate([r["digest"] for r in records if len(r)]).astype(np.uint64)
    order = np.lexsort((positions, *[words[:, k] for k in reversed(range(words.shape[1]))]))
    ordered = words[order]
    repeats = np.zeros(len(order), dtype=bool)
    repeats[1:] = np.all(ordered[1:] == ordered[:-1], axis=1)
    found = np.sort(positions[order[repeats]])
    ranges, ordinals = found >> ORDINAL_BITS, found & ((1 << ORDINAL_BITS) - 1)
    return [ordinals[ranges == index] for index in range(len(records))]


def _by_width(records: list[np.ndarray]) -> list[np.ndarray]:
    widths = sorted({r.dtype["digest"].shape for r in records if len(r)})
    empty = records[0][:0]
    parts = [_sorted_duplicates([r if r.dtype["digest"].shape == w else empty for r in records]) for w in widths]
    return [np.sort(np.concatenate([p[index] for p in parts])) for index in range(len(records))]


def _streamed_duplicates(store: OutputStore, part: int, num_ranges: int, scratch_dir: Path | None
                         ) -> list[np.ndarray]:
    """Duplicates through an on-disk ``SeenSet``, range by range in plan order (bounded memory)."""
    found: list[np.ndarray] = []
    with tempfile.TemporaryDirectory(prefix="dataprep-seen-", dir=scratch_dir) as scratch, \
            SeenSet.open(Path(scratch) / "seen") as seen:
        for index in range(num_ranges):
            base = index << ORDINAL_BITS
            dups = [ordinal for ordinal, digest in read_digests(partition_bytes(store, index, part))
                    if seen.first(digest, base + ordinal) is not None]
            found.append(np.asarray(dups, dtype=np.int64))
    return found
