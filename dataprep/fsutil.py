"""Durable file writes: temporary name, flush, fsync, rename, fsync the directory.

A reader never sees a half-written file under its final name: either the old file
(or none) or the complete new one.
"""

from __future__ import annotations

import os
from pathlib import Path

TMP_SUFFIX = ".tmp"


def tmp_path_for(path: str | os.PathLike[str]) -> Path:
    """The temporary name a file is written under before it is renamed to ``path``."""
    final = Path(path)
    return final.with_name(f".{final.name}{TMP_SUFFIX}")


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
