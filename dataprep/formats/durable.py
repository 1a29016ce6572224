"""Durable file writes: temporary name, flush, fsync, rename, fsync the directory.

A reader never sees a half-written file under its final name: either the old file
(or none) or the complete new one.
"""

from __future__ import annotations

import ctypes
import os
import uuid
from collections.abc import Callable
from pathlib import Path

TMP_SUFFIX = ".tmp"
_SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h: start writeback of dirty pages in the range, do not wait


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _sync_file_range()


def tmp_path_for(path: str | os.PathLike[str]) -> Path:
    """The temporary name a file is written under before it is renamed to ``path``."""
    final = Path(path)
    return final.with_name(f".{final.name}{TMP_SUFFIX}")


def unique_tmp_path_for(path: str | os.PathLike[str]) -> Path:
    """A temporary name for ``path`` that no other writer uses: ``.NAME.TOKEN.tmp`` (TOKEN: 32 hex digits).

    For files that two processes may write at once (a stale task of a killed driver and
    its rerun): each writes its own file, and the renames replace a complete file.
    """
    final = Path(path)
    return final.with_name(f".{final.name}.{uuid.uuid4().hex}{TMP_SUFFIX}")


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Have the kernel start writing ``nbytes`` at byte ``offset`` of ``fd`` to disk, without waiting.

    Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``: called as a large file grows, it
    leaves little for the final fsync, which then no longer stalls the writer for the
    whole file's writeback. Durability still comes only from fsync. A no-op elsewhere,
    and where the call fails (the fsync reports real I/O errors).
    """
    if _SYNC_FILE_RANGE is not None and nbytes > 0:
        _SYNC_FILE_RANGE(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit_tmp(tmp: str | os.PathLike[str], final: str | os.PathLike[str]) -> None:
    """Rename a fully written and fsync'd temporary file to its final name, durably."""
    os.replace(tmp, final)
    fsync_dir(Path(final).parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably."""
    tmp = tmp_path_for(path)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    commit_tmp(tmp, path)
