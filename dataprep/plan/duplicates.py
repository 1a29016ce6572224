"""Exact duplicates among media inputs, found while planning, before anything is decoded.

Two inputs are duplicates when their primary image files (the first image field in
sorted order) hold the same bytes; the first in sorted key order wins. Only files of
equal size are compared, the first 64 KiB of them first, so most files are never read;
units come from the plan's spill file one at a time, so memory holds a digest per
candidate, never a group of records.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from dataprep.inputs.records import RawRecord, Reject, RejectReason
from dataprep.inputs.names import IMAGE_EXTENSIONS

_HEAD_BYTES = 64 * 2**10


def media_bytes(unit: object) -> int:
    """Bytes of a unit's primary image file; -1 when it has none or it cannot be stat'ed."""
    path = primary_image(unit) if isinstance(unit, RawRecord) else None
    if path is None:
        return -1
    try:
        return os.stat(path).st_size
    except OSError:
        return -1  # cleaning reports it as unreadable


def primary_image(record: RawRecord) -> str | None:
    """Path of the record's image file (the first image field in sorted order), if any."""
    fields = sorted(f for f in record.files if f in IMAGE_EXTENSIONS)
    return record.files[fields[0]] if fields else None


def find_duplicates(units_path: Path, offsets: np.ndarray, sizes: np.ndarray) -> dict[int, Reject]:
    """Unit index -> DUPLICATE reject for every input whose image bytes equal an earlier one's.

    units_path, offsets (int64 [N + 1]): the plan's spill file of pickled units;
    sizes: int64 [N] primary image bytes per unit (-1: none), as ``media_bytes`` gives.
    """
    by_size = np.argsort(sizes, kind="stable")  # stable: sorted key order within a size
    ordered = sizes[by_size]
    starts = np.flatnonzero(np.diff(ordered, prepend=-2) != 0)
    bounds = np.append(starts, len(ordered))
    duplicates: dict[int, Reject] = {}
    fd = os.open(units_path, os.O_RDONLY)

    def load(i: int) -> RawRecord | Reject:
        start, end = int(offsets[i]), int(offsets[i + 1])
        unit: RawRecord | Reject = pickle.loads(os.pread(fd, end - start, start))
        return unit

    try:
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if hi - lo < 2 or ordered[lo] <= 0:
                continue
            for first, dup in _equal_content(load, by_size[lo:hi].tolist()):
                duplicates[dup] = Reject(load(dup).source, RejectReason.DUPLICATE,
                                         f"same bytes as {load(first).source}")
    finally:
        os.close(fd)
    return duplicates


def _equal_content(load: Callable[[int], object], group: list[int]) -> Iterator[tuple[int, int]]:
    """(first, duplicate) index pairs among files of equal size, compared head first."""
    heads: dict[bytes, list[int]] = defaultdict(list)
    for i in group:
        if (head := _digest(_image_path(load(i)), _HEAD_BYTES)) is not None:
            heads[head].append(i)
    for candidates in heads.values():
        if len(candidates) < 2:
            continue
        firsts: dict[bytes, int] = {}
        for i in candidates:
            digest = _digest(_image_path(load(i)), None)
            if digest is None:
                continue
            if digest in firsts:
                yield firsts[digest], i
            else:
                firsts[digest] = i


def _image_path(unit: object) -> str | None:
    return primary_image(unit) if isinstance(unit, RawRecord) else None


def _digest(path: str | None, limit: int | None) -> bytes | None:
    """blake2b of a file's first ``limit`` bytes (all of it when None); None if unreadable."""
    if path is None:
        return None
    hasher = hashlib.blake2b(digest_size=20)
    try:
        with open(path, "rb") as f:
            if limit is not None:
                hasher.update(f.read(limit))
            else:
                while chunk := f.read(1 << 20):
                    hasher.update(chunk)
    except OSError:
        return None
    return hasher.digest()
