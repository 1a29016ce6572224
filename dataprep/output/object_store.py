"""``ObjectOutputStore``: OUT in object storage (``s3://``, ``gs://``, ``az://``) as an ``OutputStore``.

Every file is written to a staging folder of this machine first (``local_path()``), then
uploaded with the client's retries (``dataprep.remote``): a closed shard and its sidecar when
the writer hands them to ``publish`` (each stored with its sha256 as the object's
``sha256`` attribute, then its local bytes dropped: the staging folder keeps a sparse file of
its size, so the run's checks of OUT still see it); a file of ``writer`` or ``write_bytes``
when it is complete; the file of an ``appender`` whenever ``sync`` makes it durable and when it
closes changed since its last upload (an empty rejects file included). State files (plan,
duplicate set) are kept in the staging folder and uploaded once per change.

Objects up to ``MAX_SINGLE_PUT_BYTES`` (5 GiB, S3's limit for one PUT) go in a single PUT,
so a killed run never leaves a multipart upload open; a larger file (a ``--shard-size``
above 5 GiB) is uploaded in parts of ``PART_BYTES``, which the client aborts when the upload
fails, but which ``kill -9`` can leave open: a bucket lifecycle rule
(``AbortIncompleteMultipartUpload``) removes those. ``move`` is a server-side copy then a
delete of the source (object stores have no rename): what publishes a range task's
attempt (``dataprep.engines.range_driver``) without its bytes passing through the driver.

Pickled (to a range task on any node), a store keeps its URL and client settings only; the
copy stages in a private temporary folder, removed when the copy is dropped.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from dataprep.formats.manifest import sha256_file
from dataprep.remote import RemoteConfig, RemoteStore
from dataprep.output.store import STATE_DIR, LocalStore

MAX_SINGLE_PUT_BYTES = 5 * 2**30
PART_BYTES = 64 * 2**20
SHA256_ATTRIBUTE = "sha256"


def output_config(timeout_s: float) -> RemoteConfig:
    """The client settings of a run's output: single PUTs up to 5 GiB, ``timeout_s`` without progress."""
    return RemoteConfig(timeout_s=timeout_s, stall_s=min(15.0, timeout_s), part_bytes=PART_BYTES,
                        max_single_put_bytes=MAX_SINGLE_PUT_BYTES)


def is_state(name: str) -> bool:
    """Whether ``name`` is in OUT's state folder (kept in staging; the rest is uploaded and dropped)."""
    return name == STATE_DIR or name.startswith(f"{STATE_DIR}/")


