"""The run plan: every input of RAW as a numbered *unit*, in output order, split into ranges.

A run writes its plan once, at the start, to OUT's state folder; every later run (a
resume, or one node of a multi-node run) reads it instead of looking at RAW again.
Files of ``OUT/.dataprep/`` (``plan.json`` is written last: its presence means the
plan is complete)::

    plan.json          RunPlanInfo: layout and why, the options, RAW's listing digest, counts
    units.bin          the units, one pickled object each, in sorted order
    units.offsets.npy  int64 [N + 1] byte ranges of the units in units.bin
    order.npy          int64 [N] output order: position p is unit order[p]
    bytes.npy          int64 [N] input bytes of the unit at each position (what ranges balance)
    ranges.npy         int64 [R + 1] first position of each range, then N
    replaced.pkl       {unit index: Reject} for media duplicates found after spilling
    listing.bin        RAW's listing (``dataprep.inputs.listing``)

Units by layout:

- image-folder, grouped: one ``RawRecord`` (an input) or ``Reject`` each; exact duplicates
  are found here (first in sorted key order wins), inputs without a class are rejected,
  and the order is a permutation by ``seed`` so that classes mix inside every shard.
- table, text: one ``FilePart`` each: a file, or for line-based files (JSONL, text by
  line) larger than the part size a byte range of one starting at a line, with the
  line number it starts at; files the layout has no use for are ``Reject`` units.

A *range* is a run of consecutive positions holding about ``range_bytes`` of input. A
range is written on its own (its shards are numbered within the range, nothing carries
over from the range before), so its output depends only on the plan and the range: the
unit of work a multi-node run hands out. Memory: the arrays are memory-mapped (~30 bytes
per unit on disk, paged in as read); the units themselves stay on disk.
"""

from __future__ import annotations

import json
import os
import pickle
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.clean.options import TableOptions
from dataprep.inputs.text import TextUnit
from dataprep.errors import FormatError
from dataprep.formats.durable import atomic_write_bytes
from dataprep.inputs.listing import LISTING_NAME, excluded_by, write_listing
from dataprep.inputs.raw_source import RawSource
from dataprep.inputs.records import FilePart, RawRecord, Reject, RejectReason, Unit
from dataprep.plan.duplicates import find_duplicates, media_bytes
from dataprep.plan.file_units import MAX_PART_BYTES, file_units, table_schema_of
from dataprep.plan.range_size import even_range_starts, part_bytes_for
from dataprep.output.store import STATE_DIR
from dataprep.inputs.sources import Layout, LayoutChoice, media_records

PLAN_VERSION = 1
PLAN_NAME = "plan.json"
UNITS_NAME = "units.bin"
OFFSETS_NAME = "units.offsets.npy"
ORDER_NAME = "order.npy"
BYTES_NAME = "bytes.npy"
RANGES_NAME = "ranges.npy"
REPLACED_NAME = "replaced.pkl"
PLAN_FILES = (PLAN_NAME, UNITS_NAME, OFFSETS_NAME, ORDER_NAME, BYTES_NAME, RANGES_NAME, REPLACED_NAME, LISTING_NAME)


LabelMap = dict[str, int] | None  # class name -> label (image-folder), else None


@dataclass(frozen=True)
class RunPlanInfo:
    """``plan.json``: what the plan was built from. ``fingerprint``: the options that shape the output."""

    layout: str
    layout_reason: str
    fingerprint: dict[str, Any]
    listing_sha256: str
    num_units: int
    num_ranges: int
    label_map: dict[str, int] | None = None
    table_schema: dict[str, str] | None = None
    version: int = PLAN_VERSION

    def to_bytes(self) -> bytes:
        # ASCII with escapes: a class name from an undecodable folder name (surrogateescape)
        # round-trips exactly, where UTF-8 output would fail on it.
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode("ascii")

    @classmethod
    def from_path(cls, path: Path) -> RunPlanInfo:
        try:
            doc = json.loads(path.read_bytes())
            if doc.get("version") != PLAN_VERSION:
                raise FormatError(f"{path}: plan version {doc.get('version')!r} not supported (expected "
                                  f"{PLAN_VERSION})")
            return cls(**doc)
        except (OSError, ValueError, TypeError) as err:
            raise FormatError(f"{path}: unreadable plan ({err!r}); rerun with --overwrite to plan again") from err


