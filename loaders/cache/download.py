"""One object into the cache: resume the partial file by byte range, hash while streaming, verify, publish.

``fill`` runs with the partial file exclusively locked (``space.Claim``). It continues
from the bytes already there (an interrupted download: they are hashed once from the
local disk, the rest is requested as a byte range), hashes every chunk as it is written
(no second read), and checks size and sha256 against the manifest. A mismatch empties the
file and fetches the object again, up to ``max_refetches`` times, then raises
``ShardIntegrityError`` naming the shard, its URL and both digests. ``publish`` makes the
verified file durable and renames it into ``objects/``: readers only ever see verified
objects.

What a ``kill -9`` leaves to resume is what reached the partial file: each chunk is written
as it arrives, so the cache's client streams in chunks of at most ``DOWNLOAD_CHUNK_BYTES``
(``download_config``). The client otherwise gathers ``RemoteConfig.chunk_bytes`` (1 MiB) in
memory before handing any of it over, so a shard smaller than that was written at once when
complete, and a download killed before then left an empty partial file and was fetched again
from byte 0.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import replace
from pathlib import Path

from dataprep.formats.durable import start_writeback
from dataprep.remote import ObjectMeta, RemoteConfig, RemoteError, RemoteStore
from loaders.cache.catalog import CacheEntry
from loaders.cache.errors import ShardFetchError, ShardIntegrityError

__all__ = ["DOWNLOAD_CHUNK_BYTES", "DownloadStopped", "download_config", "fill", "publish"]

log = logging.getLogger("loaders.cache")
_HASH_READ = 1 << 20
_WRITEBACK_BYTES = 16 << 20
# The most a kill -9 loses of a download in flight: 256 KiB chunks cost ~4,000 Python steps per
# GB (a write and a hash update each), noise beside hashing the GB itself.
DOWNLOAD_CHUNK_BYTES = 256 << 10


def download_config(remote: RemoteConfig) -> RemoteConfig:
    """``remote`` with downloads streamed in chunks of at most ``DOWNLOAD_CHUNK_BYTES`` (module docstring)."""
    return replace(remote, chunk_bytes=min(remote.chunk_bytes, DOWNLOAD_CHUNK_BYTES))


class DownloadStopped(Exception):
    """The cache closed while a planned download ran; its partial file stays for a later resume."""


class _SizeMismatch(Exception):
    def __init__(self, store_size: int) -> None:
        super().__init__(store_size)
        self.store_size = store_size


def fill(store: RemoteStore, entry: CacheEntry, size: int, fd: int, *, max_refetches: int,
         stop: threading.Event | None = None) -> int:
    """Make the file of ``fd`` hold ``entry``'s ``size`` verified bytes; returns the bytes downloaded."""
    url = store.url_of(entry.name)
    downloaded = 0
    got = ""
    for attempt in range(max_refetches + 1):
        offset = os.fstat(fd).st_size
        if offset > size:
            os.ftruncate(fd, 0)
            offset = 0
        digest = hashlib.sha256()
        _hash_prefix(fd, offset, digest)
        if offset:
            log.info("resuming %s at byte %d of %d", url, offset, size)
        downloaded += _stream(store, entry, size, fd, offset, digest, stop)
        got = digest.hexdigest()
        if entry.sha256 is None or got == entry.sha256:
            return downloaded
        log.warning("%s: sha256 %s, the manifest says %s; fetching it again (%d of %d)", url, got, entry.sha256,
                    attempt + 1, max_refetches)
        os.ftruncate(fd, 0)
    raise ShardIntegrityError(f"shard {entry.name} ({url}): downloaded {max_refetches + 1} time(s), its sha256 is "
                              f"{got}, the manifest says {entry.sha256}. The object differs from the manifest "
                              "(rewritten without its manifest, or corrupted in transit every time)",
                              shard=entry.name, url=url)


def _hash_prefix(fd: int, nbytes: int, digest: hashlib._Hash) -> None:
    position = 0
    while position < nbytes:
        data = os.pread(fd, min(_HASH_READ, nbytes - position), position)
        if not data:
            break
        digest.update(data)
        position += len(data)


def _stream(store: RemoteStore, entry: CacheEntry, size: int, fd: int, offset: int,
            digest: hashlib._Hash, stop: threading.Event | None) -> int:
    """Download bytes ``[offset, size)`` into ``fd``, hashing them; the bytes received."""
    start = offset
    url = store.url_of(entry.name)

    def check(meta: ObjectMeta) -> None:
        if meta.size != size:
            raise _SizeMismatch(meta.size)

    flushed = offset
    try:
        for chunk in store.iter_range(entry.name, offset, size, on_meta=check) if offset < size else ():
            if stop is not None and stop.is_set():
                raise DownloadStopped(url)
            _write_all(fd, chunk, offset)
            digest.update(chunk)
            offset += len(chunk)
            if offset - flushed >= _WRITEBACK_BYTES:  # the disk writes while the network reads: a short fsync
                start_writeback(fd, flushed, offset - flushed)
                flushed = offset
    except _SizeMismatch as err:
        raise ShardIntegrityError(f"shard {entry.name} ({url}) is {err.store_size} bytes in the store, the manifest "
                                  f"says {size} (rewritten without its manifest?)", shard=entry.name, url=url) from None
    except RemoteError as err:
        raise ShardFetchError(f"shard {entry.name}: download from {url} failed at byte {offset} of {size}: {err}",
                              shard=entry.name, url=url) from err
    return offset - start


def _write_all(fd: int, chunk: bytes | memoryview, offset: int) -> None:
    view = memoryview(chunk)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def publish(fd: int, partial: Path, final: Path) -> None:
    """Make the verified partial file durable and give it its final name (under its lock)."""
    os.fsync(fd)
    os.replace(partial, final)
