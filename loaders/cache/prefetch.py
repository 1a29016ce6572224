"""Planned downloads: one process per node downloads ahead of the readers, in the order of use.

Every process with a plan runs a ``Prefetcher`` thread, but only the one holding
``leader.lock`` works; the others wait to take over (the kernel frees the lock when the
leader's process ends, a ``kill -9`` included). The leader reads every reader's position,
then claims the objects needed soonest that are not cached yet, at most ``max_downloads``
at a time; a claim evicts only objects needed later than the one it brings, so it stops at
the first that finds no room. It looks again when a download ends, a plan or a local read
moves, or every ``_IDLE_S``. The thread and its downloads are daemons that stop with
``stop()`` (a download stops at its next chunk, leaving a partial file to resume), and on
their own once this process has neither planned nor opened anything for
``CacheConfig.prefetch_idle_s``: nothing started for the cache outlives the last loader
reading through it by more than that. A later ``plan`` or ``open`` starts a new thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from loaders.cache.config import CacheConfig
from loaders.cache.download import DownloadStopped
from loaders.errors import CacheError
from loaders.cache.layout import CacheLayout
from loaders.cache.locks import lock_file, unlock_close
from loaders.cache.space import Claim, ClaimKind, Space

if TYPE_CHECKING:
    from loaders.cache.catalog import CacheEntry

__all__ = ["Prefetcher"]

log = logging.getLogger("loaders.cache")
_IDLE_S = 0.1  # how often the leader looks at other processes' positions
_LEADER_POLL_S = 0.25  # how often a follower tries to take over
_STOP_JOIN_S = 5.0


class PlannedCache(Protocol):
    """What a ``Prefetcher`` uses of the cache it serves (``ShardCache``; a protocol, so that
    this module does not import the cache that imports it)."""

    config: CacheConfig
    layout: CacheLayout
    space: Space

    def next_uses(self) -> dict[str, float]: ...

    def by_key(self, next_uses: Mapping[str, float]) -> dict[str, float]: ...

    def candidates(self, next_uses: Mapping[str, float]) -> list[tuple[CacheEntry, int, float]]: ...

    def download(self, entry: CacheEntry, size: int, claim: Claim, *, stop: threading.Event | None = None) -> None: ...


class Prefetcher:
    """The prefetch thread of one process (module docstring)."""

    def __init__(self, cache: PlannedCache) -> None:
        self.cache = cache
        self._halt = threading.Event()  # the running thread's: set to end it and its downloads
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._leader_fd: int | None = None
        self._inflight: dict[str, threading.Thread] = {}
        self._failed: set[str] = set()
        self._lock = threading.Lock()
        self._used_s = time.monotonic()
        self._closed = False

    @property
    def is_leader(self) -> bool:
        return self._leader_fd is not None

    @property
    def running(self) -> bool:
        """A prefetch thread of this process runs (leading or waiting to lead)."""
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._halt.is_set()

    def start(self) -> None:
        """Note a use of the cache by this process, and run the thread if it is not running."""
        with self._lock:
            self._used_s = time.monotonic()
            if self._closed or self.running:
                return
            self._halt = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(self._halt,), name="shard-cache-prefetch",
                                            daemon=True)
            self._thread.start()

    def touch(self) -> None:
        """Note a use of the cache by this process (a reader waiting for an object) without starting anything."""
        self._used_s = time.monotonic()

    def wake(self) -> None:
        self._wake.set()

    def replanned(self) -> None:
        """A new plan: objects whose planned download failed are tried again."""
        with self._lock:
            self._failed.clear()

    def stop(self) -> None:
        with self._lock:
            self._closed = True
            self._halt.set()
            thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(_STOP_JOIN_S)

    def after_fork(self) -> None:
        """In a forked child: no thread runs here, and the leader lock is the parent's."""
        if self._leader_fd is not None:
            os.close(self._leader_fd)
        self.__init__(self.cache)  # type: ignore[misc]  # __setstate__ rebuilds

    def _run(self, halt: threading.Event) -> None:
        leader: int | None = None  # this thread's hold on leader.lock (a later thread takes its own)
        try:
            while not halt.is_set():
                if time.monotonic() - self._used_s > self.cache.config.prefetch_idle_s:
                    log.debug("process %d: nothing planned or opened for %.1f s, prefetching stops", os.getpid(),
                              self.cache.config.prefetch_idle_s)
                    break
                if leader is None:
                    leader = lock_file(self.cache.layout.leader_lock, shared=False, wait=False, create=True)
                    if leader is None:
                        halt.wait(_LEADER_POLL_S)
                        continue
                    self._leader_fd = leader
                    log.debug("process %d prefetches for the node", os.getpid())
                try:
                    self._round(halt)
                except (CacheError, OSError) as err:  # the readers meet it when they need the object; keep planning
                    log.warning("prefetch: %s", err)
                self._wake.wait(_IDLE_S)
                self._wake.clear()
        finally:
            halt.set()  # this thread's downloads stop at their next chunk
            if leader is not None:
                if self._leader_fd == leader:
                    self._leader_fd = None
                unlock_close(leader)

    def _round(self, halt: threading.Event) -> None:
        next_uses = self.cache.next_uses()
        distance = self.cache.by_key(next_uses)
        for entry, size, need in self.cache.candidates(next_uses):
            if halt.is_set():
                return
            with self._lock:
                if len(self._inflight) >= self.cache.config.max_downloads:
                    return
                if entry.name in self._inflight or entry.name in self._failed:
                    continue
            claim = self.cache.space.claim(entry, size, distance=distance, need=need, demand=False)
            if claim.kind is ClaimKind.NO_ROOM:
                return
            if claim.kind is ClaimKind.MINE:
                self._launch(entry, size, claim, halt)

    def _launch(self, entry: CacheEntry, size: int, claim: Claim, halt: threading.Event) -> None:
        thread = threading.Thread(target=self._download, args=(entry, size, claim, halt), daemon=True,
                                  name=f"shard-cache-download-{entry.name}")
        with self._lock:
            self._inflight[entry.name] = thread
        thread.start()

    def _download(self, entry: CacheEntry, size: int, claim: Claim, halt: threading.Event) -> None:
        try:
            self.cache.download(entry, size, claim, stop=halt)
        except DownloadStopped:
            pass
        except (CacheError, OSError) as err:
            with self._lock:
                self._failed.add(entry.name)
            log.warning("prefetch of %s failed (a read of it will try again): %s", entry.name, err)
        finally:
            with self._lock:
                self._inflight.pop(entry.name, None)
            self._wake.set()