class RunPlan:
    """A run plan read back from its folder: units by position, and the ranges.

    offsets: int64 [N + 1]; order: int64 [N]; unit_bytes: int64 [N] by position;
    range_starts: int64 [R + 1]; replaced: unit index -> Reject.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.info = RunPlanInfo.from_path(directory / PLAN_NAME)
        try:
            # Memory-mapped: a range task on another node pages in only its range's part.
            self.offsets = np.load(directory / OFFSETS_NAME, mmap_mode="r")
            self.order = np.load(directory / ORDER_NAME, mmap_mode="r")
            self.unit_bytes = np.load(directory / BYTES_NAME, mmap_mode="r")
            self.range_starts = np.load(directory / RANGES_NAME, mmap_mode="r")
            self.replaced: dict[int, Reject] = pickle.loads((directory / REPLACED_NAME).read_bytes())
        except (OSError, ValueError, pickle.UnpicklingError) as err:
            raise FormatError(f"{directory}: damaged plan ({err!r}); rerun with --overwrite to plan again") from err
        if len(self.order) != self.info.num_units or len(self.range_starts) != self.info.num_ranges + 1:
            raise FormatError(f"{directory}: plan arrays do not match {PLAN_NAME}; rerun with --overwrite to plan "
                              "again")

    @property
    def layout(self) -> Layout:
        return Layout(self.info.layout)

    def __len__(self) -> int:
        return int(self.order.shape[0])

    @property
    def num_ranges(self) -> int:
        return int(self.range_starts.shape[0]) - 1

    def range_bounds(self, index: int) -> tuple[int, int]:
        """[start, stop) positions of range ``index``."""
        return int(self.range_starts[index]), int(self.range_starts[index + 1])

    def range_of(self, position: int) -> int:
        """The range holding ``position`` (``num_ranges`` for the end of the plan)."""
        return int(np.searchsorted(self.range_starts, position,
                                   side="right")) - 1 if position < len(self) else self.num_ranges

    def load(self, index: int, fd: int) -> Unit:
        """The unit with sorted index ``index``."""
        if index in self.replaced:
            return self.replaced[index]
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        unit: Unit = pickle.loads(os.pread(fd, end - start, start))
        return unit

    def at(self, position: int) -> Unit:
        """The unit at ``position`` in output order."""
        fd = os.open(self.directory / UNITS_NAME, os.O_RDONLY)
        try:
            return self.load(int(self.order[position]), fd)
        finally:
            os.close(fd)

    def units(self, start: int, stop: int) -> Iterator[Unit]:
        """Units at positions [start, stop), in order."""
        fd = os.open(self.directory / UNITS_NAME, os.O_RDONLY)
        try:
            for index in self.order[start:stop].tolist():
                yield self.load(index, fd)
        finally:
            os.close(fd)


def plan_names() -> list[str]:
    """The plan's files as names in OUT (``dataprep.output.store``), ``plan.json`` last: it says the rest is there."""
    return [f"{STATE_DIR}/{name}" for name in (*PLAN_FILES[1:], PLAN_NAME)]


def is_planned(directory: Path) -> bool:
    return (directory / PLAN_NAME).exists()


@dataclass(frozen=True)
class PlanOptions:
    """What planning reads of a run's options.

    raw: RAW (``RawSource``: its folder, symlink policy, and OUT when OUT lies inside it);
    range_bytes: input bytes per range (None: ``auto``, ``range_size``); seed, shuffle: the order
    of media inputs; text_unit: a text file is one document or one per line; table: ``--schema``, ``--required``,
    ``--dedup-on``; text_column: for token output, the table column tokenized (None: none).
    """

    raw: RawSource
    range_bytes: int | None
    seed: int = 0
    shuffle: bool = True
    text_unit: TextUnit = TextUnit.FILE
    table: TableOptions = field(default_factory=TableOptions)
    text_column: str | None = None


