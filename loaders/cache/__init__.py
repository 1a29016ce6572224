"""The node-wide shard cache: remote (or slow local) shards on local disk, planned, bounded, verified.

Modules (see README.md):
    cache     ``ShardCache``: ``plan(epoch, uses)``, ``open(name) -> Lease``, state, lifecycle
    config    ``CacheConfig``: cache_dir, cache_limit (bytes or "200GiB"), time-outs, parallel downloads
    catalog   the dataset's objects from its manifest, keyed by content (sha256)
    schedule  pure: next use of each object from the planned order and the readers' positions (Belady)
    space     claims under the limit; eviction of what is needed last, never of what is read
    download  one object: resume by range, sha256 while streaming, bounded re-fetch, atomic publish
    prefetch  the one process per node that downloads ahead, in order of use
    cursors   every reader's position, shared through small files
    lease     ``Lease``: a read hold on a cached object (a shared flock)
    locks     flock helpers
    layout    the folder's files and its size on disk

Its errors, ``CacheError`` and its subclasses (under ``LoaderError``), are in ``loaders.errors``.
"""

from __future__ import annotations

from loaders.cache.cache import CacheStats, ShardCache
from loaders.cache.catalog import CacheEntry, Catalog
from loaders.cache.config import CacheConfig, parse_limit
from loaders.errors import (
    CacheError,
    CacheLimitError,
    CacheTimeoutError,
    DatasetChangedError,
    ShardFetchError,
    ShardIntegrityError,
)
from loaders.cache.layout import disk_bytes
from loaders.cache.lease import Lease
from loaders.cache.schedule import NextUse, Schedule

__all__ = [
    "CacheConfig",
    "CacheEntry",
    "CacheError",
    "CacheLimitError",
    "CacheStats",
    "CacheTimeoutError",
    "Catalog",
    "DatasetChangedError",
    "Lease",
    "NextUse",
    "Schedule",
    "ShardCache",
    "ShardFetchError",
    "ShardIntegrityError",
    "disk_bytes",
    "parse_limit",
]
