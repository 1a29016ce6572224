"""A bounded-memory, disk-backed, resumable set of digests for exact duplicate detection.

``SeenSet`` answers, for each (digest, plan position) in turn, "new" (and records it)
or "seen, first at position p". Memory stays bounded whatever the number of digests
(peak RSS growth 55 MiB for 2M digests with the default ``SeenLimits``, 32 MiB of it the
Bloom filter; a Python set of them grows by ~200 MiB); the digests live on disk.

Design: a small log-structured merge tree, because a B-tree of random keys (such as an
SQLite table) rewrites a random page per insert once it outgrows its cache (see the
measurements below):

- the newest digests are kept in a dict (the *memtable*, ``memtable_rows``), checked first;
- a full memtable is sorted and written as a *run*: an immutable file of fixed-size records
  (digest zero-padded to a multiple of 8 bytes, int64 position), sorted by digest, with an
  in-memory *fence* (the first 8 bytes of every ``block_rows``-th digest) so a lookup is
  one ``pread`` of one block per run;
- runs of similar size are merged ``merge_fanout`` at a time (size-tiered), in slices of
  the key space of about ``merge_rows`` records, so merging needs bounded memory too;
- a Bloom filter of fixed size (``bloom_bits_log2``) answers "definitely new" without
  touching disk; only its positives look in the runs (oldest, largest first). Its
  false-positive rate grows with the number of digests (2 bits per digest in 32 MiB:
  0.02% at 2M, 0.5% at 10M, 28% at 100M digests): the price of bounded memory.

Digests must be outputs of a cryptographic hash (uniform bytes, one length per store):
the Bloom filter and the merge slices rely on it. Non-uniform digests stay correct but
lose the speed and memory bounds.

Durability: ``commit()`` writes the memtable as a run, fsyncs the new runs, then writes
``seen.json`` (the list of runs; versioned) atomically. That file is the commit point:
reopening after a crash sees exactly the runs it names, and files it does not name are
removed. Uncommitted runs, truncations and merges are lost with the process. One process
owns a store at a time (an ``flock`` on ``lock``); a ``SeenSet`` is not thread-safe.

Measured (20M digests, and against SQLite): ``dataprep/plan/README.md``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from array import array
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from dataprep.errors import FormatError, UsageError
from dataprep.formats.durable import atomic_write_bytes, fsync_dir
from dataprep.plan.seen_runs import HEADER_BYTES, RUN_MAGIC, VERSION, Cursor, RecordLayout, Run, RunWriter, SeenLimits

FORMAT_NAME = "shardfeed.seen"
SEEN_MANIFEST_NAME = "seen.json"
LOCK_NAME = "lock"
_RUN_NAME = re.compile(r"run-(\d{8})\.bin")
_OURS = re.compile(r"run-\d{8}\.bin|seen\.json|\.seen\.json\.tmp|lock")
_MANIFEST_KEYS = ("format", "version", "digest_bytes", "next_run", "mark", "runs")


class SeenSet:
    """Exact set of digests (bytes, e.g. 16-32 bytes) with the plan position where each was first seen.

    ``open`` creates or reopens the store (a folder); ``first`` records or answers;
    ``commit`` makes the state durable; ``truncate`` forgets positions from a point on
    (what a resume from a checkpoint needs); ``close`` discards what was not committed.
    """

    def __init__(self, path: Path, limits: SeenLimits, lock_fd: int) -> None:
        """Use ``SeenSet.open``."""
        self.path, self.limits, self._lock_fd = path, limits, lock_fd
        self._layout: RecordLayout | None = None
        self._memtable: dict[bytes, int] = {}
        self._runs: list[Run] = []
        self._committed: set[str] = set()  # run files named by seen.json
        self._retired: list[Path] = []  # committed runs no longer in the state: removed after commit
        self._next_run = 0
        self._count = 0
        self.mark: int | None = None  # what the last commit(mark=...) recorded, e.g. its checkpoint position
        self._bloom = bytearray(1 << (limits.bloom_bits_log2 - 3))
        self._mask = (1 << limits.bloom_bits_log2) - 1
        self._pid = os.getpid()

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path | str, *, limits: SeenLimits | None = None) -> SeenSet:
        """Create the store at ``path`` (a folder), or reopen it as of its last ``commit()``."""
        path = Path(path)
        limits = limits or SeenLimits()
        if path.exists() and not path.is_dir():
            raise FormatError(f"{path}: expected a seen-set folder, found a file; hint: pass a new or empty folder")
        path.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(lock_fd)
            raise UsageError(f"{path}: seen-set store is already open (by this or another process); "
                             "hint: one run per OUT at a time, and close() before reopening") from err
        store = cls(path, limits, lock_fd)
        try:
            store._load()
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        """Release the store; what was not committed is discarded. Idempotent."""
        if self._lock_fd < 0:
            return
        for run in self._runs:
            run.close()
            if run.path.name not in self._committed:
                run.path.unlink(missing_ok=True)
        self._runs, self._memtable, self._layout = [], {}, None  # first() now takes the checking path
        os.close(self._lock_fd)
        self._lock_fd = -1

    def __enter__(self) -> SeenSet:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __len__(self) -> int:
        """Number of digests recorded (committed or not)."""
        return self._count + len(self._memtable)

    # -- the hot path ----------------------------------------------------------------------

    def first(self, digest: bytes, position: int) -> int | None:
        """Record ``digest`` first seen at ``position`` (int >= 0) and return None; if it was
        recorded before, return that earlier position and record nothing."""
        prior = self._memtable.get(digest)
        if prior is not None:
            return prior
        layout = self._layout
        if layout is None or type(digest) is not bytes or len(digest) != layout.digest_bytes or position < 0:
            layout = self._check(digest, position)
        h = int.from_bytes(digest[:8], "little")
        one, two, bloom = h & self._mask, (h >> 32) & self._mask, self._bloom
        if bloom[one >> 3] >> (one & 7) & 1 and bloom[two >> 3] >> (two & 7) & 1:
            prior = self._find(digest + layout.pad)
            if prior is not None:
                return prior
        else:
            bloom[one >> 3] |= 1 << (one & 7)
            bloom[two >> 3] |= 1 << (two & 7)
        self._memtable[digest] = position
        if len(self._memtable) >= self.limits.memtable_rows:
            self._flush()
        return None

    def _check(self, digest: object, position: object) -> RecordLayout:
        self._check_open()
        if type(digest) is not bytes:
            raise TypeError(f"digest must be bytes (got {digest!r} that is a {type(digest).__name__})")
        if type(position) is not int or position < 0:
            raise ValueError(f"position must be an int >= 0 (got {position!r})")
        if self._layout is None:
            if not 8 <= len(digest) <= 64:
                raise ValueError(f"digest must be 8 to 64 bytes (got {len(digest)}); "
                                 "hint: a BLAKE2b digest of 16 bytes")
            self._layout = RecordLayout(len(digest))
        elif len(digest) != self._layout.digest_bytes:
            raise ValueError(f"digest of {len(digest)} bytes for the seen-set store {self.path} of "
                             f"{self._layout.digest_bytes}-byte digests; hint: one digest size per store")
        return self._layout

    def _check_open(self) -> None:
        if self._lock_fd < 0:
            raise UsageError(f"{self.path}: seen-set store used after close(); hint: reopen it with SeenSet.open")

    def _find(self, key: bytes) -> int | None:
        prefix, block_rows = int.from_bytes(key[:8], "big"), self.limits.block_rows
        for run in self._runs:  # oldest first: the largest runs, where most earlier digests are
            found = run.find(key, prefix, block_rows)
            if found is not None:
                return found
        return None

    # -- truncate and commit ---------------------------------------------------------------

    def truncate(self, from_position: int) -> None:
        """Forget every digest recorded at a position >= ``from_position``. Idempotent; durable
        at the next ``commit()``."""
        self._check_open()
        if type(from_position) is not int or from_position < 0:
            raise ValueError(f"from_position must be an int >= 0 (got {from_position!r})")
        self._memtable = {d: p for d, p in self._memtable.items() if p < from_position}
        kept: list[Run] = []
        for run in self._runs:
            if run.max_position < from_position:
                kept.append(run)
                continue
            self._count -= run.count
            if run.min_position < from_position:
                writer = self._writer()
                for chunk in run.chunks(self.limits.merge_rows):
                    writer.write(chunk[chunk["position"] < from_position])
                rewritten = writer.finish()
                self._count += rewritten.count
                kept.append(rewritten)
            self._retire(run)
        self._runs = [run for run in kept if run.count]
        for run in kept:
            if not run.count:
                self._retire(run)

    def commit(self, *, mark: int | None = None) -> None:
        """Make everything recorded so far (and truncated) durable: after a crash, reopening
        sees exactly this state. ``mark`` (optional, e.g. the checkpoint's position) is stored
        with it and read back as ``self.mark``: a resume can check that this store is not
        behind its checkpoint (commit the store first, then write the checkpoint)."""
        if mark is not None and (type(mark) is not int or mark < 0):
            raise ValueError(f"mark must be an int >= 0 or None (got {mark!r})")
        self._check_open()
        if os.getpid() != self._pid:
            raise UsageError(f"{self.path}: seen-set store used in a forked process; "
                             "hint: open it in the process that writes")
        if self._memtable:
            self._flush()
        for run in self._runs:
            if run.path.name not in self._committed:
                os.fsync(run.fd)
        document = {"format": FORMAT_NAME, "version": VERSION,
                    "digest_bytes": self._layout.digest_bytes if self._layout else None,
                    "next_run": self._next_run, "mark": mark, "runs": [run.describe() for run in self._runs]}
        atomic_write_bytes(self.path / SEEN_MANIFEST_NAME, json.dumps(document, indent=1).encode() + b"\n")
        self.mark = mark
        self._committed = {run.path.name for run in self._runs}
        for path in self._retired:
            path.unlink(missing_ok=True)
        if self._retired:
            fsync_dir(self.path)
        self._retired = []

    def committed_files(self) -> list[str]:
        """The files of the last ``commit``, ``seen.json`` last: what a copy of the store needs, in order."""
        return [*sorted(self._committed), SEEN_MANIFEST_NAME]

    # -- runs: flush, merge, retire --------------------------------------------------------

    def _writer(self) -> RunWriter:
        assert self._layout is not None  # a run exists only after a digest fixed the layout
        path = self.path / f"run-{self._next_run:08d}.bin"
        self._next_run += 1
        return RunWriter(path, self._layout, self.limits.block_rows)

    def _flush(self) -> None:
        """Write the memtable as a new run, then merge runs of similar size."""
        layout, table = self._layout, self._memtable
        assert layout is not None
        records = np.empty(len(table), dtype=layout.records)
        keys = b"".join(table) if not layout.pad else layout.pad.join(table) + layout.pad
        records["key"] = np.frombuffer(keys, dtype=f"V{layout.key_bytes}")
        records["position"] = np.fromiter(table.values(), dtype=np.int64, count=len(table))
        writer = self._writer()
        writer.write(layout.sort(records))
        self._runs.append(writer.finish())
        self._count += len(table)
        self._memtable = {}
        fanout = self.limits.merge_fanout
        while len(self._runs) >= fanout and self._runs[-fanout].count <= fanout * self._runs[-1].count:
            self._merge(fanout)

    def _merge(self, fanout: int) -> None:
        """Replace the newest ``fanout`` runs by one, merged a slice of the key space at a time."""
        layout, inputs = self._layout, self._runs[-fanout:]
        assert layout is not None
        total = sum(run.count for run in inputs)
        slices = max(1, -(-total // self.limits.merge_rows))
        readers = [Cursor(run, layout, max(1, self.limits.merge_rows // fanout)) for run in inputs]
        writer = self._writer()
        for index in range(1, slices + 1):
            bound = None if index == slices else (index << 64) // slices
            parts = [reader.take_below(bound) for reader in readers]
            writer.write(layout.sort(np.concatenate(parts)))
        merged = writer.finish()
        self._runs[-fanout:] = [merged]
        for run in inputs:
            self._retire(run)

    def _retire(self, run: Run) -> None:
        run.close()
        if run.path.name in self._committed:
            self._retired.append(run.path)  # still named by seen.json until the next commit
        else:
            run.path.unlink(missing_ok=True)

    # -- reopening -------------------------------------------------------------------------

    def _load(self) -> None:
        manifest = self.path / SEEN_MANIFEST_NAME
        if not manifest.exists():
            foreign = sorted(p.name for p in self.path.iterdir() if not _OURS.fullmatch(p.name))
            if foreign:
                raise FormatError(f"{self.path}: not a seen-set store (no {SEEN_MANIFEST_NAME}, holds {foreign[:3]}); "
                                  "hint: pass a new or empty folder")
            self._remove_unnamed(set())
            return
        document = self._read_manifest(manifest)
        try:
            self._committed = {str(entry["file"]) for entry in document["runs"]}  # before any close() can see them
            self._next_run = int(document["next_run"])
            self.mark = document["mark"]
            if self.mark is not None and (type(self.mark) is not int or self.mark < 0):
                raise ValueError(f"mark must be an int >= 0 or null (got {self.mark!r})")
            digest_bytes = document["digest_bytes"]
            if digest_bytes is not None:
                if type(digest_bytes) is not int or not 8 <= digest_bytes <= 64:
                    raise ValueError(f"digest_bytes must be an int in [8, 64] (got {digest_bytes!r})")
                self._layout = RecordLayout(digest_bytes)
            for entry in document["runs"]:
                self._runs.append(self._open_run(entry))
                self._count += self._runs[-1].count
        except (KeyError, TypeError, ValueError) as err:
            raise FormatError(f"{manifest}: malformed seen-set manifest ({type(err).__name__}: {err}); "
                              "hint: the store is damaged, start over with a new one") from err
        self._remove_unnamed(self._committed)
        for run in self._runs:
            self._scan(run)

    def _read_manifest(self, manifest: Path) -> dict[str, Any]:
        try:
            document = json.loads(manifest.read_bytes())
            if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
                got = document.get("format") if isinstance(document, dict) else type(document).__name__
                raise FormatError(f"{manifest}: not a seen-set manifest (format {got!r}, expected {FORMAT_NAME!r}); "
                                  "hint: pass the folder SeenSet created, or a new one")
            if document.get("version") != VERSION:
                raise FormatError(f"{manifest}: seen-set version {document.get('version')!r} is not supported "
                                  f"(expected {VERSION}); hint: rerun from scratch with a new store")
            missing = [key for key in _MANIFEST_KEYS if key not in document]
            if missing:
                raise FormatError(f"{manifest}: seen-set manifest lacks {missing}; hint: the store is damaged")
            return document
        except (ValueError, UnicodeDecodeError) as err:
            raise FormatError(f"{manifest}: seen-set manifest is not valid JSON ({err}); "
                              "hint: the store is damaged, start over with a new one") from err

    def _open_run(self, entry: dict[str, Any]) -> Run:
        assert self._layout is not None
        path, layout = self.path / str(entry["file"]), self._layout
        if not _RUN_NAME.fullmatch(path.name):
            raise FormatError(f"{self.path / SEEN_MANIFEST_NAME}: run file name {path.name!r} is not ours")
        count = int(entry["count"])
        expected = (RUN_MAGIC + VERSION.to_bytes(4, "little") + layout.digest_bytes.to_bytes(4, "little")
                    + count.to_bytes(8, "little"))
        try:
            size = path.stat().st_size
            with open(path, "rb") as file:
                header = file.read(len(expected))
        except OSError as err:
            raise FormatError(f"{path}: run file named by {SEEN_MANIFEST_NAME} cannot be read ({err}); "
                              "hint: the store is damaged, start over with a new one") from err
        wanted = HEADER_BYTES + count * layout.record_bytes
        if header != expected or size != wanted:
            raise FormatError(f"{path}: run header or size does not match {SEEN_MANIFEST_NAME} (expected {count} "
                              f"records of {layout.digest_bytes}-byte digests, {wanted} bytes; got {size} bytes, "
                              f"header {header[:8]!r}); hint: the store is damaged, start over with a new one")
        return Run(path=path, layout=layout, count=count, min_position=int(entry["min_position"]),
                    max_position=int(entry["max_position"]), fence=array("Q"))

    def _scan(self, run: Run) -> None:
        """Build a reopened run's fence and set the Bloom bits of its digests (one sequential read)."""
        layout, rows, block_rows = run.layout, self.limits.merge_rows, self.limits.block_rows
        bits = np.frombuffer(self._bloom, dtype=np.uint8)
        mask = np.uint64(self._mask)
        for start, chunk in zip(range(0, run.count, rows), run.chunks(rows)):
            run.fence.extend(layout.prefixes(chunk[(-start) % block_rows::block_rows]).tolist())
            h = chunk.view(layout.head)["h"].astype(np.uint64)
            for index in (h & mask, (h >> np.uint64(32)) & mask):
                np.bitwise_or.at(bits, (index >> np.uint64(3)).astype(np.intp),
                                 np.left_shift(np.uint8(1), (index & np.uint64(7)).astype(np.uint8)))

    def _remove_unnamed(self, named: set[str]) -> None:
        """Delete run files a crash left behind (written, never committed)."""
        stale = [p for p in self.path.iterdir() if _RUN_NAME.fullmatch(p.name) and p.name not in named]
        for path in stale:
            path.unlink()
        if stale:
            fsync_dir(self.path)
