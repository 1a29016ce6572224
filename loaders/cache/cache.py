"""``ShardCache``: one copy per node of a remote dataset's shards, on local disk, under a hard size limit.

Datasets use two calls: ``plan(epoch, uses)`` gives the order each stream (a rank, say)
will open its shards in during ``epoch`` (a pure function of seed, epoch and topology,
so every process of the node can give it), and ``open(name, stream=, epoch=)`` returns a
``Lease`` on the shard's verified local copy, downloading it first if it is not there.
Every rank and worker of a node shares the folder through flocks and atomic renames only
(no process group, no daemon): each object is downloaded once per node; one process at a
time prefetches in the planned order (``prefetch``); room is made by evicting what is
needed last (``space``); a shard being read is never evicted. The state (``state_dict``)
is the readers' positions, plain values.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dataprep.formats.manifest import MANIFEST_NAME
from dataprep.remote import RemoteError, RemoteStore, StoreUrl
from dataprep.formats.sizes import format_bytes
from loaders.cache.catalog import CacheEntry, Catalog
from loaders.cache.config import CacheConfig
from loaders.cache.cursors import CursorBoard
from loaders.cache.download import download_config, fill, publish
from loaders.errors import (
    CacheError,
    CacheLimitError,
    CacheTimeoutError,
    DatasetChangedError,
    ShardFetchError,
    ShardIntegrityError,
)
from loaders.cache.layout import BLOCK_BYTES, CacheLayout
from loaders.cache.lease import Lease
from loaders.cache.locks import lock_file, unlock_close
from loaders.cache.prefetch import Prefetcher
from loaders.cache.schedule import NextUse, Schedule, by_distance
from loaders.cache.space import Claim, ClaimKind, Space
from loaders.errors import ConfigError, ShardError
from loaders.state_keys import KEY_VERSION
from loaders.validate import check_int

__all__ = ["CacheStats", "ShardCache"]

log = logging.getLogger("loaders.cache")
CACHE_STATE_VERSION = 1
_MAX_HORIZON = 1 << 16
KEY_POSITIONS = "positions"


@dataclass
class CacheStats:
    """What this process did: objects downloaded and their bytes (the server's counters are the node's truth);
    stalls: opens that found their object missing and waited for it (a download), and the seconds they waited."""

    downloads: int = 0
    bytes_downloaded: int = 0
    stalls: int = 0
    stall_s: float = 0.0


class ShardCache:
    """The node's cache of the objects in ``catalog``, read through ``store`` (module docstring)."""

    def __init__(self, store: RemoteStore, catalog: Catalog, config: CacheConfig) -> None:
        own = -(-catalog.manifest_bytes // BLOCK_BYTES) * BLOCK_BYTES + config.reserve_bytes
        minimum = 2 * catalog.largest_shard_bytes + own
        if config.limit_bytes < minimum:
            raise CacheLimitError(
                f"cache_limit {config.describe_limit()} is below the minimum for {catalog.url}: {minimum} bytes "
                f"({format_bytes(minimum)}: twice its largest shard, {catalog.largest_shard_bytes} bytes, plus "
                f"{own} bytes for the cache's own files and the manifest's copy); raise cache_limit")
        self.store = store
        self.catalog = catalog
        self.config = config
        self.layout = CacheLayout(config.root)
        self.layout.create()
        self.space = Space(self.layout, config)
        self.stats = CacheStats()
        self._schedule = Schedule()
        self._board = CursorBoard(self.layout)
        self._prefetcher = Prefetcher(self)
        self._leases: weakref.WeakSet[Lease] = weakref.WeakSet()
        self._sizes: dict[str, int] = {}
        # Opens per stream worth planning for: more objects than the limit can hold change nothing.
        smallest = min((s.bytes for s in catalog.manifest.shards if s.bytes > 0), default=1)
        self._horizon = min(config.limit_bytes // smallest + 2, _MAX_HORIZON)
        self._closed = False
        _LIVE.add(self)

    @classmethod
    def open_dataset(cls, url: str | os.PathLike[str] | StoreUrl, *, cache_dir: str | os.PathLike[str],
                     cache_limit: int | str, **options: Any) -> ShardCache:
        """The cache of the dataset at ``url`` (its manifest read now); ``options``: other ``CacheConfig`` fields."""
        config = CacheConfig(cache_dir, cache_limit, **options)
        store = RemoteStore(url, download_config(config.remote))  # each chunk on disk as it arrives
        try:
            data = store.read_bytes(MANIFEST_NAME)
        except RemoteError as err:
            raise ShardError(f"{store.url_of(MANIFEST_NAME)}: cannot read the manifest: {err}") from err
        cache = cls(store, Catalog.from_manifest_bytes(str(store.url), data), config)
        cache._remember_manifest(data)
        return cache

    # -- the API for datasets --
    def plan(self, epoch: int, uses: Mapping[str, Sequence[str]]) -> None:
        """Plan ``epoch``: ``uses[stream]`` lists the object names ``stream`` opens, in order.

        Epochs before ``epoch - 1`` are forgotten; plan the next epoch before this one ends
        so that prefetching crosses the boundary.
        """
        epoch = check_int("epoch", epoch, 0)
        if not isinstance(uses, Mapping) or any(isinstance(v, str) for v in uses.values()):
            raise ConfigError("'uses' must map each stream to a sequence of object names "
                              f"(got {type(uses).__name__})")
        self._check_open()
        self._schedule = self._schedule.with_epoch(epoch, uses, keep_from=epoch - 1)
        if self.config.prefetch:
            self._prefetcher.replanned()
            self._prefetcher.start()
            self._prefetcher.wake()

    def open(self, name: str, *, stream: str | None = None, epoch: int | None = None) -> Lease:
        """A lease on ``name``'s verified local copy, downloaded first if it is not cached.

        ``stream`` and ``epoch`` say which planned use this is (the reader's place, which
        drives prefetch and eviction); without them the read is unplanned but works.
        """
        self._check_open()
        entry = self.catalog.entry(name)
        if stream is not None and epoch is not None:
            self._advance(stream, epoch, name)
        if self.config.prefetch and self._schedule.epochs:
            self._prefetcher.start()
            self._prefetcher.wake()
        return self._wait_for(entry)

    def cached(self, name: str) -> Lease | None:
        """A lease on ``name`` if the node has its verified copy now, else None (nothing is downloaded)."""
        self._check_open()
        return self._lease(self.catalog.entry(name))

    def discard(self, name: str) -> bool:
        """Drop ``name``'s cached copy (its reader found it bad: a sidecar the manifest has no sha256 for), so
        that the next ``open`` downloads it again; False when a reader holds it."""
        self._check_open()
        return self.space.discard(self.catalog.entry(name).key)

    @property
    def planned_epochs(self) -> frozenset[int]:
        """The epochs this process has planned (and not yet forgotten)."""
        return frozenset(self._schedule.epochs)

    def planned_uses(self, epoch: int) -> dict[str, tuple[str, ...]]:
        """This process's plan of ``epoch``: each stream's object names in the order it opens them ({}: none)."""
        return {stream: tuple(names) for stream, names in self._schedule.epochs.get(epoch, {}).items()}

    def node_streams(self) -> set[str]:
        """The streams some live process of the node reads now (their positions are in the folder)."""
        self._check_open()
        return set(self._board.read_all())

    def state_dict(self) -> dict[str, Any]:
        """Where this process's readers are: ``{"version": 1, "positions": {stream: [epoch, index]}}``."""
        positions = {s: [p.epoch, p.index] for s, p in sorted(self._board.own().items())}
        return {KEY_VERSION: CACHE_STATE_VERSION, KEY_POSITIONS: positions}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get(KEY_VERSION) != CACHE_STATE_VERSION:
            raise ConfigError(f"cache state version {state.get(KEY_VERSION)!r} not supported (expected "
                              f"{CACHE_STATE_VERSION})")
        self._board.load({s: NextUse(int(e), int(i)) for s, (e, i) in state[KEY_POSITIONS].items()})

    def close(self) -> None:
        """Stop prefetching and withdraw this process's positions; the folder stays for the next run."""
        if not self._closed:
            self._closed = True
            self._prefetcher.stop()
            self._board.close()
            self.store.close()

    def __enter__(self) -> ShardCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- used by the prefetcher --
    def next_uses(self) -> dict[str, float]:
        """Opens until each planned object's next use, by name, from every reader's position (within the horizon)."""
        return self._schedule.distances(self._board.read_all(), self._horizon)

    def by_key(self, next_uses: Mapping[str, float]) -> dict[str, float]:
        """``next_uses`` keyed by local key (two names with the same content: the sooner)."""
        found: dict[str, float] = {}
        for name, steps in next_uses.items():
            key = self.catalog.entry(name).key
            found[key] = min(steps, found.get(key, steps))
        return found

    def candidates(self, next_uses: Mapping[str, float]) -> list[tuple[CacheEntry, int, float]]:
        """Planned objects of known size not in the cache, soonest needed first: (entry, size, next use)."""
        cached = set(self.layout.object_keys())
        found = []
        for name in by_distance(next_uses):
            entry = self.catalog.entry(name)
            if entry.key not in cached and entry.size is not None:
                found.append((entry, entry.size, next_uses[name]))
        return found

    def download(self, entry: CacheEntry, size: int, claim: Claim, *, stop: threading.Event | None = None) -> None:
        """Fill the claimed partial file and publish it; on a persistent mismatch, say whether the dataset changed."""
        assert claim.path is not None
        try:
            got = fill(self.store, entry, size, claim.fd, max_refetches=self.config.max_refetches, stop=stop)
            publish(claim.fd, claim.path, self.layout.object_path(entry.key))
            self.stats.downloads += 1
            self.stats.bytes_downloaded += got
        except ShardIntegrityError as err:
            claim.path.unlink(missing_ok=True)
            self._raise_if_rewritten(err)
            raise
        finally:
            unlock_close(claim.fd)

    # -- internals --
    def _wait_for(self, entry: CacheEntry) -> Lease:
        lease = self._lease(entry)
        if lease is not None:
            return lease
        began = time.monotonic()
        try:
            return self._fetch(entry)
        finally:
            self.stats.stalls += 1
            self.stats.stall_s += time.monotonic() - began

    def _fetch(self, entry: CacheEntry) -> Lease:
        since, seen = time.monotonic(), None
        while True:
            lease = self._lease(entry)
            if lease is not None:
                return lease
            size = self._size(entry)
            claim = self.space.claim(entry, size, distance=self.by_key(self.next_uses()), need=0.0, demand=True)
            if claim.kind is ClaimKind.MINE:
                self.download(entry, size, claim)
                continue
            if claim.kind is ClaimKind.DONE:
                continue
            self._prefetcher.touch()  # a reader waiting is a reader: this process's prefetching goes on
            now = self._observe(entry, size)
            if now != seen:
                since, seen = time.monotonic(), now
            elif time.monotonic() - since > self.config.timeout_s:
                raise self._timeout(entry, size, claim.kind)
            time.sleep(self.config.poll_s)

    def _lease(self, entry: CacheEntry) -> Lease | None:
        path = self.layout.object_path(entry.key)
        fd = lock_file(path, shared=True, wait=True)
        if fd is None:
            return None
        lease = Lease(entry.name, path, fd, os.fstat(fd).st_size)
        self._leases.add(lease)
        return lease

    def _size(self, entry: CacheEntry) -> int:
        if entry.size is not None:
            return entry.size
        if entry.name not in self._sizes:
            try:
                self._sizes[entry.name] = self.store.head(entry.name).size
            except RemoteError as err:
                raise ShardFetchError(f"{entry.name}: {err}", shard=entry.name, url=self.store.url_of(entry.name)) \
                    from err
        return self._sizes[entry.name]

    def _observe(self, entry: CacheEntry, size: int) -> tuple[object, ...]:
        """What changes while the node makes progress: the partial's size, the objects, the readers' positions."""
        try:
            partial = os.stat(self.layout.partial_path(entry.key, size)).st_size
        except FileNotFoundError:
            partial = -1
        return partial, tuple(self.layout.object_keys()), os.stat(self.layout.streams).st_mtime_ns

    def _timeout(self, entry: CacheEntry, size: int, kind: ClaimKind) -> CacheTimeoutError:
        url = self.store.url_of(entry.name)
        if kind is ClaimKind.BUSY:
            return CacheTimeoutError(f"shard {entry.name} ({url}): another process of this node is downloading it "
                                     f"and made no progress for {self.config.timeout_s} s")
        return CacheTimeoutError(
            f"shard {entry.name} ({url}, {size} bytes): no room under cache_limit {self.config.describe_limit()} "
            f"for {self.config.timeout_s} s: every cached shard is held by a reader. Raise cache_limit, or release "
            "a lease before opening the next shard")

    def _advance(self, stream: str, epoch: int, name: str) -> None:
        at = self._board.own().get(stream)
        position = self._schedule.locate(stream, epoch, name, at)
        if position is not None and (at is None or position != at):
            self._board.record(stream, position)

    def _remember_manifest(self, data: bytes) -> None:
        """Keep the manifest seen at this URL; a different one from last time is said, with the shards it changes."""
        path = self.layout.dataset_copy(self.catalog.url)
        try:
            previous = path.read_bytes()
        except FileNotFoundError:
            previous = None
        if previous == data:
            return
        if previous is not None:
            old = Catalog.from_manifest_bytes(self.catalog.url, previous)
            log.warning("%s changed since this cache last read it (manifest sha256 %s -> %s): %s; changed shards are "
                        "fetched again", self.catalog.url, old.identity[:12], self.catalog.identity[:12],
                        _changes(old, self.catalog))
        if not self.space.place(path, data):
            log.warning("%s: no room for the manifest's copy in %s (every shard is being read); not kept",
                        self.catalog.url, self.layout.root)

    def _raise_if_rewritten(self, err: ShardIntegrityError) -> None:
        try:
            data = self.store.read_bytes(MANIFEST_NAME)
        except RemoteError:
            return
        if hashlib.sha256(data).hexdigest() != self.catalog.identity:
            new = Catalog.from_manifest_bytes(self.catalog.url, data)
            raise DatasetChangedError(
                f"{self.catalog.url} was rewritten while this job read it (manifest sha256 "
                f"{self.catalog.identity[:12]} -> {new.identity[:12]}; {_changes(self.catalog, new)}): refusing to mix "
                "versions. Restart the job to read the new version") from err

    def _check_open(self) -> None:
        if self._closed:
            raise CacheError(f"the cache of {self.catalog.url} in {self.layout.root} is closed")

    def _after_fork(self) -> None:
        self._prefetcher.after_fork()
        self._board.after_fork()
        for lease in list(self._leases):
            lease.forget()

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self.store, "catalog": self.catalog, "config": self.config, "schedule": self._schedule}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["store"], state["catalog"], state["config"])  # type: ignore[misc]  # __setstate__ rebuilds
        self._schedule = state["schedule"]


def _changes(old: Catalog, new: Catalog) -> str:
    before = {s.name: s.sha256 for s in old.manifest.shards}
    after = {s.name: s.sha256 for s in new.manifest.shards}
    changed = sorted(n for n in before.keys() & after.keys() if before[n] != after[n])
    added, removed = sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys())
    parts = [f"{len(v)} {k}{': ' + ', '.join(v[:3]) + (' ...' if len(v) > 3 else '') if v else ''}"
             for k, v in (("changed", changed), ("added", added), ("removed", removed))]
    return ", ".join(parts)


_LIVE: weakref.WeakSet[ShardCache] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for cache in list(_LIVE):
        cache._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
