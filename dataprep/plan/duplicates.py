"""Exact duplicates among media inputs, found while planning, before anything is decoded, in bounded memory.

Two inputs are duplicates when their primary image files (the first image field in
sorted order) hold the same bytes; the first in sorted key order (the lower unit index)
wins. Only files of equal size are compared, the first 64 KiB of them first, so most
files are never read. Each step is an external sort of small fixed-size records
(``dataprep.plan.external_sort``), so memory holds a few blocks of records whatever the
number of inputs, and a group of equal sizes (10^7 files of one size) is never held whole:

1. (size, unit index) of every input whose image has > 0 bytes; sizes shared by two or more go on;
2. (hash of size and 64 KiB head, size, index): heads shared by two or more go on;
3. (size, full digest, index): in a group of equal digests the first index wins;
4. (duplicate, first), sorted by the duplicate: the rejects come out in unit order.

Units are read back from the plan's spill file one at a time (two ``pread``\\ s each).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from dataprep.inputs.names import IMAGE_EXTENSIONS
from dataprep.inputs.records import RawRecord, Reject, RejectReason
from dataprep.plan.external_sort import ExternalSort, SortLimits
from dataprep.plan.scratch_files import PickleFile

__all__ = ["HEAD_BYTES", "Digest", "find_duplicates", "primary_image"]

HEAD_BYTES = 64 * 2**10

# digest(path, limit): blake2b (20 bytes) of a file's first ``limit`` bytes (all of it when None); None if unreadable.
Digest = Callable[[str, int | None], bytes | None]

_SIZE = np.dtype([("size", "<i8"), ("index", "<i8")])
_HEAD = np.dtype([("h0", "<u8"), ("h1", "<u8"), ("size", "<i8"), ("index", "<i8")])
_CONTENT = np.dtype([("size", "<i8"), ("d0", "<u8"), ("d1", "<u8"), ("d2", "<u8"), ("index", "<i8")])
_PAIR = np.dtype([("dup", "<i8"), ("first", "<i8")])
_SLICE_ROWS = 4096


def primary_image(record: RawRecord) -> str | None:
    """Path of the record's image file (the first image field in sorted order), if any."""
    fields = sorted(f for f in record.files if f in IMAGE_EXTENSIONS)
    return record.files[fields[0]] if fields else None


def find_duplicates(units: PickleFile, sizes: Iterable[np.ndarray], digest: Digest, folder: Path,
                    limits: SortLimits) -> Iterator[tuple[int, Reject]]:
    """(unit index, DUPLICATE reject) for every input whose image bytes equal an earlier one's, in index order.

    units: the plan's units by index; sizes: int64 primary image bytes per unit in index order
    (-1: none), in chunks; folder: where the sorts spill (removed as they finish).
    """
    by_size = ExternalSort(folder / "by-size", _SIZE, limits)
    start = 0
    for chunk in sizes:
        keep = np.flatnonzero(chunk > 0)
        records = np.empty(len(keep), dtype=_SIZE)
        records["size"], records["index"] = chunk[keep], keep + start
        by_size.add(records)
        start += len(chunk)
    by_head = ExternalSort(folder / "by-head", _HEAD, limits)
    for shared in _slices(_shared(by_size.sorted(), ("size",))):
        by_head.add(_heads(shared, units, digest))
    by_content = ExternalSort(folder / "by-content", _CONTENT, limits)
    for shared in _slices(_shared(by_head.sorted(), ("h0", "h1"))):
        by_content.add(_contents(shared, units, digest))
    pairs = ExternalSort(folder / "pairs", _PAIR, limits)
    for chunk in _later_copies(by_content.sorted()):
        pairs.add(chunk)
    for chunk in _slices(pairs.sorted()):
        for dup, first in chunk.tolist():
            yield dup, Reject(units[dup].source, RejectReason.DUPLICATE, f"same bytes as {units[first].source}")


