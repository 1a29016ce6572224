"""The keys a plan has handed out, on disk: ``KeySet`` for ``inputs.sources.KeyAssigner`` in bounded memory.

``SpilledKeys.claim(key)`` looks up a 16-byte BLAKE2b digest of the key in a ``SeenSet``
(``dataprep.plan.seen``: a Bloom filter in memory, sorted runs on disk) and confirms a hit
exactly against the key itself, appended to ``keys.bin`` (2-byte length, UTF-8 bytes with
surrogateescape) when it was claimed; the ``SeenSet`` stores each digest with the key's
offset in that file. Two different keys with one digest (never seen: about 2^-128 per
pair) both stay correct: the later ones are kept in memory, exactly.

Memory: the Bloom filter, sized from the number of keys expected (the power of two nearest
16 bits per key: 2.7 bytes per key at 10^8, where ~0.8% of new keys then look on disk),
and the ``SeenSet``'s memtable and merge slices (one row per 256 keys expected, 1k to 64k
rows: at most ~7 MiB). Everything lives in one folder of the plan's spill, removed with it.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from types import TracebackType

from dataprep.plan.seen import SeenSet
from dataprep.plan.seen_runs import SeenLimits

__all__ = ["SpilledKeys", "bloom_bits_log2", "seen_limits"]

_KEYS_NAME = "keys.bin"
_LENGTH_BYTES = 2


def bloom_bits_log2(expected: int) -> int:
    """log2 of the Bloom filter's bits for ``expected`` keys: the power of two nearest 16 bits per key (11-22), 2^16
    to 2^32 bits."""
    return max(16, min(32, round(math.log2(16 * max(expected, 1)))))


def seen_limits(expected: int, memtable_rows: int | None = None) -> SeenLimits:
    """The ``SeenSet``'s limits for ``expected`` keys: its memtable and merge slices one row per 256 keys, 1k to 64k."""
    rows = max(1 << 10, min(1 << 16, expected // 256))
    return SeenLimits(bloom_bits_log2=bloom_bits_log2(expected), memtable_rows=memtable_rows or rows, merge_rows=rows)


class SpilledKeys:
    """A ``KeySet`` on disk in ``folder`` (module doc); a context manager, ``close`` discards it."""

    def __init__(self, folder: Path, expected: int, *, memtable_rows: int | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._seen: SeenSet | None = SeenSet.open(folder / "seen", limits=seen_limits(expected, memtable_rows))
        self._file = open(folder / _KEYS_NAME, "wb+", buffering=1 << 20)
        self._end = 0
        self._collided: set[str] = set()

    def claim(self, key: str) -> bool:
        if self._seen is None:
            raise ValueError("SpilledKeys used after close()")
        data = key.encode("utf-8", "surrogateescape")
        prior = self._seen.first(hashlib.blake2b(data, digest_size=16).digest(), self._end)
        if prior is None:
            self._file.write(len(data).to_bytes(_LENGTH_BYTES, "little") + data)
            self._end += _LENGTH_BYTES + len(data)
            return True
        if self._key_at(prior) == data or key in self._collided:
            return False
        self._collided.add(key)
        return True

    def _key_at(self, offset: int) -> bytes:
        self._file.flush()
        head = os.pread(self._file.fileno(), _LENGTH_BYTES, offset)
        return os.pread(self._file.fileno(), int.from_bytes(head, "little"), offset + _LENGTH_BYTES)

    def close(self) -> None:
        """Discard the keys; the Bloom filter's memory goes with the ``SeenSet`` (a plan's next steps need it)."""
        if self._seen is not None:
            self._seen.close()
            self._seen = None
        self._file.close()

    def __enter__(self) -> SpilledKeys:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
