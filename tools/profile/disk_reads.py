"""Timed reads of a shard directory and of a raw tree: the measurement behind ``tools.profile.disk``.

``measure_disk`` runs, per source, a sequential and a random pass, each cold (page cache
dropped first) then warm, and returns a ``DiskReport``; ``tools.profile.loader`` calls it
when reads dominate. See ``tools.profile.disk`` for the method.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.errors import FormatError
from dataprep.formats.tar.index import ShardIndex, read_index
from dataprep.formats.manifest import read_manifest
from tools.common.pagecache import DeviceInfo, device_of, drop_cache, evenly_sampled, files_under, resident_fraction
from tools.common.report import Progress, ToolError

SHARDS = "shards"
RAW = "raw"
MIB = float(1 << 20)
_MEMORY_FS = frozenset({"tmpfs", "ramfs", "devtmpfs"})


class Pattern(enum.StrEnum):
    SEQUENTIAL = "sequential"
    RANDOM = "random"


class Cache(enum.StrEnum):
    COLD = "cold"
    WARM = "warm"


@dataclass(frozen=True)
class PassResult:
    """One timed pass: ``bytes`` read in ``seconds`` (wall clock) from ``files`` files.

    resident_before: fraction of the files' pages in the page cache just before the pass
    (0..1, from mincore), None when not measurable.
    """

    source: str
    pattern: str
    cache: str
    files: int
    samples: int
    bytes: int
    seconds: float
    resident_before: float | None

    @property
    def read_mib_s(self) -> float:
        return self.bytes / MIB / self.seconds if self.seconds > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "read_mib_s": self.read_mib_s, "samples_per_s": self.samples_per_s}


@dataclass(frozen=True)
class DiskReport:
    """What ``measure_disk`` found. Sizes in bytes; ``passes`` in the order they ran.

    num_samples/shard_bytes: totals over the manifest's shards; raw_files/raw_bytes: the raw
    tree (0 without one); random_samples: samples asked for (fewer read if the data is
    smaller); notes: caveats the numbers need, one sentence each.
    """

    shard_dir: str
    device: DeviceInfo
    raw_dir: str | None
    raw_device: DeviceInfo | None
    num_shards: int
    num_samples: int
    shard_bytes: int
    raw_files: int
    raw_bytes: int
    block_size: int
    random_samples: int
    seed: int
    cold: bool
    passes: tuple[PassResult, ...]
    notes: tuple[str, ...]

    def find(self, source: str, pattern: str, cache: str) -> PassResult | None:
        return next((p for p in self.passes if (p.source, p.pattern, p.cache) == (source, pattern, cache)), None)

    def ratios(self) -> dict[str, dict[str, float]]:
        """"<pattern>_<cache>" -> shards/raw ratio of read_mib_s and samples_per_s (passes in both)."""
        out: dict[str, dict[str, float]] = {}
        for mine in (p for p in self.passes if p.source == SHARDS):
            theirs = self.find(RAW, mine.pattern, mine.cache)
            if theirs is not None and theirs.read_mib_s > 0 and theirs.samples_per_s > 0:
                out[f"{mine.pattern}_{mine.cache}"] = {
                    "read_mib_s": mine.read_mib_s / theirs.read_mib_s,
                    "samples_per_s": mine.samples_per_s / theirs.samples_per_s,
                }
        return out

    def to_json(self) -> dict[str, Any]:
        doc = {k: v for k, v in asdict(self).items() if k not in ("passes", "notes")}
        return {**doc, "passes": [p.to_json() for p in self.passes], "ratios": self.ratios(), "notes": list(self.notes)}



def pick_samples(counts: Sequence[int], n: int, seed: int) -> np.ndarray:
    """int64 [k, 2] of (shard, sample) rows: ``k = min(n, sum(counts))`` distinct samples in random order.

    Pure in (counts, n, seed): the same call picks the same samples in the same order.
    """
    starts = np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))])
    total = int(starts[-1])
    pick_rng = np.random.default_rng(seed)
    chosen = pick_rng.choice(total, size=min(n, total), replace=False).astype(np.int64)
    shard = np.searchsorted(starts, chosen, side="right") - 1
    return np.stack([shard, chosen - starts[shard]], axis=1).astype(np.int64)


def iter_sample_reads(shards: Sequence[tuple[Path, ShardIndex]], picks: np.ndarray) -> Iterator[tuple[int, int, bytes]]:
    """Yield (shard, sample, bytes) for each pick, one ``os.pread`` of the sample's byte range.

    The bytes run from the sample's first tar header to the end of its last member, as the
    index records. Raises ``FormatError`` naming shard, key and offset on a short read.
    """
    fds: dict[int, int] = {}
    try:
        for shard_i, sample_i in picks.tolist():
            path, index = shards[shard_i]
            if shard_i not in fds:
                fds[shard_i] = os.open(path, os.O_RDONLY)
            offset, size = int(index.sample_offset[sample_i]), int(index.sample_size[sample_i])
            data = os.pread(fds[shard_i], size, offset)
            if len(data) != size:
                raise FormatError(
                    f"{path}: sample {index.key(sample_i)!r} at byte offset {offset}: read {len(data)} of {size} "
                    "bytes (shard truncated or index stale?)"
                )
            yield shard_i, sample_i, data
    finally:
        for fd in fds.values():
            os.close(fd)


def _read_files(paths: Sequence[Path], buf: bytearray, progress: Progress) -> int:
    """Open, read to the end in ``len(buf)`` reads, close each file; returns bytes read."""
    view, total = memoryview(buf), 0
    for done, path in enumerate(paths):
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(view):
                total += n
        progress.update(done + 1)
    return total


@dataclass(frozen=True)
class _Source:
    """What one source's passes read: files in sequential order, and a random-pass reader."""

    name: str
    files: tuple[Path, ...]
    samples: int  # samples in all ``files`` (a raw file is one sample)
    bytes: int  # size of all ``files``
    random_files: tuple[Path, ...]  # the files the random pass touches (cache dropped for these)
    random_read: Callable[[Progress], tuple[int, int]]  # -> (samples, bytes) read


