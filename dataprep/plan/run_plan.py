"""The run plan: every input of RAW as a numbered *unit*, in output order, split into ranges.

A run writes its plan once, at the start, to OUT's state folder; every later run (a
resume, or one node of a multi-node run) reads it instead of looking at RAW again.
Files of ``OUT/.dataprep/`` (``plan.json`` is written last: its presence means the
plan is complete)::

    plan.json              RunPlanInfo: layout and why, the options, RAW's listing digest, counts
    units.bin              the units, one pickled object each, in sorted order
    units.offsets.npy      int64 [N + 1] byte ranges of the units in units.bin
    order.npy              int64 [N] output order: position p is unit order[p]
    bytes.npy              int64 [N] input bytes of the unit at each position (what ranges balance)
    ranges.npy             int64 [R + 1] first position of each range, then N
    replaced.bin           the units that replace others (media duplicates' Rejects), pickled
    replaced.offsets.npy   int64 [M + 1] their byte ranges in replaced.bin
    replaced.index.npy     int64 [M] the unit index each replaces, ascending
    listing.bin            RAW's listing (``dataprep.inputs.listing``)

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
per unit on disk, paged in as read); the units themselves stay on disk. The plan is built
by ``dataprep.plan.plan_build`` (``make_run_plan``) in bounded memory.

Version 2 (this one) keeps the replaced units on disk (version 1: ``replaced.pkl``, a dict);
a plan of another version is refused, and the run is to be started again with --overwrite.
"""

from __future__ import annotations

import json
import os
import pickle
from array import array
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.clean.options import TableOptions
from dataprep.errors import FormatError
from dataprep.inputs.listing import LISTING_NAME
from dataprep.inputs.raw_source import RawSource
from dataprep.inputs.records import Unit
from dataprep.inputs.sources import Layout
from dataprep.inputs.text import TextUnit
from dataprep.output.store import STATE_DIR
from dataprep.plan.range_size import even_range_starts

PLAN_VERSION = 2
PLAN_NAME = "plan.json"
UNITS_NAME = "units.bin"
OFFSETS_NAME = "units.offsets.npy"
ORDER_NAME = "order.npy"
BYTES_NAME = "bytes.npy"
RANGES_NAME = "ranges.npy"
REPLACED_NAME = "replaced.bin"
REPLACED_OFFSETS_NAME = "replaced.offsets.npy"
REPLACED_INDEX_NAME = "replaced.index.npy"
PLAN_FILES = (PLAN_NAME, UNITS_NAME, OFFSETS_NAME, ORDER_NAME, BYTES_NAME, RANGES_NAME, REPLACED_NAME,
              REPLACED_OFFSETS_NAME, REPLACED_INDEX_NAME, LISTING_NAME)


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
        except (OSError, ValueError) as err:
            raise FormatError(f"{path}: unreadable plan ({err!r}); rerun with --overwrite to plan again") from err
        if not isinstance(doc, dict) or doc.get("version") != PLAN_VERSION:
            got = doc.get("version") if isinstance(doc, dict) else None
            raise FormatError(f"{path}: plan version {got!r} not supported (expected {PLAN_VERSION}): it was made by "
                              "another version of dataprep; rerun with --overwrite to plan again")
        try:
            return cls(**doc)
        except TypeError as err:
            raise FormatError(f"{path}: unreadable plan ({err!r}); rerun with --overwrite to plan again") from err


class RunPlan:
    """A run plan read back from its folder: units by position, and the ranges.

    offsets: int64 [N + 1]; order: int64 [N]; unit_bytes: int64 [N] by position;
    range_starts: int64 [R + 1]; replaced_index: int64 [M], the unit indices whose unit is
    read from ``replaced.bin`` instead (media duplicates' rejects). All memory-mapped.
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
            self.replaced_index = np.load(directory / REPLACED_INDEX_NAME, mmap_mode="r")
            self.replaced_offsets = np.load(directory / REPLACED_OFFSETS_NAME, mmap_mode="r")
        except (OSError, ValueError) as err:
            raise FormatError(f"{directory}: damaged plan ({err!r}); rerun with --overwrite to plan again") from err
        if (len(self.order) != self.info.num_units or len(self.range_starts) != self.info.num_ranges + 1
                or len(self.replaced_offsets) != len(self.replaced_index) + 1):
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

    def _load(self, index: int, fds: tuple[int, int]) -> Unit:
        """The unit with sorted index ``index``; fds: open units.bin and replaced.bin."""
        replaced = self.replaced_index
        if len(replaced):
            k = int(np.searchsorted(replaced, index))
            if k < len(replaced) and int(replaced[k]) == index:
                start, end = int(self.replaced_offsets[k]), int(self.replaced_offsets[k + 1])
                unit: Unit = pickle.loads(os.pread(fds[1], end - start, start))
                return unit
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        unit = pickle.loads(os.pread(fds[0], end - start, start))
        return unit

    def at(self, position: int) -> Unit:
        """The unit at ``position`` in output order."""
        return next(self.units(position, position + 1))

    def units(self, start: int, stop: int) -> Iterator[Unit]:
        """Units at positions [start, stop), in order."""
        fds = (os.open(self.directory / UNITS_NAME, os.O_RDONLY), os.open(self.directory / REPLACED_NAME, os.O_RDONLY))
        try:
            for index in self.order[start:stop].tolist():
                yield self._load(index, fds)
        finally:
            for fd in fds:
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


class RangeSplitter:
    """``split_ranges`` over unit sizes that arrive in chunks: the same starts, holding one int64 per range.

    ``add`` each chunk of int64 unit sizes in position order, then ``finish``. Vectorized: a
    cumulative sum per chunk and one binary search per range closed.
    """

    def __init__(self, range_bytes: int) -> None:
        self.range_bytes = max(range_bytes, 1)  # split_ranges closes a range at every unit below 1
        self._starts = array("q", [0])
        self._count = 0
        self._total = 0  # bytes of the open range so far

    def add(self, unit_bytes: np.ndarray) -> None:
        if not len(unit_bytes):
            return
        totals = np.cumsum(np.maximum(unit_bytes, 1), dtype=np.int64)
        base = -self._total  # the open range's bytes through element i: totals[i] - base
        while True:
            close = int(np.searchsorted(totals, base + self.range_bytes, side="left"))
            if close >= len(totals):
                break
            self._starts.append(self._count + close + 1)
            base = int(totals[close])
        self._total = int(totals[-1]) - base
        self._count += len(unit_bytes)

    def finish(self) -> np.ndarray:
        """int64 [R + 1]: what ``split_ranges`` returns for all the sizes added."""
        if self._starts[-1] != self._count or not self._count:
            self._starts.append(self._count)
        return np.frombuffer(self._starts, dtype=np.int64).copy()
