"""The checkpoint: how far a run got in its plan, rewritten atomically after every completed shard.

Checkpoint document (``OUT/.dataprep/checkpoint.json``), version 2::

    {"version": 2, "range": 1, "next_shard": 3, "position": 1234, "skip": 17,
     "records_done": 98765, "rejects_bytes": 5678, "totals": {...},
     "shards": [ShardInfo json, ...], "carry": {...}, "ranges_done": [0, 2, ...]}

Resuming means skipping to a place in the saved plan, never replaying: ``position`` is
the plan position of the first unit not wholly final and ``skip`` how many of its raw
records are final (in a completed shard or in the rejects file); ``range`` and
``next_shard`` say which range is being written and the number of its next shard;
``records_done`` counts final raw records over the whole plan (the position of the next
one in the duplicate set); ``carry`` is the packer's carry-over (``dataprep.engines.handlers``).

A range-parallel run (``--engine ray``, ``dataprep.engines.range_driver``) writes whole ranges in any
order and records each one completed in ``ranges_done``, its shards in ``shards`` (sorted
by name, i.e. by range) and its counts in ``totals``; ``range``, ``position`` and ``skip``
stay 0 (a range is never resumed half-way; its rejects are in ``.dataprep/ranges/``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
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
CHECKPOINT_VERSION = 2


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

    @property
    def is_started(self) -> bool:
        """Whether the sequential write loop has made progress (anything past the plan's start)."""
        progressed = self.range or self.position or self.skip or self.records_done or self.shards
        return bool(progressed) and not self.ranges_done

    def to_bytes(self) -> bytes:
        doc = {
            "version": CHECKPOINT_VERSION,
            "range": self.range,
            "next_shard": self.next_shard,
            "position": self.position,
            "skip": self.skip,
            "records_done": self.records_done,
            "rejects_bytes": self.rejects_bytes,
            "totals": self.totals.to_json(),
            "shards": [s.to_json() for s in self.shards],
            "carry": self.carry,
            "ranges_done": list(self.ranges_done),
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_path(cls, path: Path) -> Checkpoint:
        try:
            doc = json.loads(path.read_bytes())
            if doc.get("version") != CHECKPOINT_VERSION:
                raise FormatError(f"{path}: checkpoint version {doc.get('version')!r} not supported "
                                  f"(expected {CHECKPOINT_VERSION}); rerun with --overwrite")
            return cls(
                range=int(doc["range"]),
                next_shard=int(doc["next_shard"]),
                position=int(doc["position"]),
                skip=int(doc["skip"]),
                records_done=int(doc["records_done"]),
                rejects_bytes=int(doc["rejects_bytes"]),
                totals=Totals.from_json(doc["totals"]),
                shards=tuple(ShardInfo.from_json(s) for s in doc["shards"]),
                carry=dict(doc.get("carry") or {}),
                ranges_done=tuple(int(r) for r in doc.get("ranges_done") or ()),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise FormatError(f"{path}: unreadable checkpoint ({err!r}); rerun with --overwrite") from err


def state_dir(out: Path) -> Path:
    return out / STATE_DIR


def save_checkpoint(store: OutputStore, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint in OUT's state folder, atomically and durably."""
    store.write_bytes(CHECKPOINT_PATH, checkpoint.to_bytes())


def load_checkpoint(out: Path) -> Checkpoint | None:
    path = state_dir(out) / CHECKPOINT_NAME
    return Checkpoint.from_path(path) if path.exists() else None