def make_run_plan(options: PlanOptions, choice: LayoutChoice, directory: Path,
                  fingerprint: dict[str, Any]) -> RunPlan:
    """Build the plan into ``directory`` (see the module docstring) and read it back.

    ``fingerprint``: the options that shape the output, recorded in ``plan.json``.
    """
    raw, layout = options.raw, choice.layout
    listing_sha256 = write_listing(raw.root, directory / LISTING_NAME, follow_symlinks=raw.follow_symlinks,
                                   exclude=raw.exclude)
    skip = excluded_by(raw.root, raw.exclude, follow_symlinks=raw.follow_symlinks)
    label_map: dict[str, int] | None = None
    table_schema: dict[str, str] | None = None
    replaced: dict[int, Reject] = {}
    if layout.is_media:
        offsets, sizes, order, replaced, label_map = _plan_media(options, layout, skip, directory / UNITS_NAME)
    else:
        units = file_units(raw, layout, options.text_unit, part_bytes_for(options.range_bytes, MAX_PART_BYTES))
        offsets, sizes, _ = _spill(units, directory / UNITS_NAME, check_label=False)
        order = np.arange(len(sizes))
        if layout is Layout.TABLE:
            table_schema = table_schema_of(options.table, options.text_column, directory / UNITS_NAME, offsets)
    order = order.astype(np.int64)
    unit_bytes = np.maximum(sizes[order], 0) if len(sizes) else np.zeros(0, dtype=np.int64)
    range_starts = split_ranges(unit_bytes, options.range_bytes)
    np.save(directory / OFFSETS_NAME, offsets)
    np.save(directory / ORDER_NAME, order)
    np.save(directory / BYTES_NAME, unit_bytes)
    np.save(directory / RANGES_NAME, range_starts)
    atomic_write_bytes(directory / REPLACED_NAME, pickle.dumps(replaced, protocol=pickle.HIGHEST_PROTOCOL))
    info = RunPlanInfo(layout=str(layout), layout_reason=choice.reason, fingerprint=fingerprint,
                       listing_sha256=listing_sha256, num_units=len(order), num_ranges=len(range_starts) - 1,
                       label_map=label_map, table_schema=table_schema)
    atomic_write_bytes(directory / PLAN_NAME, info.to_bytes())
    return RunPlan(directory)


def _plan_media(options: PlanOptions, layout: Layout, skip: Callable[[str], bool] | None,
                units_path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, Reject], LabelMap]:
    """Spill the media inputs to ``units_path``: (offsets, sizes, order, duplicates replaced, label map)."""
    units: Iterable[Unit] = media_records(options.raw.root, layout, follow_symlinks=options.raw.follow_symlinks)
    if skip is not None:  # dataprep's own output, reached through a symlink, is never an input
        units = (u for u in units if not skip(u.source))
    offsets, sizes, labels = _spill(units, units_path, check_label=layout is Layout.IMAGE_FOLDER)
    label_map = {name: i for i, name in enumerate(sorted(labels))} if layout is Layout.IMAGE_FOLDER else None
    replaced = find_duplicates(units_path, offsets, sizes)
    count = len(sizes)
    order = np.random.default_rng(options.seed).permutation(count) if options.shuffle else np.arange(count)
    return offsets, sizes, order, replaced, label_map


def split_ranges(unit_bytes: np.ndarray, range_bytes: int | None) -> np.ndarray:
    """int64 [R + 1]: range starts over positions; a range closes once it holds ``range_bytes`` or more.

    A pure function of the plan's unit sizes and ``range_bytes`` (None: ``auto``, ranges of
    equal bytes, ``range_size.even_range_starts``): the same plan always splits the same
    way, whoever runs it. An empty plan has one empty range.
    """
    if range_bytes is None:
        return even_range_starts(unit_bytes)
    starts = [0]
    total = 0
    for position, nbytes in enumerate(unit_bytes.tolist()):
        total += max(int(nbytes), 1)
        if total >= range_bytes and position + 1 < len(unit_bytes):
            starts.append(position + 1)
            total = 0
    starts.append(len(unit_bytes))
    return np.asarray(starts, dtype=np.int64)


def _spill(units: Iterable[Unit], path: Path, *, check_label: bool) -> tuple[np.ndarray, np.ndarray, set[str]]:
    """Pickle units to ``path``; returns offsets int64 [N+1], sizes int64 [N] (-1: none), labels."""
    offsets, sizes = array("q", [0]), array("q")
    labels: set[str] = set()
    with open(path, "wb") as f:
        for unit in units:
            if check_label and isinstance(unit, RawRecord):
                if unit.label is None:
                    unit = Reject(unit.source, RejectReason.BAD_LABEL,
                                  "file is not inside a class folder (RAW/<class>/<file>)")
                else:
                    labels.add(unit.label)
            sizes.append(unit.size if isinstance(unit, FilePart) else media_bytes(unit))
            f.write(pickle.dumps(unit, protocol=pickle.HIGHEST_PROTOCOL))
            offsets.append(f.tell())
        f.flush()
        os.fsync(f.fileno())
    return np.frombuffer(offsets, dtype=np.int64).copy(), np.frombuffer(sizes, dtype=np.int64).copy(), labels
