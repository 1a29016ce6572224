"""The run files of ``dataprep.plan.seen``'s store: their record layout, reading one (a lookup is one
``pread`` of one block), writing one, reading one forward for a merge; and the store's limits (``SeenLimits``).

A run: a 32-byte header (magic, version, digest bytes, count), then fixed-size records
(digest zero-padded to a multiple of 8 bytes, int64 position) sorted by digest.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.errors import FormatError, UsageError

__all__ = ["HEADER_BYTES", "RUN_MAGIC", "VERSION", "Cursor", "RecordLayout", "Run", "RunWriter", "SeenLimits"]

VERSION = 1
RUN_MAGIC = b"SFSEEN01"
HEADER_BYTES = 32  # magic (8) | version u32 | digest_bytes u32 | count u64 | reserved (8)


class RecordLayout:
    """Record layout for one digest length: numpy dtypes of a run's records."""

    def __init__(self, digest_bytes: int) -> None:
        self.digest_bytes = digest_bytes
        self.key_bytes = -(-digest_bytes // 8) * 8
        self.pad = bytes(self.key_bytes - digest_bytes)
        self.record_bytes = self.key_bytes + 8
        self.records = np.dtype([("key", f"V{self.key_bytes}"), ("position", "<i8")])
        words = self.key_bytes // 8
        self.word_names = [f"w{i}" for i in range(words)]
        self.words = np.dtype({"names": self.word_names, "formats": [">u8"] * words,
                               "offsets": [8 * i for i in range(words)], "itemsize": self.record_bytes})
        self.head = np.dtype({"names": ["h"], "formats": ["<u8"], "offsets": [0], "itemsize": self.record_bytes})

    def sort(self, records: np.ndarray) -> np.ndarray:
        """``records`` in digest order (bytewise)."""
        view = records.view(self.words)
        order = np.lexsort([view[name] for name in reversed(self.word_names)])
        return records[order]

    def prefixes(self, records: np.ndarray) -> np.ndarray:
        """uint64 [n]: the first 8 digest bytes read big-endian (the sort order of the fence)."""
        return records.view(self.words)["w0"].astype(np.uint64)


class Run:
    """One immutable run file: sorted records, its fence, and an open descriptor for lookups."""

    def __init__(self, path: Path, layout: RecordLayout, count: int, min_position: int, max_position: int,
                 fence: array) -> None:
        self.path, self.layout, self.count = path, layout, count
        self.min_position, self.max_position, self.fence = min_position, max_position, fence
        self.fd = os.open(path, os.O_RDONLY)

    def find(self, key: bytes, prefix: int, block_rows: int) -> int | None:
        """Position recorded with ``key`` (padded digest) in this run, or None."""
        fence = self.fence
        last = bisect_right(fence, prefix)
        if last == 0:
            return None
        start = max(bisect_left(fence, prefix) - 1, 0) * block_rows
        stop = min(last * block_rows, self.count)
        rec = self.layout.record_bytes
        block = os.pread(self.fd, (stop - start) * rec, HEADER_BYTES + start * rec)
        at = block.find(key)
        while at >= 0 and at % rec:
            at = block.find(key, at + 1)
        if at < 0:
            return None
        return int.from_bytes(block[at + self.layout.key_bytes:at + rec], "little", signed=True)

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        """The run's records in order, ``rows`` at a time (numpy arrays)."""
        rec = self.layout.record_bytes
        for start in range(0, self.count, rows):
            n = min(rows, self.count - start)
            data = os.pread(self.fd, n * rec, HEADER_BYTES + start * rec)
            if len(data) != n * rec:
                raise FormatError(f"{self.path}: run file ends at record {start + len(data) // rec} of {self.count} "
                                  "(truncated); hint: the store is damaged, start over with a new one")
            yield np.frombuffer(data, dtype=self.layout.records)

    def close(self) -> None:
        os.close(self.fd)

    def describe(self) -> dict[str, Any]:
        return {"file": self.path.name, "count": self.count, "min_position": self.min_position,
                "max_position": self.max_position}


class RunWriter:
    """Writes sorted record arrays to a new run file; ``finish`` returns it as a ``Run``."""

    def __init__(self, path: Path, layout: RecordLayout, block_rows: int) -> None:
        self.path, self.layout, self.block_rows = path, layout, block_rows
        self.file = open(path, "wb")
        self.file.write(bytes(HEADER_BYTES))
        self.count, self.min_position, self.max_position = 0, -1, -1
        self.fence = array("Q")

    def write(self, records: np.ndarray) -> None:
        if not len(records):
            return
        first = (-self.count) % self.block_rows
        self.fence.extend(self.layout.prefixes(records[first::self.block_rows]).tolist())
        positions = records["position"]
        low, high = int(positions.min()), int(positions.max())
        self.min_position = low if self.count == 0 else min(self.min_position, low)
        self.max_position = max(self.max_position, high)
        self.count += len(records)
        self.file.write(np.ascontiguousarray(records).data)

    def finish(self) -> Run:
        header = (RUN_MAGIC + VERSION.to_bytes(4, "little") + self.layout.digest_bytes.to_bytes(4, "little")
                  + self.count.to_bytes(8, "little")).ljust(HEADER_BYTES, b"\0")
        self.file.seek(0)
        self.file.write(header)
        self.file.close()  # fsync'd by the commit that first names it; a run merged away before never is
        return Run(path=self.path, layout=self.layout, count=self.count, min_position=self.min_position,
                    max_position=self.max_position, fence=self.fence)


class Cursor:
    """Reads one run forward for a merge, handing out the records below a key bound."""

    def __init__(self, run: Run, layout: RecordLayout, rows: int) -> None:
        self.layout = layout
        self.chunks = run.chunks(rows)
        self.pending = np.empty(0, dtype=layout.records)
        self.done = False

    def take_below(self, bound: int | None) -> np.ndarray:
        """Records whose first 8 digest bytes (big-endian) are < ``bound`` (None: all the rest)."""
        while not self.done and (bound is None or not len(self.pending)
                                 or int(self.layout.prefixes(self.pending[-1:])[0]) < bound):
            chunk = next(self.chunks, None)
            if chunk is None:
                self.done = True
            else:
                self.pending = np.concatenate([self.pending, chunk])
        prefixes = self.layout.prefixes(self.pending)
        cut = len(self.pending) if bound is None else int(np.searchsorted(prefixes, np.uint64(bound)))
        taken, self.pending = self.pending[:cut], self.pending[cut:]
        return taken


@dataclass(frozen=True, slots=True)
class SeenLimits:
    """Memory and merge limits of a ``SeenSet`` (defaults: about 55 MiB in all).

    bloom_bits_log2: the Bloom filter has 2**bloom_bits_log2 bits (28: 32 MiB).
    memtable_rows: digests held in memory before they are written as a run (~100 B each).
    block_rows: records per fence entry: a lookup reads one block per run (8 B of fence each).
    merge_fanout: runs of similar size merged at once (lookups touch fewer runs when smaller).
    merge_rows: records held in memory while merging or truncating (~24 B each, a few times).
    """

    bloom_bits_log2: int = 28
    memtable_rows: int = 1 << 16
    block_rows: int = 256
    merge_fanout: int = 4
    merge_rows: int = 1 << 16

    def __post_init__(self) -> None:
        checks = (("bloom_bits_log2", 6, 32), ("memtable_rows", 1, 1 << 26), ("block_rows", 1, 1 << 16),
                  ("merge_fanout", 2, 64), ("merge_rows", 1, 1 << 28))
        for name, low, high in checks:
            value = getattr(self, name)
            if type(value) is not int or not low <= value <= high:
                raise UsageError(f"SeenLimits.{name} must be an int in [{low}, {high}] (got {value!r})")
