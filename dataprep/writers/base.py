"""What every shard writer shares: the ``ShardWriter`` protocol, rollover limits, shard names.

A writer turns a stream of ``CleanRecord`` into numbered shards. A shard is written
under a temporary name (``fsutil.tmp_path_for``) and becomes visible only by an atomic
rename once complete; ``write`` and ``close`` return the shards they completed.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol, TypeVar, runtime_checkable

from dataprep.errors import UsageError
from dataprep.manifest import ShardInfo
from dataprep.records import CleanRecord, EncodedSample
from dataprep.validate import check_int, invalid

log = logging.getLogger(__name__)

DEFAULT_MAX_SHARD_BYTES = 256 * 2**20

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
        check_int("max_shard_bytes", self.max_shard_bytes, minimum=1, optional=True, error=ValueError)
        check_int("max_samples_per_shard", self.max_samples_per_shard, minimum=1, optional=True, error=ValueError)
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
            raise invalid("prefix", "a non-empty str without '/' or a leading '.'", self.prefix, ValueError)
        check_int("start_shard", self.start_shard, minimum=0, error=ValueError)
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