class ObjectOutputStore:
    """OUT at ``remote``'s URL, staged in ``staging`` (module docstring); None: a private temporary folder."""

    def __init__(self, remote: RemoteStore, staging: Path | None = None) -> None:
        self.remote = remote
        self._staging = staging
        self._appending: dict[int, str] = {}  # id of an appender's file -> its name
        self._uploaded: dict[str, tuple[int, int]] = {}  # state file -> (size, mtime_ns) when last uploaded

    def __getstate__(self) -> dict[str, Any]:
        return {"remote": self.remote}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["remote"])  # type: ignore[misc]  # __setstate__ rebuilds

    def describe(self) -> str:
        return str(self.remote.url)

    def local_path(self) -> Path:
        if self._staging is None:
            self._staging = Path(tempfile.mkdtemp(prefix="dataprep-task-"))
            weakref.finalize(self, shutil.rmtree, self._staging, True)
        return self._staging

    def _local(self) -> LocalStore:
        return LocalStore(self.local_path())

    # -- reads --
    def exists(self, name: str) -> bool:
        return self.remote.exists(name)

    def read_bytes(self, name: str) -> bytes:
        return self.remote.read_bytes(name)

    def open_read(self, name: str) -> BinaryIO:
        return io.BufferedReader(_ObjectReader(self.remote.iter_range(name)), 1 << 20)

    def fetch(self, names: Iterable[str]) -> Path:
        """Download each of ``names`` not yet in the staging folder (under a unique name, then renamed)."""
        local = self._local()
        for name in names:
            if not (self.local_path() / name).exists():
                with local.writer(name) as f:
                    for chunk in self.remote.iter_range(name):
                        f.write(chunk)
        return self.local_path()

    def listing(self) -> dict[str, int]:
        return {m.name: m.size for m in self.remote.list() if m.name and not is_state(m.name)}

    # -- writes --
    def write_bytes(self, name: str, data: bytes) -> None:
        self._local().write_bytes(name, data)
        self.remote.put(name, data)

    @contextmanager
    def writer(self, name: str) -> Iterator[BinaryIO]:
        with self._local().writer(name) as f:
            yield f
        self._upload(name)

    @contextmanager
    def appender(self, name: str, *, fresh: bool) -> Iterator[BinaryIO]:
        path = self.local_path() / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb" if fresh else "ab") as f:
            self._appending[id(f)] = name
            try:
                yield f
            finally:
                self._appending.pop(id(f), None)
        if self._uploaded.get(name) != stamp(path):  # closed unsynced (a file no append reached): stored too
            self._upload(name)

    def sync(self, file: BinaryIO) -> None:
        file.flush()
        os.fsync(file.fileno())
        self._upload(self._appending[id(file)])

    def publish(self, names: Iterable[str]) -> None:
        """Upload each file (its sha256 as an attribute); drop the local bytes of all but state files."""
        for name in names:
            path = self.local_path() / name
            if is_state(name):
                if self._uploaded.get(name) != stamp(path):
                    self._upload(name)
                continue
            self.remote.put(name, path, attributes={SHA256_ATTRIBUTE: sha256_file(path)})
            size = path.stat().st_size
            os.truncate(path, 0)
            os.truncate(path, size)  # a sparse file of the shard's size: OUT's checks see it, no disk is used

    def move(self, renames: Iterable[tuple[str, str]]) -> None:
        for source, destination in renames:
            self.remote.copy(source, destination)
            self.remote.delete([source])
            local = self.local_path() / source
            if local.exists():
                os.replace(local, self.local_path() / destination)

    def remove(self, names: Iterable[str]) -> None:
        names = list(names)
        for start in range(0, len(names), 1000):  # S3 deletes at most 1,000 objects per request
            self.remote.delete(names[start : start + 1000])
        for name in names:
            (self.local_path() / name).unlink(missing_ok=True)

    def remove_tree(self, name: str) -> None:
        self.remove([m.name for m in self.remote.list(name)])
        shutil.rmtree(self.local_path() / name, ignore_errors=True)

    def child(self, name: str) -> ObjectOutputStore:
        """Prefix ``name`` as a store, staged in a private folder made now (before a fork: the parent removes it)."""
        store = ObjectOutputStore(RemoteStore(self.remote.url.child(name), self.remote.config))
        store.local_path()
        return store

    def mark_stored(self, names: Iterable[str]) -> None:
        """The staged state files ``names`` are as the store holds them: ``publish`` skips them while unchanged."""
        for name in names:
            self._uploaded[name] = stamp(self.local_path() / name)

    def _upload(self, name: str) -> None:
        path = self.local_path() / name
        before = stamp(path)
        self.remote.put(name, path)
        self._uploaded[name] = before


def stamp(path: Path) -> tuple[int, int]:
    """(size in bytes, mtime in ns) of a staged file: what tells a changed one."""
    st = path.stat()
    return st.st_size, st.st_mtime_ns


class _ObjectReader(io.RawIOBase):
    """An object's body (chunks of ``RemoteStore.iter_range``) as a readable binary stream."""

    def __init__(self, chunks: Iterator[bytes | memoryview]) -> None:
        self._chunks = chunks
        self._left = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._left = memoryview(chunk).cast("B")
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n
