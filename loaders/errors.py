"""Exceptions raised by loaders.

Tree::

    LoaderError
    ├── ConfigError         an argument is invalid (also a ValueError)
    ├── ShardError          a shard, index or manifest is missing or unreadable (at construction)
    ├── SampleError         one sample failed to read or decode (names shard, key, byte offset)
    │   └── BatchShapeError samples of one batch differ in shape (also a RuntimeError, as torch's)
    ├── SkipBudgetError     more samples skipped than ``max_skips`` allows
    ├── WorkerError         a worker died, hung past ``timeout`` or raised; names the worker
    │   │                   and what it was reading
    │   ├── WorkerLostError a worker died or produced nothing within ``timeout`` (also a
    │   │                   RuntimeError, as torch raises)
    │   └── UnsendableBatchError  a worker process built a batch pickle cannot send (also a TypeError)
    └── CacheError          the node's shard cache failed (``loaders.cache``)
        ├── CacheLimitError      cache_limit cannot hold what must fit (also a ConfigError): names the minimum
        ├── ShardFetchError      a shard could not be downloaded: names the shard and its URL (cause: RemoteError)
        │   └── ShardIntegrityError  its bytes kept differing from the manifest (sha256 or size) after re-fetches
        ├── DatasetChangedError  the dataset was rewritten remotely while this job read it: names what changed
        └── CacheTimeoutError    waited ``timeout_s`` without progress: for room under the limit, or for a
                                 download another process of the node was making

An exception raised by the dataset or collate_fn in a worker reaches the training loop
as an instance of exactly its own class (as torch re-raises it), with a note
(``add_note``) naming the worker, the batch and its indices. Failures the loader itself
detects are ``WorkerError``s: a worker that died or timed out (``WorkerLostError``, also
a RuntimeError as in torch), a batch that cannot leave a worker process.
"""

from __future__ import annotations


class LoaderError(Exception):
    """Base class of every error loaders raises on purpose."""


class ConfigError(LoaderError, ValueError):
    """An argument is invalid: the message says which, what was expected and what was given."""


class ShardError(LoaderError):
    """A shard directory, shard file, index sidecar or manifest is missing or unreadable."""


class SampleError(LoaderError):
    """One sample could not be read or decoded.

    Attributes name where: ``shard`` (file name), ``key``, ``offset`` (byte offset of the
    sample in the shard, or -1) and ``index`` (global sample index, or -1).
    """

    def __init__(self, message: str, *, shard: str = "", key: str = "", offset: int = -1, index: int = -1) -> None:
        super().__init__(message)
        self.shard = shard
        self.key = key
        self.offset = offset
        self.index = index


class BatchShapeError(SampleError, RuntimeError):
    """Samples of one batch differ in shape, so they cannot be stacked (torch raises RuntimeError)."""


class SkipBudgetError(LoaderError):
    """``on_error="skip"`` skipped more samples than ``max_skips`` allows."""


class WorkerError(LoaderError):
    """A worker failed: it raised, died or did not answer within ``timeout``."""


class WorkerLostError(WorkerError, RuntimeError):
    """A worker died or produced nothing within ``timeout``: the message names the batch it was reading."""


class UnsendableBatchError(WorkerError, TypeError):
    """A batch built in a worker process cannot be pickled to the main process (a class pickle cannot find)."""


# ----------------------------------------------------------------------------- the node cache (loaders.cache)


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
