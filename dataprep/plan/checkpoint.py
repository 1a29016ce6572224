"""The checkpoint: how far a run got in its plan, rewritten atomically after every completed shard.

Checkpoint document (``OUT/.dataprep/checkpoint.json``), version 3::

    {"version": 3, "mode": "sequential", "range": 1, "next_shard": 3, "position": 1234, "skip": 17,
     "records_done": 98765, "rejects_bytes": 5678, "totals": {...}, "shards": [ShardInfo json, ...],
     "carry": {...}, "ranges_done": [0, 2, ...], "open_ranges": {"5": {a range's place}, ...}}

Resuming means skipping to a place in the saved plan, never replaying: ``position`` is
the plan position of the first unit not wholly final and ``skip`` how many of its raw
records are final (in a completed shard or in the rejects file); ``range`` and
``next_shard`` say which range is being written and the number of its next shard;
``records_done`` counts final raw records over the whole plan (the position of the next
one in the duplicate set); ``carry`` is the packer's carry-over (``dataprep.engines.handlers``).

``mode`` says which writer made the state, and so who may resume it:

- ``sequential`` (``--engine local --workers 1``): the ranges one after another, in plan
  order, the fields above; rejects in ``rejects.partial.jsonl``, duplicates in the ``seen`` set.
- ``ranges`` (``--engine local``, writer processes, ``dataprep.engines.local_writers``) and
  ``ray`` (``--engine ray``, ``dataprep.engines.range_driver``): whole ranges written in any
  order, each range's rejects in a file of its own (``.dataprep/ranges/``). ``ranges_done``:
  the ranges complete; ``totals`` counts them. ``open_ranges`` (``ranges`` only): range ->
  its place, a checkpoint of that range alone (``range``, ``next_shard``, ``position``,
  ``skip``; ``records_done`` counts the range's raw records, ``rejects_bytes`` its rejects
  file, ``totals`` and ``shards`` its own), so a killed run loses at most the shard each
  writer had open. ``shards`` lists every completed shard: those of the ranges done, then
  (sorted by name) those of the open ranges, which is what a resume keeps in OUT.
- ``""``: nothing written yet (the checkpoint saved with the plan).

Version 2 documents (before ``mode`` and ``open_ranges``) are read as ``ray`` when they
record ranges done, else as ``sequential``.
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
CHECKPOINT_VERSION = 3
_READABLE_VERSIONS = (2, CHECKPOINT_VERSION)
MODE_SEQUENTIAL, MODE_RANGES, MODE_RAY = "sequential", "ranges", "ray"
MODES = ("", MODE_SEQUENTIAL, MODE_RANGES, MODE_RAY)


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

    def with_range_done(self, index: int, totals: Totals, shards: tuple[ShardInfo, ...],
                        mode: str = MODE_RANGES) -> Checkpoint:
        """This run with range ``index`` complete (``totals`` and ``shards`` its own); idempotent."""
        if index in self.ranges_done:
            return self
        open_ranges = {r: place for r, place in self.open_ranges.items() if r != index}
        done = tuple(sorted((*self._done_shards(), *shards), key=lambda s: s.name))
        return replace(self, mode=mode, totals=add_totals(self.totals, totals), open_ranges=open_ranges,
                       shards=_all_shards(done, open_ranges), ranges_done=tuple(sorted((*self.ranges_done, index))))

    def _done_shards(self) -> tuple[ShardInfo, ...]:
        """The shards of the ranges done (``shards`` without those of the open ranges)."""
        open_names = {s.name for place in self.open_ranges.values() for s in place.shards}
        return tuple(s for s in self.shards if s.name not in open_names)

    def to_bytes(self) -> bytes:
        doc = {"version": CHECKPOINT_VERSION, "mode": self.mode, **_place_json(self),
               "ranges_done": list(self.ranges_done),
               "open_ranges": {str(r): _place_json(place) for r, place in sorted(self.open_ranges.items())}}
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_path(cls, path: Path) -> Checkpoint:
        try:
            doc = json.loads(path.read_bytes())
            if doc.get("version") not in _READABLE_VERSIONS:
                raise FormatError(f"{path}: checkpoint version {doc.get('version')!r} not supported "
                                  f"(expected {CHECKPOINT_VERSION}); rerun with --overwrite")
            ranges_done = tuple(int(r) for r in doc.get("ranges_done") or ())
            mode = doc.get("mode", MODE_RAY if ranges_done else MODE_SEQUENTIAL)
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}")
            open_ranges = {int(r): _place_from(place) for r, place in (doc.get("open_ranges") or {}).items()}
            return replace(_place_from(doc), ranges_done=ranges_done, mode=mode, open_ranges=open_ranges)
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


def state_dir(out: Path) -> Path:
    return out / STATE_DIR


def save_checkpoint(store: OutputStore, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint in OUT's state folder, atomically and durably."""
    store.write_bytes(CHECKPOINT_PATH, checkpoint.to_bytes())


def load_checkpoint(out: Path) -> Checkpoint | None:
    path = state_dir(out) / CHECKPOINT_NAME
    return Checkpoint.from_path(path) if path.exists() else None
