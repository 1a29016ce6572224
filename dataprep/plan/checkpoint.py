"""The checkpoint: how far a run got in its plan, rewritten atomically after every completed shard.

Checkpoint document (``OUT/.dataprep/checkpoint.json``), version 4::

    {"version": 4, "mode": "sequential", "range": 1, "next_shard": 3, "position": 1234, "skip": 17,
     "records_done": 98765, "rejects_bytes": 5678, "totals": {...}, "shards": [ShardInfo json, ...],
     "carry": {...}, "ranges_done": [0, 2, ...], "open_ranges": {"5": {a range's place}, ...},
     "range_start": {a place, its "shards" a count; or null}}

Resuming means skipping to a place in the saved plan, never replaying: ``position`` is
the plan position of the first unit not wholly final and ``skip`` how many of its raw
records are final (in a completed shard or in the rejects file); ``range`` and
``next_shard`` say which range is being written and the number of its next shard;
``records_done`` counts final raw records over the whole plan (the position of the next
one in the duplicate set); ``carry`` is the packer's carry-over (``dataprep.engines.handlers``).

``mode`` says how the ranges were written so far; every engine resumes either
(dataprep/engines/README.md, "One checkpoint"):

- ``sequential`` (one process, ``--engine local --workers 1`` or a plan of one range): the
  ranges one after another, in plan order, the fields above; rejects in
  ``rejects.partial.jsonl``, duplicates in the ``seen`` set; ``range_start``: the place where
  range ``range`` began (its ``rejects_bytes`` and ``totals`` those of the ranges before, its
  ``shards`` how many of the run's first shards are theirs). A run of whole ranges resuming
  it (``Checkpoint.whole_ranges``) keeps those ranges and writes the rest.
- ``ranges`` (writer processes of ``--engine local``, or Ray tasks of ``--engine ray``): whole
  ranges written in any order, each range's rejects in a file of its own
  (``.dataprep/ranges/``). ``ranges_done``: the ranges complete; ``totals`` counts them.
  ``open_ranges``: range -> its place, a checkpoint of that range alone (``range``,
  ``next_shard``, ``position``, ``skip``; ``records_done`` counts the range's raw records,
  ``rejects_bytes`` its rejects file, ``totals`` and ``shards`` its own), so a killed run
  loses at most the shard each writer had open (Ray tasks write whole ranges: a Ray run
  resuming it writes the open ranges again). ``shards`` lists every completed shard: those
  of the ranges done, then (sorted by name) those of the open ranges, which is what a
  resume keeps in OUT.
- ``""``: nothing written yet (the checkpoint saved with the plan).

Version 3 documents are read as version 4 (their ``ray`` mode as ``ranges``); version 2
(before ``mode`` and ``open_ranges``) as ``ranges`` when they record ranges done, else as
``sequential``. Any other version is refused, naming it, with what to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dataprep.errors import FormatError
from dataprep.formats.manifest import ShardInfo, Totals
from dataprep.output.store import STATE_DIR, OutputStore

CHECKPOINT_NAME = "checkpoint.json"
PARTIAL_REJECTS_NAME = "rejects.partial.jsonl"
SEEN_NAME = "seen"
# The same files as names in the output store (``dataprep.output.store``: relative to OUT).
CHECKPOINT_PATH = f"{STATE_DIR}/{CHECKPOINT_NAME}"
PARTIAL_REJECTS_PATH = f"{STATE_DIR}/{PARTIAL_REJECTS_NAME}"
SEEN_PATH = f"{STATE_DIR}/{SEEN_NAME}"
CHECKPOINT_VERSION = 4
_READABLE_VERSIONS = (2, 3, CHECKPOINT_VERSION)
MODE_SEQUENTIAL, MODE_RANGES = "sequential", "ranges"
MODES = ("", MODE_SEQUENTIAL, MODE_RANGES)
_OLD_MODES = {"ray": MODE_RANGES}  # version 3's name of a run of Ray tasks


@dataclass(frozen=True)
class Checkpoint:
    """Progress of a run through its plan, as of its last completed shard (module docstring)."""

    range: int = 0
    next_shard: int = 0
    position: int = 0
    skip: int = 0
    records_done: int = 0
    rejects_bytes: int = 0
    totals: Totals = field(default_factory=Totals)
    shards: tuple[ShardInfo, ...] = ()
    carry: dict[str, Any] = field(default_factory=dict)
    ranges_done: tuple[int, ...] = ()
    mode: str = ""
    open_ranges: dict[int, Checkpoint] = field(default_factory=dict)
    range_start: Checkpoint | None = None

    @property
    def is_started(self) -> bool:
        """Whether the sequential write loop has made progress (anything past the plan's start)."""
        progressed = self.range or self.position or self.skip or self.records_done or self.shards
        return bool(progressed) and self.mode in ("", MODE_SEQUENTIAL)

    def with_open_range(self, place: Checkpoint) -> Checkpoint:
        """This run (mode ``ranges``) with range ``place.range`` written up to ``place`` (its shards recorded)."""
        open_ranges = {**self.open_ranges, place.range: place}
        return replace(self, mode=MODE_RANGES, open_ranges=open_ranges,
                       shards=_all_shards(self._done_shards(), open_ranges))

    def with_range_done(self, index: int, totals: Totals, shards: tuple[ShardInfo, ...]) -> Checkpoint:
        """This run with range ``index`` complete (``totals`` and ``shards`` its own); idempotent."""
        if index in self.ranges_done:
            return self
        open_ranges = {r: place for r, place in self.open_ranges.items() if r != index}
        done = tuple(sorted((*self._done_shards(), *shards), key=lambda s: s.name))
        return replace(self, mode=MODE_RANGES, totals=add_totals(self.totals, totals), open_ranges=open_ranges,
                       shards=_all_shards(done, open_ranges), ranges_done=tuple(sorted((*self.ranges_done, index))))

    def whole_ranges(self) -> Checkpoint:
        """This run as whole ranges (mode ``ranges``): the ranges done, no open range (module docstring).

        A sequential run keeps the ranges before the one it stopped in (their rejects are
        the partial file's first ``range_start.rejects_bytes`` bytes); open ranges are dropped.
        Raises ``FormatError`` for a sequential run without ``range_start`` (version 3).
        """
        if self.mode == MODE_SEQUENTIAL and self.is_started:
            start = self.range_start
            if start is None:
                raise FormatError(f"the checkpoint (version 3) of a run written in one process, stopped in range "
                                  f"{self.range}, does not say where that range began; resume it with --engine "
                                  "local --workers 1, or pass --overwrite")
            return Checkpoint(totals=start.totals, shards=start.shards, mode=MODE_RANGES,
                              ranges_done=tuple(range(start.range)))
        return replace(self, mode=MODE_RANGES, open_ranges={}, shards=self._done_shards(), range_start=None)

    def _done_shards(self) -> tuple[ShardInfo, ...]:
        """The shards of the ranges done (``shards`` without those of the open ranges)."""
        open_names = {s.name for place in self.open_ranges.values() for s in place.shards}
        return tuple(s for s in self.shards if s.name not in open_names)

    def to_bytes(self) -> bytes:
        doc = {"version": CHECKPOINT_VERSION, "mode": self.mode, **_place_json(self),
               "ranges_done": list(self.ranges_done),
               "open_ranges": {str(r): _place_json(place) for r, place in sorted(self.open_ranges.items())},
               "range_start": None if self.range_start is None else _start_json(self.range_start)}
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_path(cls, path: Path) -> Checkpoint:
        try:
            doc = json.loads(path.read_bytes())
            version = doc.get("version")
        except (OSError, ValueError, AttributeError) as err:
            raise FormatError(f"{path}: unreadable checkpoint ({err!r}); rerun with --overwrite") from err
        if version not in _READABLE_VERSIONS:
            raise FormatError(f"{path}: checkpoint version {version!r}, but this dataprep reads versions "
                              f"{', '.join(map(str, _READABLE_VERSIONS))}: finish the run with the dataprep that "
                              "started it, or pass --overwrite to start again")
        try:
            ranges_done = tuple(int(r) for r in doc.get("ranges_done") or ())
            mode = doc.get("mode", MODE_RANGES if ranges_done else MODE_SEQUENTIAL)
            mode = _OLD_MODES.get(mode, mode)
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}")
            open_ranges = {int(r): _place_from(place) for r, place in (doc.get("open_ranges") or {}).items()}
            place = _place_from(doc)
            start = doc.get("range_start")
            return replace(place, ranges_done=ranges_done, mode=mode, open_ranges=open_ranges,
                           range_start=None if start is None else _start_from(start, place.shards))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise FormatError(f"{path}: unreadable checkpoint ({err!r}); rerun with --overwrite") from err


