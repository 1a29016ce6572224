"""The keys a plan has handed out, on disk: ``KeySet`` for ``inputs.sources.KeyAssigner`` in bounded memory.

``SpilledKeys.claim(key)`` looks up a 16-byte BLAKE2b digest of the key in a ``SeenSet``
(``dataprep.plan.seen``: a Bloom filter in memory, sorted runs on disk) and confirms a hit
exactly against the key itself, appended to ``keys.bin`` (2-byte length, UTF-8 bytes with
surrogateescape) when it was claimed; the ``SeenSet`` stores each digest with the key's
offset in that file. Two different keys with one digest (never seen: about 2^-128 per
pair) both stay correct: the later ones are kept in memory, exactly.

Memory: the Bloom filter, sized from the number of keys expected (16 to 32 bits per key,
a power of two: 2.7 bytes per key at 10^8, ~0.8% of new keys then look on disk), and the
``SeenSet``'s memtable (64k digests, ~7 MiB). Everything lives in one folder of the plan's
spill, removed with it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from types import TracebackType

from dataprep.plan.seen import SeenSet
from dataprep.plan.seen_runs import SeenLimits

__all__ = ["SpilledKeys", "bloom_bits_log2"]

_KEYS_NAME = "keys.bin"
_LENGTH_BYTES = 2


def bloom_bits_log2(expected: int) -> int:
    """log2 of the Bloom filter's bits for ``expected`` keys: 16 to 32 bits per key, within ``SeenLimits``' range."""
    return max(16, min(32, (16 * max(expected, 1) - 1).bit_length()))


class SpilledKeys:
    """A ``KeySet`` on disk in ``folder`` (module doc); a context manager, ``close`` discards it."""

    def __init__(self, folder: Path, expected: int, *, memtable_rows: int = 1 << 16) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        limits = SeenLimits(bloom_bits_log2=bloom_bits_log2(expected), memtable_rows=memtable_rows)
        self._seen = SeenSet.open(folder / "seen", limits=limits)
        self._file = open(folder / _KEYS_NAME, "wb+", buffering=1 << 20)
        self._end = 0
        self._collided: set[str] = set()

    def claim(self, key: str) -> bool:
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
        self._seen.close()
        self._file.close()

    def __enter__(self) -> SpilledKeys:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
