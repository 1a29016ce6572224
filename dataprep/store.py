"""Where a range-parallel run keeps the files every node reads and writes (OUT, shared).

``OutputStore`` is the small interface the range tasks and their driver use for the
run's shared state (probe files, per-range digests, duplicates and rejects); names are
``/``-separated paths relative to OUT. ``LocalStore`` is OUT as a folder of a filesystem
that every node mounts at the same path (NFS, Lustre, a local disk for one machine). The
shard writers (``dataprep.writers``) still write to ``local_path()``; object storage
(S3 through ``pyarrow.fs``) is a later implementation of this interface plus a writer
that uploads closed shards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import BinaryIO, Protocol

from dataprep.fsutil import commit_tmp, unique_tmp_path_for


class OutputStore(Protocol):
    """OUT as every node of a run sees it (module docstring)."""

    def describe(self) -> str:
        """Where it is, for messages (a path or a URL)."""
        ...

    def exists(self, name: str) -> bool: ...

    def read_bytes(self, name: str) -> bytes: ...

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write ``name`` atomically: readers see the old file, or all of ``data``."""
        ...

    def writer(self, name: str) -> AbstractContextManager[BinaryIO]:
        """A binary file that becomes ``name`` (atomically) only when the block ends without error."""
        ...

    def open_read(self, name: str) -> BinaryIO: ...

    def local_path(self) -> Path:
        """The folder that shard writers write to."""
        ...


class LocalStore:
    """OUT as a folder of a (shared) filesystem; writes are temp file -> fsync -> rename.

    The temporary name is unique to the writer (``unique_tmp_path_for``): a stale task of a
    killed driver writing the same name never shares the file a live task is writing.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def describe(self) -> str:
        return os.fspath(self.root)

    def _path(self, name: str) -> Path:
        return self.root / name

    def exists(self, name: str) -> bool:
        return self._path(name).exists()

    def read_bytes(self, name: str) -> bytes:
        return self._path(name).read_bytes()

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.writer(name) as f:
            f.write(data)

    @contextmanager
    def writer(self, name: str) -> Iterator[BinaryIO]:
        final = self._path(name)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = unique_tmp_path_for(final)
        try:
            with open(tmp, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            commit_tmp(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def open_read(self, name: str) -> BinaryIO:
        return open(self._path(name), "rb")

    def local_path(self) -> Path:
        return self.root
