"""The planner as it was before issue 27 (everything in memory), kept as the reference the bounded one must equal.

``old_plan`` returns what version 1 of the plan held for a RAW and options: the units by
index (duplicates replaced), the order, the bytes by position, the ranges, the label map and
the listing's digest. Copied from ``dataprep/plan/run_plan.py`` and ``duplicates.py`` of
commit c956221, with RAW read through the same walk and ``file_units``/``media_records``
(whose logic did not change; only where their items come from).
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dataprep.inputs.listing import excluded_by, listing_digest
from dataprep.inputs.records import FilePart, RawRecord, Reject, RejectReason, Unit
from dataprep.inputs.sources import KeyAssigner, Layout, media_records, walk_files
from dataprep.inputs.walk import RawFile
from dataprep.plan.duplicates import primary_image
from dataprep.plan.file_units import MAX_PART_BYTES, file_units
from dataprep.plan.run_plan import PlanOptions, split_ranges


@dataclass(frozen=True)
class OldPlan:
    units: list[Unit]  # by index, duplicates replaced
    order: list[int]
    unit_bytes: list[int]
    range_starts: list[int]
    replaced: dict[int, Reject]
    label_map: dict[str, int] | None
    listing_sha256: str


def old_plan(options: PlanOptions, layout: Layout) -> OldPlan:
    raw = options.raw
    skip = excluded_by(raw.root, raw.exclude, follow_symlinks=raw.follow_symlinks)
    if layout.is_media:
        units: list[Unit] = [u for u in media_records(raw.root, layout, follow_symlinks=raw.follow_symlinks)
                             if skip is None or not skip(u.source)]
    else:
        units = list(file_units(_input_files(options), layout, options.text_unit,
                                min(MAX_PART_BYTES, options.range_bytes), single=raw.root.is_file(),
                                keys=KeyAssigner()))
    labels: set[str] = set()
    for i, unit in enumerate(units):
        if layout is Layout.IMAGE_FOLDER and isinstance(unit, RawRecord):
            if unit.label is None:
                units[i] = Reject(unit.source, RejectReason.BAD_LABEL,
                                  "file is not inside a class folder (RAW/<class>/<file>)")
            else:
                labels.add(unit.label)
    sizes = np.array([u.size if isinstance(u, FilePart) else _media_bytes(u) for u in units], dtype=np.int64)
    replaced = _find_duplicates(units, sizes) if layout.is_media else {}
    count = len(units)
    shuffled = layout.is_media and options.shuffle
    order = np.random.default_rng(options.seed).permutation(count) if shuffled else np.arange(count)
    unit_bytes = np.maximum(sizes[order], 0) if count else np.zeros(0, dtype=np.int64)
    final = [replaced.get(i, unit) for i, unit in enumerate(units)]
    label_map = {n: i for i, n in enumerate(sorted(labels))} if layout is Layout.IMAGE_FOLDER else None
    return OldPlan(final, order.tolist(), unit_bytes.tolist(), split_ranges(unit_bytes, options.range_bytes).tolist(),
                   replaced, label_map, listing_digest(raw.root, follow_symlinks=raw.follow_symlinks,
                                                       exclude=raw.exclude))


def _input_files(options: PlanOptions) -> Iterator[RawFile | Reject]:
    raw = options.raw
    root = raw.root
    if root.is_file():
        st = root.stat()
        yield RawFile(root.name, os.fspath(root), st.st_size, st.st_mtime_ns)
        return
    skip = excluded_by(root, raw.exclude, follow_symlinks=raw.follow_symlinks)
    for item in walk_files(root, follow_symlinks=raw.follow_symlinks):
        if skip is None or not skip(item.source if isinstance(item, Reject) else item.rel):
            yield item


def _media_bytes(unit: object) -> int:
    path = primary_image(unit) if isinstance(unit, RawRecord) else None
    if path is None:
        return -1
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _find_duplicates(units: list[Unit], sizes: np.ndarray) -> dict[int, Reject]:
    by_size = np.argsort(sizes, kind="stable")
    ordered = sizes[by_size]
    starts = np.flatnonzero(np.diff(ordered, prepend=-2) != 0)
    bounds = np.append(starts, len(ordered))
    duplicates: dict[int, Reject] = {}
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if hi - lo < 2 or ordered[lo] <= 0:
            continue
        heads: dict[bytes, list[int]] = defaultdict(list)
        for i in by_size[lo:hi].tolist():
            if (head := _digest(_path(units[i]), 64 * 2**10)) is not None:
                heads[head].append(i)
        for candidates in heads.values():
            firsts: dict[bytes, int] = {}
            for i in candidates if len(candidates) > 1 else []:
                digest = _digest(_path(units[i]), None)
                if digest is None:
                    continue
                if digest in firsts:
                    duplicates[i] = Reject(units[i].source, RejectReason.DUPLICATE,
                                           f"same bytes as {units[firsts[digest]].source}")
                else:
                    firsts[digest] = i
    return duplicates


def _path(unit: object) -> str | None:
    return primary_image(unit) if isinstance(unit, RawRecord) else None


def _digest(path: str | None, limit: int | None) -> bytes | None:
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
