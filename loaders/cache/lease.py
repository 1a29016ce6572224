"""``Lease``: a cached object held for reading; while any lease on it lives, it is not evicted.

The lease is a shared flock on the object's file, so it ends with its process (a killed
worker leaks nothing). Read through ``fd`` (``os.pread``) or open ``path``; release it
(``release()``, or leave the ``with`` block) before opening the next shard, so that a
small cache can always make room. A lease belongs to the process that took it: a forked
child's copy is closed at the fork and reads nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from loaders.cache.locks import unlock_close
from loaders.errors import ShardError

__all__ = ["Lease"]


class Lease:
    """``name`` held at ``path`` (``size`` bytes) through ``fd``, a read-only descriptor with a shared flock."""

    def __init__(self, name: str, path: Path, fd: int, size: int) -> None:
        self.name = name
        self.path = path
        self.size = size
        self._fd = fd
        self._pid = os.getpid()

    @property
    def fd(self) -> int:
        if self._fd < 0 or self._pid != os.getpid():
            raise ShardError(f"lease on {self.name} was released (or taken by the parent process before a fork); "
                             "open the shard again")
        return self._fd

    @property
    def held(self) -> bool:
        return self._fd >= 0 and self._pid == os.getpid()

    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes at byte ``offset`` of the object (fewer at its end)."""
        return os.pread(self.fd, size, offset)

    def release(self) -> None:
        if self.held:
            fd, self._fd = self._fd, -1
            unlock_close(fd)

    def forget(self) -> None:
        """In a forked child: close this copy only (the parent's lease stays)."""
        if self._fd >= 0 and self._pid != os.getpid():
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"Lease({self.name!r}, {str(self.path)!r}, held={self.held})"
