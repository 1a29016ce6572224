"""Exceptions raised by loaders.

Tree::

    LoaderError
    ├── ConfigError         an argument is invalid (also a ValueError)
    ├── ShardError          a shard, index or manifest is missing or unreadable (at construction)
    ├── SampleError         one sample failed to read or decode (names shard, key, byte offset)
    ├── SkipBudgetError     more samples skipped than ``max_skips`` allows
    └── WorkerError         a worker died, hung past ``timeout`` or raised; names the worker
                            and what it was reading

Worker exceptions are re-raised in the consumer wrapped in ``WorkerError`` with the
original as ``__cause__``.
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


class SkipBudgetError(LoaderError):
    """``on_error="skip"`` skipped more samples than ``max_skips`` allows."""


class WorkerError(LoaderError):
    """A worker failed: it raised, died or did not answer within ``timeout``."""
