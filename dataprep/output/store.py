"""``OutputStore``: OUT as every part of a run writes it, the one seam between a run and its output.

Everything a run puts in OUT goes through this interface: closed shards and their index
sidecars (``publish``), the rejects file (``appender``, then ``move`` into place), the
checkpoint, the manifest and the range tasks' shared files (``write_bytes``, ``writer``),
and the renames that publish a range task's attempt (``move``). Names are ``/``-separated
paths relative to OUT.

Shard writers (``dataprep.formats``) stream to ``local_path()``, a folder of this machine,
and hand each closed shard to ``publish``. ``LocalStore`` is OUT as a folder of a
filesystem that every node mounts at the same path (NFS, Lustre, a local disk for one
machine): ``local_path()`` is OUT itself and a closed shard is already in place, so
``publish`` only has to be durable, which the writers' rename already is. Object storage
(``dataprep.output.object_store.ObjectOutputStore``) implements the same methods over a staging
folder: ``publish``, ``write_bytes``, ``writer`` and ``sync`` upload, ``move`` copies in the
store. Files written under ``local_path()`` by other means (the plan, the duplicate set) are
handed to ``publish`` too; a task that reads them on another node asks ``fetch`` first.

What stays on ``local_path()`` without this interface: the run's lock, and the checks and
tidying of ``dataprep.plan.outdir`` (what OUT holds when a run starts; for object storage they run
on the staging folder's image of OUT, ``dataprep.commands.object_output``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from dataprep.formats.durable import commit_tmp, fsync_dir, unique_tmp_path_for

STATE_DIR = ".dataprep"  # OUT's state folder (``dataprep.plan.checkpoint`` names what is in it)


class OutputStore(Protocol):
    """OUT as every node of a run sees it (module docstring)."""

    def describe(self) -> str:
        """Where it is, for messages (a path or a URL)."""
        ...

    def exists(self, name: str) -> bool: ...

    def read_bytes(self, name: str) -> bytes: ...

    def open_read(self, name: str) -> BinaryIO: ...

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write ``name`` atomically and durably: readers see the old file, or all of ``data``."""
        ...

    def writer(self, name: str) -> AbstractContextManager[BinaryIO]:
        """A binary file that becomes ``name`` (atomically, durably) only when the block ends without error."""
        ...

    def appender(self, name: str, *, fresh: bool) -> AbstractContextManager[BinaryIO]:
        """``name`` opened to append to (``fresh``: emptied first); what was written is durable after ``sync``."""
        ...

    def sync(self, file: BinaryIO) -> None:
        """Make what was written so far to a file of ``appender`` durable."""
        ...

    def publish(self, names: Iterable[str]) -> None:
        """The files ``names``, complete and renamed under ``local_path()`` by a shard writer, are now OUT's."""
        ...

    def move(self, renames: Iterable[tuple[str, str]]) -> None:
        """Rename each (source, destination) within OUT, then make the renames durable."""
        ...

    def local_path(self) -> Path:
        """The folder of this machine that shard writers write to."""
        ...

    def fetch(self, names: Iterable[str]) -> Path:
        """Make the files ``names`` of OUT readable under ``local_path()`` (a download where OUT is remote)."""
        ...

    def listing(self) -> dict[str, int]:
        """Every file of OUT outside its state folder: name -> size in bytes."""
        ...

    def remove(self, names: Iterable[str]) -> None:
        """Remove files of OUT (a missing one is not an error)."""
        ...

    def remove_tree(self, name: str) -> None:
        """Remove folder ``name`` of OUT with everything in it."""
        ...

    def child(self, name: str) -> OutputStore:
        """Folder ``name`` of OUT as a store of its own, made now; FileNotFoundError if its parent is gone."""
        ...


class LocalStore:
    """OUT as a folder of a (shared) filesystem; writes are temp file -> fsync -> rename.

    The temporary name is unique to the writer (``unique_tmp_path_for``): a stale task of a
    killed driver writing the same name never shares the file a live task is writing.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def describe(self) -> str:
        return os.fspath(self.root)

    def _path(self, name: str) -> Path:
        return self.root / name

    def exists(self, name: str) -> bool:
        return self._path(name).exists()

    def read_bytes(self, name: str) -> bytes:
        return self._path(name).read_bytes()

    def open_read(self, name: str) -> BinaryIO:
        return open(self._path(name), "rb")

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

    def appender(self, name: str, *, fresh: bool) -> AbstractContextManager[BinaryIO]:
        return open(self._path(name), "wb" if fresh else "ab")

    def sync(self, file: BinaryIO) -> None:
        file.flush()
        os.fsync(file.fileno())

    def publish(self, names: Iterable[str]) -> None:
        """Nothing to do: the writer renamed each file into OUT and made the rename durable."""

    def move(self, renames: Iterable[tuple[str, str]]) -> None:
        folders: set[Path] = set()
        for source, destination in renames:
            os.replace(self._path(source), self._path(destination))
            folders.add(self._path(destination).parent)
        for folder in sorted(folders):
            fsync_dir(folder)

    def local_path(self) -> Path:
        return self.root

    def fetch(self, names: Iterable[str]) -> Path:
        """Nothing to fetch: every node sees OUT."""
        return self.root

    def listing(self) -> dict[str, int]:
        return {p.name: p.stat().st_size for p in self.root.iterdir() if p.name != STATE_DIR and p.is_file()}

    def remove(self, names: Iterable[str]) -> None:
        for name in names:
            self._path(name).unlink(missing_ok=True)
        fsync_dir(self.root)

    def remove_tree(self, name: str) -> None:
        shutil.rmtree(self._path(name), ignore_errors=True)

    def child(self, name: str) -> LocalStore:
        folder = self._path(name)
        folder.parent.mkdir(exist_ok=True)  # not parents: they exist while the run does
        folder.mkdir()
        return LocalStore(folder)


def leaf(name: str) -> str:
    """The last component of a store name (``a/b/c.tar`` -> ``c.tar``)."""
    return PurePosixPath(name).name
