"""What every shard writer shares: the ``ShardWriter`` protocol, rollover limits, shard names, the skeleton.

A writer turns a stream of ``CleanRecord`` into numbered shards. A shard is written
under a temporary name (``fsutil.tmp_path_for``) and becomes visible only by an atomic
rename once complete; ``write`` and ``close`` return the shards they completed.
``RollingShardWriter`` is that loop for writers that stream each sample to the shard's
file as it comes (tar, tokens): one shard open at a time, rolled over by ``ShardLimits``,
aborted (its temporary files removed) when writing or completing it fails.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Generic, Protocol, TypeVar, runtime_checkable

from dataprep.errors import UsageError
from dataprep.formats.durable import start_writeback, tmp_path_for
from dataprep.formats.manifest import ShardInfo
from dataprep.formats.samples import CleanRecord, EncodedSample
from dataprep.errors import require_int, bad_argument

log = logging.getLogger(__name__)

DEFAULT_MAX_SHARD_BYTES = 256 * 2**20
# Start the disk writeback of a growing shard every this many bytes, so that closing it
# (fsync) does not stall the writer while the whole shard goes to disk.
WRITEBACK_BYTES = 8 * 2**20

_W = TypeVar("_W", bound="WriterLifecycle")


@runtime_checkable
class ShardWriter(Protocol):
    """Writes clean records into numbered shards in one output directory."""

    def write(self, record: CleanRecord | EncodedSample) -> list[ShardInfo]:
        """Add one sample; returns the shards this call completed (0 or 1), already final."""
        ...

    def close(self) -> list[ShardInfo]:
        """Complete the open shard, if it holds samples; returns it (0 or 1 shards)."""
        ...

    def abort(self) -> None:
        """Remove the temporary file of the open shard; completed shards stay."""
        ...

    def __enter__(self) -> ShardWriter: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


@dataclass(frozen=True)
class ShardLimits:
    """When a shard is full. At least one limit must be set.

    max_shard_bytes: a sample that would take the shard past this many bytes opens a
        new shard; a single sample larger than the limit goes alone into its own shard.
    max_samples_per_shard: a shard is complete as soon as it holds this many samples.
    """

    max_shard_bytes: int | None = DEFAULT_MAX_SHARD_BYTES
    max_samples_per_shard: int | None = None

    def __post_init__(self) -> None:
        require_int("max_shard_bytes", self.max_shard_bytes, minimum=1, optional=True, error=ValueError)
        require_int("max_samples_per_shard", self.max_samples_per_shard, minimum=1, optional=True, error=ValueError)
        if self.max_shard_bytes is None and self.max_samples_per_shard is None:
            raise ValueError("at least one of 'max_shard_bytes' and 'max_samples_per_shard' must be set (got None for "
                             "both)")

    def is_overflow(self, shard_bytes: int, num_samples: int, sample_bytes: int) -> bool:
        """True if a sample of ``sample_bytes`` must open a new shard instead of joining this one.

        ``shard_bytes`` counts everything the shard would hold when closed with its current
        ``num_samples`` samples (trailers included). An empty shard always takes the sample.
        """
        if num_samples == 0 or self.max_shard_bytes is None:
            return False
        return shard_bytes + sample_bytes > self.max_shard_bytes

    def is_full(self, num_samples: int) -> bool:
        """True once a shard holds ``max_samples_per_shard`` samples."""
        return self.max_samples_per_shard is not None and num_samples >= self.max_samples_per_shard


@dataclass(frozen=True)
class ShardNaming:
    """Shard file names ``f"{prefix}-{n:06d}{suffix}"`` in ``out_dir``, numbered from ``start_shard``."""

    out_dir: Path
    prefix: str = "shard"
    suffix: str = ".tar"
    start_shard: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or not self.prefix or "/" in self.prefix or self.prefix.startswith("."):
            raise bad_argument("prefix", "a non-empty str without '/' or a leading '.'", self.prefix, ValueError)
        require_int("start_shard", self.start_shard, minimum=0, error=ValueError)
        if not Path(self.out_dir).is_dir():
            raise UsageError(f"{self.out_dir}: output directory does not exist or is not a directory (create it first)")

    def name(self, n: int) -> str:
        """The file name of shard number ``n`` (absolute shard number, not an offset)."""
        return f"{self.prefix}-{n:06d}{self.suffix}"

    def path(self, n: int) -> Path:
        return Path(self.out_dir) / self.name(n)


def remove_quietly(path: Path) -> None:
    """Delete ``path`` if it exists; failures are logged, not raised (used while cleaning up)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        log.warning("could not remove temporary file %s: %s", path, err)


