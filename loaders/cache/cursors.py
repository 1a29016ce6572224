"""Where every reader of the node is: each process publishes its readers' positions as a file.

A reader is a thread of a process reading a stream; ``record`` notes its position at each
``open`` (and forgets threads that have ended). The process writes its positions to
``streams/<token>.json`` (temporary file, then rename) and holds an exclusive flock on
``streams/<token>.alive`` while it lives.
``read_all`` merges every live process's file: a stream's position is the smallest of its
readers' (the slowest reader still needs what lies between it and the others), and the
files of dead processes (their ``.alive`` lock is free) are removed.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Mapping

from loaders.cache.layout import CacheLayout
from loaders.cache.locks import lock_file, unlock_close
from loaders.cache.schedule import NextUse

__all__ = ["CursorBoard"]

_VERSION = 1


class CursorBoard:
    """This process's reader positions (module docstring). Per process: ``after_fork`` starts afresh."""

    def __init__(self, layout: CacheLayout) -> None:
        self.layout = layout
        self._lock = threading.Lock()
        self._positions: dict[str, dict[int, NextUse]] = {}
        self._token: str | None = None
        self._alive_fd: int | None = None

    def record(self, stream: str, position: NextUse) -> None:
        """Reader ``threading.get_ident()`` of ``stream`` is at ``position``; published at once when it moved."""
        reader = threading.get_ident()
        with self._lock:
            readers = self._positions.setdefault(stream, {})
            if readers.get(reader) == position:
                return
            readers[reader] = position
            self._forget_ended_threads()
            self._publish()

    def _forget_ended_threads(self) -> None:
        """A reader thread that ended (a worker pool replaced per epoch) must not hold its stream back."""
        alive = {t.ident for t in threading.enumerate()}
        for readers in self._positions.values():
            for reader in [r for r in readers if r not in alive]:
                del readers[reader]

    def load(self, positions: Mapping[str, NextUse]) -> None:
        """Start from saved positions (resume): one reader per stream, this thread."""
        with self._lock:
            for stream, position in positions.items():
                self._positions[stream] = {threading.get_ident(): position}
            self._publish()

    def own(self) -> dict[str, NextUse]:
        """This process's position per stream (the smallest of its readers')."""
        with self._lock:
            return {s: min(r.values()) for s, r in self._positions.items() if r}

    def _publish(self) -> None:
        if self._token is None:
            self._token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self._alive_fd = lock_file(self.layout.streams / f"{self._token}.alive", shared=False, wait=True,
                                       create=True)
        doc = {"version": _VERSION,
               "streams": {s: [[p.epoch, p.index] for p in r.values()] for s, r in self._positions.items()}}
        final = self.layout.streams / f"{self._token}.json"
        tmp = self.layout.streams / f".{self._token}.json.tmp"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, final)

    def read_all(self) -> dict[str, NextUse]:
        """Every live process's positions merged: the smallest per stream."""
        merged: dict[str, NextUse] = {}
        for name in sorted(os.listdir(self.layout.streams)):
            if not name.endswith(".json") or name.startswith("."):
                continue
            token = name[: -len(".json")]
            if token != self._token and self._is_dead(token):
                continue
            try:
                doc = json.loads((self.layout.streams / name).read_text())
            except (FileNotFoundError, ValueError):
                continue  # removed, or its writer died between the write and the rename
            for stream, positions in doc.get("streams", {}).items():
                for epoch, index in positions:
                    position = NextUse(int(epoch), int(index))
                    if stream not in merged or position < merged[stream]:
                        merged[stream] = position
        return merged

    def _is_dead(self, token: str) -> bool:
        """True (and its files removed) when the process that wrote ``token`` no longer lives."""
        alive = self.layout.streams / f"{token}.alive"
        fd = lock_file(alive, shared=False, wait=False)
        if fd is None:
            if alive.exists():
                return False  # held: its process lives
            self._remove(token)
            return True
        try:
            self._remove(token)
        finally:
            unlock_close(fd)
        return True

    def _remove(self, token: str) -> None:
        for name in (f"{token}.json", f".{token}.json.tmp", f"{token}.alive"):  # the lock file last
            try:
                os.unlink(self.layout.streams / name)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Withdraw this process's positions."""
        with self._lock:
            if self._token is not None and self._alive_fd is not None:
                self._remove(self._token)
                unlock_close(self._alive_fd)
            self._token, self._alive_fd, self._positions = None, None, {}

    def after_fork(self) -> None:
        """In a forked child: the parent's positions and lock are not this process's."""
        if self._alive_fd is not None:
            os.close(self._alive_fd)  # only this copy: the parent keeps its lock
        self._lock = threading.Lock()
        self._token, self._alive_fd, self._positions = None, None, {}
