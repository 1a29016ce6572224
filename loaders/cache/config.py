"""``CacheConfig``: where the node's shard cache lives, how large it may grow, how long it waits; validated once."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from dataprep.remote import RemoteConfig
from dataprep.formats.sizes import format_bytes, parse_bytes
from loaders.errors import ConfigError
from loaders.validate import check_int

__all__ = ["CacheConfig", "parse_limit"]


def parse_limit(value: int | str) -> int:
    """``cache_limit`` in bytes: an int, or a size string such as ``"200GiB"`` or ``"500MB"``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"'cache_limit' must be an int (bytes) or a size string like '200GiB' "
                          f"(got {value!r} that is a {type(value).__name__})")
    if isinstance(value, int):
        if value <= 0:
            raise ConfigError(f"'cache_limit' must be positive (got {value})")
        return value
    try:
        return parse_bytes(value)
    except ValueError as err:
        raise ConfigError(f"'cache_limit': {err}") from err


@dataclass(frozen=True)
class CacheConfig:
    """The cache of one node (every rank and worker on it passes the same ``cache_dir``).

    cache_dir: the folder (created if missing); the cache writes nothing elsewhere.
    cache_limit: bytes (int) or a size string; everything under ``cache_dir`` counts
        (shards, partial downloads, locks, the manifest copy), as disk blocks.
    timeout_s: how long a reader waits without progress for room under the limit or for
        a download another process is making, before ``CacheTimeoutError``.
    max_downloads: planned downloads running at once on the node.
    max_refetches: downloads of a shard whose bytes differ from its sha256 beyond the
        first, before ``ShardIntegrityError``.
    poll_s: how often a waiting process looks at the folder again (seconds).
    prefetch: download ahead of use from ``plan()`` (False: only on ``open``).
    prefetch_idle_s: a process's prefetching (its thread, its downloads, its turn as the
        node's leader) stops once the process has neither planned nor opened anything for
        this long; its next ``plan`` or ``open`` starts it again (seconds).
    reserve_bytes: part of the limit kept for the cache's own small files (each process's
        positions, locks, the folders' growth); shards use the rest.
    remote: the client's time-outs and retries; its ``chunk_bytes`` is capped at 256 KiB for
        the cache's downloads (``download.DOWNLOAD_CHUNK_BYTES``: the most a kill loses).
    """

    cache_dir: str | os.PathLike[str]
    cache_limit: int | str
    timeout_s: float = 120.0
    max_downloads: int = 4
    max_refetches: int = 2
    poll_s: float = 0.02
    prefetch: bool = True
    prefetch_idle_s: float = 5.0
    reserve_bytes: int = 256 * 1024
    remote: RemoteConfig = field(default_factory=RemoteConfig)
    limit_bytes: int = field(init=False)
    root: Path = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "limit_bytes", parse_limit(self.cache_limit))
        object.__setattr__(self, "root", Path(os.path.abspath(self.cache_dir)))
        for name in ("timeout_s", "poll_s", "prefetch_idle_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{name!r} must be a positive number (got {value!r})")
        for name, minimum in (("reserve_bytes", 0), ("max_downloads", 1), ("max_refetches", 0)):
            check_int(name, getattr(self, name), minimum)

    def describe_limit(self) -> str:
        return f"{format_bytes(self.limit_bytes)} ({self.limit_bytes} bytes)"