class WriterLifecycle:
    """Context-manager behaviour shared by the writers: a clean exit closes, an exception aborts.

    Subclasses provide ``_finish_open`` and ``abort``; ``close`` completes the open shard.
    On a clean exit the shard completed by
    ``close`` is not returned to anyone, so it is kept in ``shards`` (every completed shard).
    """

    _is_finished: bool
    _open: object | None

    def close(self) -> list[ShardInfo]:
        """Complete the open shard if it holds samples; further writes are refused."""
        if self._is_finished:
            return []
        self._is_finished = True
        return [self._finish_open()] if self._open is not None else []

    def _finish_open(self) -> ShardInfo:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self: _W) -> _W:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


@dataclass
class OpenShardFile:
    """The file of the shard being written, under its temporary name: bytes so far, their sha256, writeback.

    Subclasses add what their format keeps per sample and say how many samples the shard
    holds (``num_samples``) and how large it would be closed now (``closed_bytes``).
    """

    name: str
    final: Path
    tmp: Path
    fileobj: BinaryIO
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)
    position: int = 0  # bytes written so far
    written_back: int = 0  # bytes whose writeback to disk has been started

    @property
    def num_samples(self) -> int:
        raise NotImplementedError

    @property
    def closed_bytes(self) -> int:
        raise NotImplementedError

    def put(self, chunk: bytes) -> None:
        """Append ``chunk`` to the file and the digest."""
        self.fileobj.write(chunk)
        self.digest.update(chunk)
        self.position += len(chunk)
        if self.position - self.written_back >= WRITEBACK_BYTES:
            self.fileobj.flush()
            start_writeback(self.fileobj.fileno(), self.written_back, self.position - self.written_back)
            self.written_back = self.position


_S = TypeVar("_S", bound=OpenShardFile)


class RollingShardWriter(WriterLifecycle, Generic[_S]):
    """One shard open at a time, streamed to its temporary file, rolled over by ``ShardLimits`` (module docstring).

    Subclasses make the open shard (``_new_shard``), add a sample to it (the ``add`` given to
    ``_put``), complete it (``_commit``: fsync, rename, its ``ShardInfo``) and name what a
    failed shard leaves besides its temporary file (``_remove_temporaries``). Not thread-safe.
    """

    def __init__(self, out_dir: Path, *, suffix: str, prefix: str, max_shard_bytes: int | None,
                 max_samples_per_shard: int | None, start_shard: int) -> None:
        self._limits = ShardLimits(max_shard_bytes, max_samples_per_shard)
        self._naming = ShardNaming(Path(out_dir), prefix, suffix, start_shard)
        self._next_shard = start_shard
        self._open: _S | None = None
        self._done: list[ShardInfo] = []
        self._is_finished = False

    @property
    def shards(self) -> tuple[ShardInfo, ...]:
        """Every shard completed so far, in order."""
        return tuple(self._done)

    def _check_writable(self) -> None:
        if self._is_finished:
            raise ValueError(f"write() on a {type(self).__name__} that was closed or aborted")

    def _put(self, key: str, sample_bytes: int, add: Callable[[_S], None]) -> list[ShardInfo]:
        """Add the sample ``key`` of ``sample_bytes`` bytes with ``add``; returns the shards completed (0 to 2)."""
        closed: list[ShardInfo] = []
        shard = self._open
        if shard is not None and self._limits.is_overflow(shard.closed_bytes, shard.num_samples, sample_bytes):
            closed.append(self._finish_open())
        shard = self._open or self._start_shard()
        try:
            add(shard)
        except OSError as err:
            # The temporary file now ends in part of a sample: nothing more can go into it.
            err.add_note(f"while writing sample {key!r} to {shard.tmp}")
            self.abort()
            raise
        if self._limits.is_full(shard.num_samples):
            closed.append(self._finish_open())
        return closed

    def abort(self) -> None:
        """Close and remove the temporary files of the open shard; completed shards stay."""
        self._is_finished = True
        shard, self._open = self._open, None
        if shard is not None:
            shard.fileobj.close()
            remove_quietly(shard.tmp)
            self._remove_temporaries(shard)

    def _start_shard(self) -> _S:
        final = self._naming.path(self._next_shard)
        tmp = tmp_path_for(final)
        self._open = self._new_shard(final, tmp, open(tmp, "wb"))  # noqa: SIM115 (lives as long as the shard)
        self._next_shard += 1
        return self._open

    def _finish_open(self) -> ShardInfo:
        shard = self._open
        if shard is None:
            raise RuntimeError("no open shard to finish")  # internal invariant, not user input
        try:
            info = self._commit(shard)
        except OSError as err:
            err.add_note(f"while completing shard {shard.final}")
            self.abort()
            raise
        self._open = None
        self._done.append(info)
        return info

    def _new_shard(self, final: Path, tmp: Path, fileobj: BinaryIO) -> _S:
        raise NotImplementedError

    def _commit(self, shard: _S) -> ShardInfo:
        raise NotImplementedError

    def _remove_temporaries(self, shard: _S) -> None:
        """Remove what an aborted shard leaves besides its temporary file (nothing, unless overridden)."""
