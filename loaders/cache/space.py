"""Room under the limit: claim a download, evicting what is needed last; never what is being read.

``Space.claim`` runs under the node's ``cache.lock``, so claims are serialised across
processes. It ends in one of:

- ``DONE``: the object is already in the cache;
- ``BUSY``: another process is downloading it (its partial file is locked);
- ``MINE``: this caller holds the partial file, exclusively locked, to fill: resumed if a
  dead process left one, else created, its full size reserved by its name;
- ``NO_ROOM``: the limit cannot take it now.

To make room it evicts complete objects and abandoned partial files in Belady's order
(the furthest next use first, never-needed first); a planned (prefetch) claim evicts only
what is needed later than the object it brings (``need``), a demand claim anything. An
object a reader holds (its shared flock) or a download in progress is never evicted.
"""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from loaders.cache.catalog import CacheEntry
from loaders.cache.config import CacheConfig
from loaders.cache.layout import BLOCK_BYTES, CacheLayout
from loaders.cache.locks import held, lock_file, unlock_close
from loaders.cache.schedule import eviction_order

__all__ = ["Claim", "ClaimKind", "Space"]


class ClaimKind(enum.StrEnum):
    DONE = "done"
    BUSY = "busy"
    MINE = "mine"
    NO_ROOM = "no_room"


@dataclass(frozen=True)
class Claim:
    """What ``claim`` found; for MINE, the locked partial file (``fd``, ``path``)."""

    kind: ClaimKind
    fd: int = -1
    path: Path | None = None


class Space:
    """Claims and evictions in one cache folder (module docstring)."""

    def __init__(self, layout: CacheLayout, config: CacheConfig) -> None:
        self.layout = layout
        self.config = config
        self.evictions = 0

    def claim(self, entry: CacheEntry, size: int, *, distance: Mapping[str, float], need: float,
              demand: bool) -> Claim:
        """Claim the download of ``entry`` (``size`` bytes); ``distance`` maps keys to their next use."""
        with held(self.layout.space_lock, timeout_s=self.config.timeout_s, poll_s=self.config.poll_s, what="space"):
            if self.layout.object_path(entry.key).exists():
                return Claim(ClaimKind.DONE)
            partial = self.layout.partial_path(entry.key, size)
            if partial.exists():
                fd = lock_file(partial, shared=False, wait=False)
                return Claim(ClaimKind.MINE, fd, partial) if fd is not None else Claim(ClaimKind.BUSY)
            reserve = -(-size // BLOCK_BYTES) * BLOCK_BYTES
            if not self._make_room(reserve, distance, need=need, demand=demand):
                return Claim(ClaimKind.NO_ROOM)
            fd = lock_file(partial, shared=False, wait=False, create=True)
            if fd is None:  # cannot happen under the space lock; say so rather than guess
                raise RuntimeError(f"{partial}: created under the space lock, yet locked by another process")
            return Claim(ClaimKind.MINE, fd, partial)

    def place(self, path: Path, data: bytes) -> bool:
        """Write a small file of the cache's own (the manifest's copy) within the limit; False when no room."""
        with held(self.layout.space_lock, timeout_s=self.config.timeout_s, poll_s=self.config.poll_s, what="space"):
            if not self._make_room(-(-len(data) // BLOCK_BYTES) * BLOCK_BYTES, {}, need=0.0, demand=True):
                return False
            tmp = path.with_name(f".{path.name}.tmp")  # one writer at a time: the space lock is held
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return True

    def discard(self, key: str) -> bool:
        """Remove the object ``key`` (found bad by its reader) unless a reader holds it; True when removed."""
        with held(self.layout.space_lock, timeout_s=self.config.timeout_s, poll_s=self.config.poll_s, what="space"):
            return self._evict(self.layout.object_path(key))

    def _make_room(self, reserve: int, distance: Mapping[str, float], *, need: float, demand: bool) -> bool:
        limit = self.config.limit_bytes - self.config.reserve_bytes  # the rest is for the small files of every process
        if self.layout.usage_bytes() + reserve <= limit:
            return True
        candidates = {key: self.layout.object_path(key) for key in self.layout.object_keys()}
        for part in self.layout.partials():
            candidates.setdefault(part.key, part.path)
        for key in eviction_order(candidates, distance):
            if not demand and distance.get(key, math.inf) <= need:
                break  # everything left is needed no later than what we would bring in
            if self._evict(candidates[key]) and self.layout.usage_bytes() + reserve <= limit:
                return True
        return self.layout.usage_bytes() + reserve <= limit

    def _evict(self, path: Path) -> bool:
        """Remove ``path`` unless someone holds it (a reader's lease, a download in progress)."""
        fd = lock_file(path, shared=False, wait=False)
        if fd is None:
            return False
        try:
            os.unlink(path)
        finally:
            unlock_close(fd)
        self.evictions += 1
        return True
