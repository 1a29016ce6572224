"""Exceptions raised by the shard cache (``loaders.cache``), under ``LoaderError``.

Tree (kept here until ``loaders/errors.py`` settles after the restructure)::

    LoaderError
    └── CacheError               the node's shard cache failed
        ├── CacheLimitError      cache_limit cannot hold what must fit (also a ConfigError): names the minimum
        ├── ShardFetchError      a shard could not be downloaded: names the shard and its URL (cause: RemoteError)
        │   └── ShardIntegrityError  its bytes kept differing from the manifest (sha256 or size) after re-fetches
        ├── DatasetChangedError  the dataset was rewritten remotely while this job read it: names what changed
        └── CacheTimeoutError    waited ``timeout_s`` without progress: for room under the limit, or for a
                                 download another process of the node was making
"""

from __future__ import annotations

from loaders.errors import ConfigError, LoaderError


class CacheError(LoaderError):
    """The node's shard cache failed."""


class CacheLimitError(CacheError, ConfigError):
    """``cache_limit`` is below what the cache needs; the message names the minimum."""


class ShardFetchError(CacheError):
    """A shard could not be downloaded; ``shard`` and ``url`` name it."""

    def __init__(self, message: str, *, shard: str = "", url: str = "") -> None:
        super().__init__(message)
        self.shard = shard
        self.url = url

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuild, (type(self), str(self), self.shard, self.url)


def _rebuild(cls: type[ShardFetchError], message: str, shard: str, url: str) -> ShardFetchError:
    return cls(message, shard=shard, url=url)


class ShardIntegrityError(ShardFetchError):
    """A shard's downloaded bytes differed from the manifest's sha256 or size on every try."""


class DatasetChangedError(CacheError):
    """The dataset's manifest changed remotely while this job was reading the previous version."""


class CacheTimeoutError(CacheError):
    """No progress for ``timeout_s``: no room could be made under the limit, or another process's download stalled."""