def _equal_keys(a: np.ndarray, b: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """bool [n]: whether a[i] and b[i] agree on every field of ``names``."""
    equal = np.ones(len(a), dtype=bool)
    for name in names:
        equal &= a[name] == b[name]
    return equal


def _shared(chunks: Iterable[np.ndarray], names: tuple[str, ...]) -> Iterator[np.ndarray]:
    """The records of sorted ``chunks`` whose key (``names``) two or more records share, in order.

    The last record of each chunk is held back until the next chunk says whether it shares its key.
    """
    held: np.ndarray | None = None
    held_shares_before = False
    for chunk in chunks:
        if not len(chunk):
            continue
        data = chunk if held is None else np.concatenate([held, chunk])
        before = np.zeros(len(data), dtype=bool)  # before[i]: data[i] has the key of data[i - 1]
        before[1:] = _equal_keys(data[1:], data[:-1], names)
        before[0] = held_shares_before
        shares = before.copy()
        shares[:-1] |= before[1:]
        yield data[:-1][shares[:-1]]
        held, held_shares_before = data[-1:], bool(before[-1])
    if held is not None and held_shares_before:
        yield held


def _slices(chunks: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
    """``chunks`` cut to at most ``_SLICE_ROWS`` records (a slice's records become Python tuples, one each)."""
    for chunk in chunks:
        for start in range(0, len(chunk), _SLICE_ROWS):
            yield chunk[start:start + _SLICE_ROWS]


def _image_path(unit: object) -> str | None:
    return primary_image(unit) if isinstance(unit, RawRecord) else None


def _heads(shared: np.ndarray, units: PickleFile, digest: Digest) -> np.ndarray:
    """_HEAD records of the units of ``shared`` (_SIZE records) whose image's first 64 KiB can be read."""
    rows = []
    for size, index in shared.tolist():
        path = _image_path(units[index])
        head = digest(path, HEAD_BYTES) if path is not None else None
        if head is not None:
            key = hashlib.blake2b(size.to_bytes(8, "little") + head, digest_size=16).digest()
            rows.append((*np.frombuffer(key, dtype="<u8").tolist(), size, index))
    return np.array(rows, dtype=_HEAD) if rows else np.empty(0, dtype=_HEAD)


def _contents(shared: np.ndarray, units: PickleFile, digest: Digest) -> np.ndarray:
    """_CONTENT records of the units of ``shared`` (_HEAD records) whose image can be read whole."""
    rows = []
    for _, _, size, index in shared.tolist():
        path = _image_path(units[index])
        full = digest(path, None) if path is not None else None
        if full is not None:
            words = np.frombuffer(full[:24].ljust(24, b"\0"), dtype="<u8").tolist()
            rows.append((size, *words, index))
    return np.array(rows, dtype=_CONTENT) if rows else np.empty(0, dtype=_CONTENT)


def _later_copies(chunks: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
    """_PAIR records (index, first index of its content) of every record of sorted ``chunks`` but its group's first."""
    names = ("size", "d0", "d1", "d2")
    last: np.ndarray | None = None  # the previous chunk's last record, and the first index of its group
    last_first = -1
    for chunk in chunks:
        if not len(chunk):
            continue
        same = np.zeros(len(chunk), dtype=bool)  # same[i]: chunk[i] has the content of the record before it
        same[1:] = _equal_keys(chunk[1:], chunk[:-1], names)
        if last is not None:
            same[0] = bool(_equal_keys(chunk[:1], last, names)[0])
        position = np.arange(len(chunk))
        starts = np.maximum.accumulate(np.where(same, -1, position))  # -1: the group began in an earlier chunk
        first = np.where(starts >= 0, chunk["index"][np.maximum(starts, 0)], last_first)
        later = starts != position
        pairs = np.empty(int(later.sum()), dtype=_PAIR)
        pairs["dup"], pairs["first"] = chunk["index"][later], first[later]
        yield pairs
        last, last_first = chunk[-1:], int(first[-1])
