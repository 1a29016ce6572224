"""flock-based locks between the processes and threads of a node: the only way they coordinate.

A flock belongs to an open file description, so two ``open`` calls (two threads, two
processes) lock independently, and the kernel drops a lock when its holder dies: a
``kill -9`` leaves no stale lock. Files that are renamed or removed while others wait on
them are checked after locking (``lock_file``): the lock must be on the inode the path
still names, else the caller looks again.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loaders.errors import CacheTimeoutError

__all__ = ["held", "lock_file", "try_lock", "unlock_close"]


def try_lock(fd: int, *, shared: bool = False, wait: bool = False) -> bool:
    """Lock ``fd`` (shared or exclusive); without ``wait``, False at once if another holder conflicts."""
    flags = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB)
    try:
        fcntl.flock(fd, flags)
    except BlockingIOError:
        return False
    return True


def unlock_close(fd: int) -> None:
    """Release and close: unlocking first releases the lock even where a forked child still holds a copy of ``fd``."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def lock_file(path: Path, *, shared: bool, wait: bool, create: bool = False) -> int | None:
    """An fd of ``path`` locked as asked, or None when it does not exist (or, without ``wait``, is held).

    Retries when the file was replaced or removed between ``open`` and the lock.
    """
    while True:
        try:
            mode = os.O_RDONLY if shared else os.O_RDWR  # an exclusive holder writes (a partial download)
            fd = os.open(path, mode | (os.O_CREAT if create else 0) | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            return None
        if not try_lock(fd, shared=shared, wait=wait):
            os.close(fd)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        unlock_close(fd)
        if not create:
            return None


@contextmanager
def held(path: Path, *, timeout_s: float, poll_s: float, what: str) -> Iterator[int]:
    """Hold the exclusive lock on ``path`` (created if missing); CacheTimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (fd := lock_file(path, shared=False, wait=False, create=True)) is None:
        if time.monotonic() > deadline:
            raise CacheTimeoutError(f"{path}: could not take the {what} lock within {timeout_s} s; a process of this "
                                    "node holds it without progress (a hung process? find it with `fuser`)")
        time.sleep(poll_s)
    try:
        yield fd
    finally:
        unlock_close(fd)
