"""The cache folder: where each file lives, and how many bytes of disk the folder takes.

::

    cache_dir/
      cache.lock                    held while room is made (reservations, evictions)
      leader.lock                   held by the one process of the node that prefetches
      objects/<key>                 complete, verified objects; a reader holds a shared flock (its lease)
      partial/<key>.<size>.part     a download in progress (exclusive flock) or interrupted (resumable)
      streams/<token>.alive|.json   each live process's read positions (the ``.alive`` flock says it lives)
      datasets/<url digest>.json    the manifest last seen at each dataset URL

Usage counts every file and folder under ``cache_dir`` as the disk blocks it takes or
its size rounded up to a 4 KiB block, whichever is larger, and each partial download at
the full size it will reach: so the folder, as ``du`` or a sum of file sizes sees it,
never exceeds the limit.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BLOCK_BYTES", "CacheLayout", "Partial", "disk_bytes"]

BLOCK_BYTES = 4096
_PART = ".part"


def disk_bytes(st: os.stat_result) -> int:
    """What one file or folder takes: its blocks, or its size rounded up to a block, whichever is larger."""
    rounded = -(-st.st_size // BLOCK_BYTES) * BLOCK_BYTES
    return max(rounded, st.st_blocks * 512)


@dataclass(frozen=True, slots=True)
class Partial:
    """A partial download found in the folder: the key it becomes and the size it will reach."""

    key: str
    size: int
    path: Path


class CacheLayout:
    """Paths inside ``root`` (module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.objects = root / "objects"
        self.partial = root / "partial"
        self.streams = root / "streams"
        self.datasets = root / "datasets"
        self.space_lock = root / "cache.lock"
        self.leader_lock = root / "leader.lock"

    def create(self) -> None:
        for folder in (self.root, self.objects, self.partial, self.streams, self.datasets):
            folder.mkdir(parents=True, exist_ok=True)

    def object_path(self, key: str) -> Path:
        return self.objects / key

    def partial_path(self, key: str, size: int) -> Path:
        return self.partial / f"{key}.{size}{_PART}"

    def dataset_copy(self, url: str) -> Path:
        return self.datasets / (hashlib.sha256(url.encode()).hexdigest()[:24] + ".json")

    def object_keys(self) -> list[str]:
        try:
            return sorted(os.listdir(self.objects))
        except FileNotFoundError:
            return []

    def partials(self) -> list[Partial]:
        found = []
        for name in _listdir(self.partial):
            stem, _, size = name[: -len(_PART)].rpartition(".")
            if name.endswith(_PART) and size.isdigit():
                found.append(Partial(stem, int(size), self.partial / name))
        return found

    def usage_bytes(self) -> int:
        """Bytes of disk the folder takes now, partial downloads counted at their full size."""
        total = 0
        reserved = {str(p.path): p.size for p in self.partials()}
        for path, st in _walk(self.root):
            taken = disk_bytes(st)
            full = reserved.get(path)
            if full is not None:
                taken = max(taken, -(-full // BLOCK_BYTES) * BLOCK_BYTES)
            total += taken
        return total


def _listdir(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (``root`` itself included) with its stat; entries removed meanwhile are skipped."""
    try:
        yield str(root), os.stat(root)
    except FileNotFoundError:
        return
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR):
                continue
            raise
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            yield entry.path, st
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
