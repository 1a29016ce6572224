"""Building a run plan (``dataprep.plan.run_plan``) in bounded memory: RAW's items streamed into the plan's files.

``make_run_plan`` reads RAW (a ``PlanInput``: the walk of a folder, or a generated listing)
twice, as a stream: once for the listing (written with its digest, and counted), once for
the units (keys made unique, pickled to ``units.bin``, their offsets and sizes appended to
``.npy`` files as they come). Then, for media, the duplicates (``plan.duplicates``: external
sorts) and the order (a permutation by ``seed``); then the ranges and ``plan.json``.

Memory per input (measured by ``tools/bench/plan_bench.py``; ``dataprep/plan/README.md``):
while the units stream by, the keys' Bloom filter (``plan.unique_keys``, 1.4-2.8 bytes); for a
shuffled media order, the permutation and the sizes it gathers (int32 each below 2^31:
8 bytes); nothing else grows with the inputs. Scratch files live in ``plan-spill/`` of the
state folder, removed when planning ends, however it ends.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.durable import atomic_write_bytes
from dataprep.inputs.listing import LISTING_NAME, Entry
from dataprep.inputs.records import FilePart, RawRecord, Reject, RejectReason, Unit
from dataprep.inputs.sources import KeyAssigner, Layout, LayoutChoice, group_records
from dataprep.inputs.walk import RawFile
from dataprep.phases import SILENT, PhaseProgress, counted
from dataprep.plan.duplicates import find_duplicates, primary_image
from dataprep.plan.external_sort import SortLimits
from dataprep.plan.file_units import MAX_PART_BYTES, file_units, table_schema_of
from dataprep.plan.range_size import even_range_starts_of_chunks, part_bytes_for
from dataprep.plan.plan_input import PlanInput, RawTree
from dataprep.plan.run_plan import (BYTES_NAME, OFFSETS_NAME, ORDER_NAME, PLAN_NAME, RANGES_NAME, REPLACED_INDEX_NAME,
                                    REPLACED_NAME, REPLACED_OFFSETS_NAME, UNITS_NAME, LabelMap, PlanOptions,
                                    RangeSplitter, RunPlan, RunPlanInfo)
from dataprep.plan.scratch_files import NpyWriter, PickleFile, PickleSpill, read_npy_chunks
from dataprep.plan.unique_keys import SpilledKeys

__all__ = ["SPILL_DIR", "PlanLimits", "make_run_plan", "sort_limits"]

SPILL_DIR = "plan-spill"  # in the state folder, while planning
_CHUNK_ROWS = 1 << 16  # values per block when an array is read or written in blocks (512 KiB of int64)


@dataclass(frozen=True)
class PlanLimits:
    """Buffers of planning: the external sorts' (``SortLimits``) and the key set's memtable (rows).

    None (the default): sized from the number of inputs, one row per 64 inputs within caps
    (``sort_limits``, ``unique_keys.seen_limits``), so that a small RAW needs little memory and
    none needs much. Tests set small values to take the paths of large RAWs.
    """

    sort: SortLimits | None = None
    key_memtable_rows: int | None = None


def sort_limits(count: int) -> SortLimits:
    """``SortLimits`` for ``count`` records: runs of count/64 (4k to 256k), blocks of count/4096 (256 to 8k)."""
    return SortLimits(run_rows=max(1 << 12, min(1 << 18, count // 64)),
                      block_rows=max(1 << 8, min(1 << 13, count // 4096)))


@dataclass(frozen=True)
class _Built:
    listing_sha256: str
    label_map: LabelMap
    table_schema: dict[str, str] | None


def make_run_plan(options: PlanOptions, choice: LayoutChoice, directory: Path, fingerprint: dict[str, Any], *,
                  source: PlanInput | None = None, limits: PlanLimits | None = None,
                  progress: PhaseProgress = SILENT) -> RunPlan:
    """Build the plan into ``directory`` (``run_plan``'s module docstring) and read it back.

    ``fingerprint``: the options that shape the output, recorded in ``plan.json``; ``source``:
    what RAW holds (default: ``options.raw`` on this machine's disk); ``progress``: told of the
    two passes over RAW ("walking RAW", then "planning" of the entries the walk counted).
    """
    source = RawTree(options.raw) if source is None else source
    spill = directory / SPILL_DIR
    shutil.rmtree(spill, ignore_errors=True)  # a killed planner's
    spill.mkdir()
    try:
        built = _build(options, choice.layout, directory, source, limits or PlanLimits(), progress)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    range_starts = _range_starts(directory / BYTES_NAME, options.range_bytes)
    np.save(directory / RANGES_NAME, range_starts)
    num_units = int(np.load(directory / ORDER_NAME, mmap_mode="r").shape[0])
    info = RunPlanInfo(layout=str(choice.layout), layout_reason=choice.reason, fingerprint=fingerprint,
                       listing_sha256=built.listing_sha256, num_units=num_units, num_ranges=len(range_starts) - 1,
                       label_map=built.label_map, table_schema=built.table_schema)
    atomic_write_bytes(directory / PLAN_NAME, info.to_bytes())
    return RunPlan(directory)


def _range_starts(bytes_path: Path, range_bytes: int | None) -> np.ndarray:
    """``run_plan.split_ranges`` of the unit sizes in ``bytes_path``, read in chunks."""
    if range_bytes is None:
        return even_range_starts_of_chunks(lambda: read_npy_chunks(bytes_path, _CHUNK_ROWS))
    splitter = RangeSplitter(range_bytes)
    for chunk in read_npy_chunks(bytes_path, _CHUNK_ROWS):
        splitter.add(chunk)
    return splitter.finish()


def _build(options: PlanOptions, layout: Layout, directory: Path, source: PlanInput, limits: PlanLimits,
           progress: PhaseProgress) -> _Built:
    """Every file of the plan but the ranges and ``plan.json``."""
    spill, skip = directory / SPILL_DIR, source.exclusion()
    progress.begin("walking RAW", None, "entries")
    listing_sha256, count = _write_listing(counted(source.items(), progress), skip, directory / LISTING_NAME)
    progress.end()
    sizes_path = spill / "sizes.npy"
    with SpilledKeys(spill / "keys", count, memtable_rows=limits.key_memtable_rows) as used:
        keys = KeyAssigner(used)
        progress.begin("planning", count, "entries")
        items = counted(source.items(), progress)
        units = _media_units(layout, items, skip, keys) if layout.is_media else \
            _file_units(options, layout, items, source.single_file, skip, keys)
        with PickleSpill(directory / UNITS_NAME, directory / OFFSETS_NAME, sizes_path) as spilled:
            labels = _spill(units, spilled, source, check_label=layout is Layout.IMAGE_FOLDER)
        progress.end()
    with PickleSpill(directory / REPLACED_NAME, directory / REPLACED_OFFSETS_NAME,
                     directory / REPLACED_INDEX_NAME) as replaced:
        if layout.is_media:
            with PickleFile(directory / UNITS_NAME, directory / OFFSETS_NAME) as reader:
                for index, reject in find_duplicates(reader, read_npy_chunks(sizes_path, _CHUNK_ROWS), source.digest,
                                                     spill / "duplicates", limits.sort or sort_limits(count)):
                    replaced.add(reject, index)
    shuffle = layout.is_media and options.shuffle
    _write_order(directory, sizes_path, spilled.close(), spilled.max_value,
                 np.random.default_rng(options.seed) if shuffle else None)
    table_schema = None
    if layout is Layout.TABLE:
        table_schema = table_schema_of(options.table, options.text_column, directory / UNITS_NAME,
                                       np.load(directory / OFFSETS_NAME, mmap_mode="r"),
                                       max_record_bytes=options.raw.max_record_bytes)
    label_map = {name: i for i, name in enumerate(sorted(labels))} if layout is Layout.IMAGE_FOLDER else None
    return _Built(listing_sha256, label_map, table_schema)


def _write_listing(items: Iterable[RawFile | Reject], skip: Callable[[str], bool] | None,
                   path: Path) -> tuple[str, int]:
    """Write RAW's listing (``inputs.listing``'s format, fsync'd); (its hex sha256, the number of items read)."""
    digest, count = hashlib.sha256(), 0
    with open(path, "wb", buffering=1 << 20) as f:
        for item in items:
            count += 1
            if isinstance(item, Reject):
                rel, size, mtime_ns = item.source, -1, 0
            else:  # size and mtime from the walk's own stat of the file
                rel, size, mtime_ns = item.rel, item.size, item.mtime_ns
            if skip is not None and skip(rel):
                continue
            data = Entry(os.fsencode(rel), size, mtime_ns).encode()
            digest.update(data)
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest(), count


def _media_units(layout: Layout, items: Iterable[RawFile | Reject], skip: Callable[[str], bool] | None,
                 keys: KeyAssigner) -> Iterator[Unit]:
    units = group_records(items, layout, keys)
    # dataprep's own output, reached through a symlink, is never an input (its keys are taken all the same)
    return units if skip is None else (unit for unit in units if not skip(unit.source))


def _file_units(options: PlanOptions, layout: Layout, items: Iterable[RawFile | Reject], single_file: bool,
                skip: Callable[[str], bool] | None, keys: KeyAssigner) -> Iterator[Unit]:
    if skip is not None:
        items = (item for item in items if not skip(item.source if isinstance(item, Reject) else item.rel))
    return file_units(items, layout, options.text_unit, part_bytes_for(options.range_bytes, MAX_PART_BYTES),
                      single=single_file, keys=keys)


def _spill(units: Iterable[Unit], spilled: PickleSpill, source: PlanInput, *, check_label: bool) -> set[str]:
    """Pickle every unit with its input bytes (-1: none); returns the class names seen (image-folder)."""
    labels: set[str] = set()
    for unit in units:
        if check_label and isinstance(unit, RawRecord):
            if unit.label is None:
                unit = Reject(unit.source, RejectReason.BAD_LABEL,
                              "file is not inside a class folder (RAW/<class>/<file>)")
            else:
                labels.add(unit.label)
        spilled.add(unit, _input_bytes(unit, source))
    return labels


def _input_bytes(unit: Unit, source: PlanInput) -> int:
    """A file part's bytes, or the bytes of a media input's primary image file; -1 for none."""
    if isinstance(unit, FilePart):
        return unit.size
    path = primary_image(unit) if isinstance(unit, RawRecord) else None
    return -1 if path is None else source.size(path)


def _write_order(directory: Path, sizes_path: Path, count: int, max_size: int,
                 rng: np.random.Generator | None) -> None:
    """``order.npy`` (sorted order, or a permutation by ``rng``) and ``bytes.npy`` (input bytes by position, >= 0)."""
    order_file, bytes_file = NpyWriter(directory / ORDER_NAME, np.int64), NpyWriter(directory / BYTES_NAME, np.int64)
    try:
        if rng is None:
            start = 0
            for sizes in read_npy_chunks(sizes_path, _CHUNK_ROWS):
                order_file.write(np.arange(start, start + len(sizes)))
                bytes_file.write(np.maximum(sizes, 0))
                start += len(sizes)
            return
        # rng.permutation(count) shuffles an int64 arange; the same draws shuffle an int32 one the same way
        order = np.arange(count, dtype=np.int32 if count < 2**31 else np.int64)
        rng.shuffle(order)
        sizes = _compact(sizes_path, count, max_size)
        for start in range(0, count, _CHUNK_ROWS):
            chunk = order[start:start + _CHUNK_ROWS]
            order_file.write(chunk)
            bytes_file.write(np.maximum(sizes[chunk], 0))
    finally:
        order_file.close()
        bytes_file.close()


def _compact(sizes_path: Path, count: int, max_size: int) -> np.ndarray:
    """The sizes in memory, int32 when every one fits (4 bytes per input), else int64."""
    sizes = np.empty(count, dtype=np.int32 if max_size < 2**31 else np.int64)
    start = 0
    for chunk in read_npy_chunks(sizes_path, _CHUNK_ROWS):
        sizes[start:start + len(chunk)] = chunk
        start += len(chunk)
    return sizes