def _shard_source(shard_dir: Path, random_samples: int, seed: int) -> tuple[_Source, list[str]]:
    manifest = read_manifest(shard_dir)
    indexed: list[tuple[Path, ShardIndex]] = []
    for info in manifest.shards:
        path = shard_dir / info.name
        if not path.is_file():
            raise FormatError(f"{path}: shard listed in {shard_dir / 'manifest.json'} is missing")
        if info.index is not None:
            index = read_index(shard_dir / info.index)
            if index.shard_bytes != path.stat().st_size:
                raise FormatError(f"{shard_dir / info.index}: indexes {index.shard_bytes} bytes but {path} has "
                                  f"{path.stat().st_size} (stale index)")
            indexed.append((path, index))
    notes = []
    if len(indexed) < len(manifest.shards):
        notes.append(f"{len(manifest.shards) - len(indexed)} shards have no index sidecar (Parquet?): random reads "
                     "skip them.")
    picks = pick_samples([ix.num_samples for _, ix in indexed], random_samples, seed)

    def random_read(progress: Progress) -> tuple[int, int]:
        total = 0
        for done, (_, _, data) in enumerate(iter_sample_reads(indexed, picks)):
            total += len(data)
            progress.update(done + 1)
        return len(picks), total

    files = tuple(shard_dir / s.name for s in manifest.shards)
    touched = tuple(indexed[i][0] for i in sorted(set(picks[:, 0].tolist())))
    size = sum(p.stat().st_size for p in files)
    return _Source(name=SHARDS, files=files, samples=manifest.num_samples, bytes=size, random_files=touched,
                   random_read=random_read), notes


def _raw_source(raw_dir: Path, random_samples: int, seed: int, block_size: int) -> _Source:
    files = files_under(raw_dir)  # "sequential" is the order a naive loader lists files
    if not files:
        raise ToolError(f"{raw_dir}: no files in the raw tree")
    shuffle_rng = np.random.default_rng(seed)
    chosen = tuple(files[i] for i in shuffle_rng.permutation(len(files))[:random_samples])
    buf = bytearray(block_size)

    def random_read(progress: Progress) -> tuple[int, int]:
        return len(chosen), _read_files(chosen, buf, progress)

    return _Source(name=RAW, files=tuple(files), samples=len(files), bytes=sum(p.stat().st_size for p in files),
                   random_files=chosen, random_read=random_read)


