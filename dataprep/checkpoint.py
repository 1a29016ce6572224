"""Resumable runs: the state directory ``OUT/.dataprep/`` and what OUT may contain.

While a run is in progress OUT holds the completed shards (final names), at most one
shard under a temporary name, ``.dataprep/checkpoint.json`` (rewritten atomically after
every completed shard) and ``.dataprep/rejects.partial.jsonl``. A finished run removes
``.dataprep/`` after writing ``manifest.json``, so a finished OUT contains only shards,
their index sidecars, ``rejects.jsonl`` and the manifest.

Checkpoint document, version 1::

    {"version": 1, "fingerprint": {...}, "next_shard": 3, "records_done": 1234,
     "rejects_bytes": 5678, "totals": {...}, "shards": [ShardInfo json, ...]}

``records_done`` counts inputs of the deterministic input order whose fate is final:
in a completed shard or in the rejects file.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataprep.errors import FormatError, OutputExistsError
from dataprep.fsutil import atomic_write_bytes
from dataprep.manifest import MANIFEST_NAME, Manifest, ShardInfo, Totals, read_manifest

STATE_DIR = ".dataprep"
CHECKPOINT_NAME = "checkpoint.json"
PARTIAL_REJECTS_NAME = "rejects.partial.jsonl"
CHECKPOINT_VERSION = 1


@dataclass(frozen=True)
class Checkpoint:
    """Progress of a run, as of its last completed shard."""

    fingerprint: dict[str, Any]
    next_shard: int = 0
    records_done: int = 0
    rejects_bytes: int = 0
    totals: Totals = field(default_factory=Totals)
    shards: tuple[ShardInfo, ...] = ()

    def to_bytes(self) -> bytes:
        doc = {
            "version": CHECKPOINT_VERSION,
            "fingerprint": self.fingerprint,
            "next_shard": self.next_shard,
            "records_done": self.records_done,
            "rejects_bytes": self.rejects_bytes,
            "totals": self.totals.to_json(),
            "shards": [s.to_json() for s in self.shards],
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_path(cls, path: Path) -> Checkpoint:
        try:
            doc = json.loads(path.read_bytes())
            if doc.get("version") != CHECKPOINT_VERSION:
                raise FormatError(f"{path}: checkpoint version {doc.get('version')!r} not supported")
            return cls(
                fingerprint=doc["fingerprint"],
                next_shard=int(doc["next_shard"]),
                records_done=int(doc["records_done"]),
                rejects_bytes=int(doc["rejects_bytes"]),
                totals=Totals.from_json(doc["totals"]),
                shards=tuple(ShardInfo.from_json(s) for s in doc["shards"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise FormatError(f"{path}: unreadable checkpoint ({err!r}); rerun with --overwrite") from err


def state_dir(out: Path) -> Path:
    return out / STATE_DIR


def save_checkpoint(out: Path, checkpoint: Checkpoint) -> None:
    atomic_write_bytes(state_dir(out) / CHECKPOINT_NAME, checkpoint.to_bytes())


@dataclass(frozen=True)
class OutputState:
    """What ``prepare_output`` found: a finished run, a run to resume, or a fresh start."""

    finished: Manifest | None = None
    resume: Checkpoint | None = None


def prepare_output(out: Path, fingerprint: dict[str, Any], *, overwrite: bool) -> OutputState:
    """Decide between a fresh run, resuming, or refusing, and tidy OUT accordingly.

    Raises ``OutputExistsError`` when OUT holds anything from a different command and
    ``overwrite`` is false. With ``overwrite``, OUT's contents are removed first.
    """
    if overwrite and out.exists():
        _empty_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint_path = state_dir(out) / CHECKPOINT_NAME
    if (out / MANIFEST_NAME).exists():
        manifest = read_manifest(out)
        if manifest.options == fingerprint:
            return OutputState(finished=manifest)
        raise OutputExistsError(_refusal(out, "holds the finished output of a different command"))
    if checkpoint_path.exists():
        checkpoint = Checkpoint.from_path(checkpoint_path)
        if checkpoint.fingerprint != fingerprint:
            raise OutputExistsError(_refusal(out, "holds an unfinished run of a different command"))
        _remove_beyond(out, checkpoint)
        return OutputState(resume=checkpoint)
    leftovers = [p.name for p in out.iterdir() if p.name != STATE_DIR]
    if leftovers:
        shown = ", ".join(sorted(leftovers)[:5]) + (" ..." if len(leftovers) > 5 else "")
        raise OutputExistsError(_refusal(out, f"is not empty ({shown})"))
    state_dir(out).mkdir(exist_ok=True)
    (state_dir(out) / PARTIAL_REJECTS_NAME).unlink(missing_ok=True)
    return OutputState()


def _refusal(out: Path, why: str) -> str:
    return f"{out} {why}; choose another OUT or pass --overwrite to replace its contents"


def _remove_beyond(out: Path, checkpoint: Checkpoint) -> None:
    """Delete temporary files and shards a killed run wrote after its last checkpoint."""
    keep = {s.name for s in checkpoint.shards} | {s.index for s in checkpoint.shards if s.index}
    for path in out.iterdir():
        if path.name != STATE_DIR and path.name not in keep:
            path.unlink()
    partial = state_dir(out) / PARTIAL_REJECTS_NAME
    with open(partial, "ab") as f:
        f.truncate(checkpoint.rejects_bytes)


def _empty_dir(out: Path) -> None:
    if not out.is_dir():
        raise OutputExistsError(f"{out} exists and is not a directory")
    for path in out.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def finish(out: Path) -> None:
    """Remove the state directory of a finished run (after the manifest is written)."""
    shutil.rmtree(state_dir(out), ignore_errors=True)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