def add_totals(a: Totals, b: Totals) -> Totals:
    """The counts of two disjoint parts of a run together."""
    reasons = dict(a.rejected_by_reason)
    for reason, count in b.rejected_by_reason.items():
        reasons[reason] = reasons.get(reason, 0) + count
    return Totals(a.inputs_seen + b.inputs_seen, a.samples_kept + b.samples_kept, a.rejected + b.rejected, reasons)


def _all_shards(done: tuple[ShardInfo, ...], open_ranges: dict[int, Checkpoint]) -> tuple[ShardInfo, ...]:
    opened = sorted((s for place in open_ranges.values() for s in place.shards), key=lambda s: s.name)
    return (*done, *opened)


def _place_json(place: Checkpoint) -> dict[str, Any]:
    """The fields of a place in a plan (a run's, or one range's)."""
    return {"range": place.range, "next_shard": place.next_shard, "position": place.position, "skip": place.skip,
            "records_done": place.records_done, "rejects_bytes": place.rejects_bytes,
            "totals": place.totals.to_json(), "shards": [s.to_json() for s in place.shards], "carry": place.carry}


def _place_from(doc: dict[str, Any]) -> Checkpoint:
    return Checkpoint(range=int(doc["range"]), next_shard=int(doc["next_shard"]), position=int(doc["position"]),
                      skip=int(doc["skip"]), records_done=int(doc["records_done"]),
                      rejects_bytes=int(doc["rejects_bytes"]), totals=Totals.from_json(doc["totals"]),
                      shards=tuple(ShardInfo.from_json(s) for s in doc["shards"]), carry=dict(doc.get("carry") or {}))


def _start_json(start: Checkpoint) -> dict[str, Any]:
    """Where a sequential run's range began: its shards are the run's first ones, so only their count is kept."""
    return {**_place_json(replace(start, shards=())), "shards": len(start.shards)}


def _start_from(doc: dict[str, Any], shards: tuple[ShardInfo, ...]) -> Checkpoint:
    count = int(doc["shards"])
    if count > len(shards):
        raise ValueError(f"range_start counts {count} shards, the checkpoint names {len(shards)}")
    return replace(_place_from({**doc, "shards": []}), shards=shards[:count])


def state_dir(out: Path) -> Path:
    return out / STATE_DIR


def save_checkpoint(store: OutputStore, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint in OUT's state folder, atomically and durably."""
    store.write_bytes(CHECKPOINT_PATH, checkpoint.to_bytes())


def load_checkpoint(out: Path) -> Checkpoint | None:
    path = state_dir(out) / CHECKPOINT_NAME
    return Checkpoint.from_path(path) if path.exists() else None
