"""OUT as ``dataprep verify`` and ``dataprep info`` read it: a folder, or a store URL (``s3://bucket/prefix``).

``open_out_files(out)`` gives ``OutFiles``: the manifest, the names of OUT's files, and
``fetch(name)``, a local file to read and its sha256. A folder's files are read where they
are. A store's files are listed once, and each fetched file is streamed through sha256
into a temporary file, removed when the ``fetch`` block ends: a verify of a remote dataset
keeps at most one shard and its sidecar on this machine, never a copy of the dataset.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dataprep.errors import FormatError, UsageError
from dataprep.formats.manifest import MANIFEST_NAME, Manifest, read_manifest, sha256_file
from dataprep.remote import RemoteConfig, RemoteNotFoundError, RemoteStore, is_remote_url
from dataprep.output.store import STATE_DIR


@dataclass(frozen=True)
class FetchedFile:
    """A file of OUT on this machine: ``path``, and the hex sha256 of its bytes."""

    path: Path
    sha256: str


class LocalOutFiles:
    """A shard folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = os.fspath(root)

    def manifest(self) -> Manifest:
        return read_manifest(self.root)

    def names(self) -> list[str]:
        """OUT's files, but hidden ones (the state folder, temporary names)."""
        return sorted(p.name for p in self.root.iterdir() if not p.name.startswith(".") and p.is_file())

    def has(self, name: str) -> bool:
        return (self.root / name).is_file()

    @contextmanager
    def fetch(self, name: str) -> Iterator[FetchedFile]:
        path = self.root / name
        yield FetchedFile(path, sha256_file(path))

    @contextmanager
    def local(self, name: str) -> Iterator[Path]:
        """The file to read, without hashing it."""
        yield self.root / name


class RemoteOutFiles:
    """A dataset in object storage (module docstring); ``scratch``: where fetched files wait to be read."""

    def __init__(self, store: RemoteStore, scratch: Path) -> None:
        self.store = store
        self.scratch = scratch
        self.where = str(store.url)
        self._sizes = {m.name: m.size for m in store.list() if m.name and not m.name.startswith(f"{STATE_DIR}/")}

    def manifest(self) -> Manifest:
        if MANIFEST_NAME not in self._sizes:
            raise FormatError(f"{self.store.url_of(MANIFEST_NAME)}: no manifest (not a dataprep output, or its run "
                              "did not finish)")
        with self.local(MANIFEST_NAME) as path:
            return read_manifest(path.parent)

    def names(self) -> list[str]:
        return sorted(name for name in self._sizes if "/" not in name and not name.startswith("."))

    def has(self, name: str) -> bool:
        return name in self._sizes

    @contextmanager
    def fetch(self, name: str) -> Iterator[FetchedFile]:
        digest = hashlib.sha256()
        with self._download(name, digest) as path:
            yield FetchedFile(path, digest.hexdigest())

    @contextmanager
    def local(self, name: str) -> Iterator[Path]:
        with self._download(name, None) as path:
            yield path

    @contextmanager
    def _download(self, name: str, digest: hashlib._Hash | None) -> Iterator[Path]:
        folder = Path(tempfile.mkdtemp(dir=self.scratch))
        path = folder / Path(name).name
        try:
            with open(path, "wb") as f:
                for chunk in self.store.iter_range(name):
                    f.write(chunk)
                    if digest is not None:
                        digest.update(chunk)
            yield path
        finally:
            path.unlink(missing_ok=True)
            folder.rmdir()


OutFiles = LocalOutFiles | RemoteOutFiles


@contextmanager
def open_out_files(out: str | os.PathLike[str], timeout_s: float = 60.0) -> Iterator[OutFiles]:
    """OUT's files (module docstring); ``timeout_s``: the store requests' time-out without progress."""
    if not is_remote_url(out):
        yield LocalOutFiles(Path(out))
        return
    with RemoteStore(os.fspath(out), RemoteConfig(timeout_s=timeout_s, stall_s=min(15.0, timeout_s))) as store, \
            tempfile.TemporaryDirectory(prefix="dataprep-verify-") as scratch:
        try:
            files = RemoteOutFiles(store, Path(scratch))
        except RemoteNotFoundError as err:
            raise UsageError(f"{out}: the bucket {store.url.bucket!r} does not exist; fix the URL") from err
        yield files