def _run_passes(source: _Source, *, pattern: Pattern, cold: bool, block_size: int) -> list[PassResult]:
    """Time the cold pass (after dropping the cache) then the warm one; an untimed warm-up without cold."""
    files = source.files if pattern is Pattern.SEQUENTIAL else source.random_files
    if not files:
        return []
    probe = evenly_sampled(files)
    buf = bytearray(block_size)

    def read(progress: Progress) -> tuple[int, int]:
        if pattern is Pattern.SEQUENTIAL:
            return source.samples, _read_files(files, buf, progress)
        return source.random_read(progress)

    results = []
    for cache in (Cache.COLD, Cache.WARM) if cold else (None, Cache.WARM):
        if cache is Cache.COLD:
            drop_cache(files)
        resident = resident_fraction(probe)
        total = len(files) if pattern is Pattern.SEQUENTIAL else None
        with Progress(f"{source.name} {pattern} {cache or 'warm-up'}", total) as progress:
            start = time.perf_counter()
            samples, nbytes = read(progress)
            seconds = time.perf_counter() - start
        if cache is not None:
            results.append(PassResult(source=source.name, pattern=pattern, cache=cache, files=len(files),
                                      samples=samples, bytes=nbytes, seconds=seconds, resident_before=resident))
    return results


def measure_disk(
    shard_dir: str | os.PathLike[str],
    *,
    raw_dir: str | os.PathLike[str] | None = None,
    random_samples: int = 1000,
    cold: bool = True,
    seed: int = 0,
    block_size: int = 1 << 20,
) -> DiskReport:
    """Time sequential and random reads of the shards in ``shard_dir`` (and of ``raw_dir``).

    random_samples: samples (raw: files) per random pass, 0 to skip random passes.
    block_size: bytes per read() of sequential passes. Raises ``FormatError`` for a bad
    manifest or index, ``ToolError`` for bad arguments.
    """
    for name, value, least in (("random_samples", random_samples, 0), ("block_size", block_size, 1), ("seed", seed, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            kind = "a positive" if least else "a non-negative"
            raise ToolError(f"{name!r} must be {kind} int (got {value!r} that is a {type(value).__name__})")
    shards, notes = _shard_source(Path(shard_dir), random_samples, seed)
    raw = _raw_source(Path(raw_dir), random_samples, seed, block_size) if raw_dir is not None else None
    patterns = (Pattern.SEQUENTIAL, Pattern.RANDOM) if random_samples > 0 else (Pattern.SEQUENTIAL,)
    passes = tuple(
        result
        for source in filter(None, (shards, raw))
        for pattern in patterns
        for result in _run_passes(source, pattern=pattern, cold=cold, block_size=block_size)
    )
    report = DiskReport(
        shard_dir=str(shard_dir), device=device_of(shard_dir),
        raw_dir=None if raw_dir is None else str(raw_dir), raw_device=None if raw_dir is None else device_of(raw_dir),
        num_shards=len(shards.files), num_samples=shards.samples, shard_bytes=shards.bytes,
        raw_files=raw.samples if raw else 0, raw_bytes=raw.bytes if raw else 0,
        block_size=block_size, random_samples=random_samples, seed=seed, cold=cold, passes=passes, notes=(),
    )
    return replace(report, notes=tuple(dict.fromkeys(notes + _caveats(report))))  # dedupe, keep order


def _caveats(report: DiskReport) -> list[str]:
    notes = []
    if report.cold:
        notes.append(
            "cold: pages dropped with fdatasync + posix_fadvise(DONTNEED); pages mapped by other processes stay "
            "(see 'cached %': of the files the pass touches, before it), and caches below the OS (drive, controller, "
            "a VM host) are not dropped."
        )
    for dev in filter(None, (report.device, report.raw_device)):
        if dev.fs_type in _MEMORY_FS:
            notes.append(f"{dev.path} is on {dev.fs_type}: the data lives in memory, so cold reads are warm reads.")
        if dev.rotational and (dev.block_device or "").startswith(("vd", "xvd")):
            notes.append(f"{dev.block_device} is a virtual disk: its rotational flag says nothing about the hardware.")
    warm = [p for p in report.passes if p.pattern == Pattern.SEQUENTIAL and p.cache == Cache.WARM]
    for p in warm:
        if p.resident_before is not None and p.resident_before < 0.99:
            notes.append(
                f"{p.source}: only {p.resident_before:.0%} of the data was cached before the warm pass "
                "(larger than free RAM?): warm numbers are partly disk numbers."
            )
    if report.random_samples > report.num_samples:
        notes.append(f"asked for {report.random_samples} random samples; the shards hold {report.num_samples}: "
                     "each read once.")
    return notes
