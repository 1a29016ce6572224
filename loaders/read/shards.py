"""Random access to the samples of a dataprep tar-shard directory.

``TarShardSet`` opens the manifest and every index sidecar once and keeps all sample
metadata in flat numpy arrays (no per-sample Python objects, so forked workers do not
copy it page by page). A sample is one ``os.pread`` of its byte range, sliced per field.
File descriptors are opened lazily, per process (re-opened after a fork), and shared
by threads (pread does not move a file position).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dataprep.errors import FormatError
from dataprep.index import ShardIndex, read_index
from dataprep.manifest import FORMAT_WDS, Manifest, read_manifest
from loaders.errors import SampleError, ShardError


class TarShardSet:
    """All samples of the tar shards in ``root``; sample ``i`` is global across shards.

    Arrays (length N = number of samples): ``shard_of`` int32, ``sample_offset`` int64
    (byte offset in its shard), ``sample_size`` int64; [N, F]: ``field_offset`` (-1 when
    absent) and ``field_size``, F = len(``fields``).
    """

    def __init__(self, root: str | os.PathLike[str], *, fields: Sequence[str] | None = None) -> None:
        self.root = Path(root)
        try:
            self.manifest: Manifest = read_manifest(self.root)
        except FormatError as err:
            raise ShardError(str(err)) from err
        if self.manifest.format != FORMAT_WDS:
            raise ShardError(f"{self.root}: holds {self.manifest.format} shards; use ParquetShardDataset")
        indexes = [self._open_index(i) for i in range(len(self.manifest.shards))]
        all_fields = tuple(sorted({f for ix in indexes for f in ix.fields}))
        if fields is not None:
            missing = sorted(set(fields) - set(all_fields))
            if missing:
                raise ShardError(f"{self.root}: no shard has field(s) {missing}; fields present: {list(all_fields)}")
        self.fields: tuple[str, ...] = tuple(fields) if fields is not None else all_fields
        self.shard_names = [s.name for s in self.manifest.shards]
        self._build_arrays(indexes)
        self._fds: dict[int, int] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _open_index(self, i: int) -> ShardIndex:
        info = self.manifest.shards[i]
        path = self.root / info.name
        try:
            size = path.stat().st_size
        except OSError as err:
            raise ShardError(f"shard {path} listed in the manifest is missing or unreadable: {err.strerror}") from err
        if size != info.bytes:
            raise ShardError(f"shard {path} is {size} bytes, the manifest says {info.bytes} (truncated or replaced?)")
        try:
            index = read_index(self.root / (info.index or info.name + ".idx"))
        except FormatError as err:
            raise ShardError(str(err)) from err
        if index.num_samples != info.num_samples:
            raise ShardError(f"index of {path} lists {index.num_samples} samples, the manifest {info.num_samples}")
        return index

    def _build_arrays(self, indexes: list[ShardIndex]) -> None:
        counts = [ix.num_samples for ix in indexes]
        self.num_samples = int(sum(counts))
        self.shard_of = np.repeat(np.arange(len(indexes), dtype=np.int32), counts)
        self.shard_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.sample_offset = np.concatenate([ix.sample_offset for ix in indexes] or [np.zeros(0, np.int64)])
        self.sample_size = np.concatenate([ix.sample_size for ix in indexes] or [np.zeros(0, np.int64)])
        nf = len(self.fields)
        self.field_offset = np.full((self.num_samples, nf), -1, dtype=np.int64)
        self.field_size = np.zeros((self.num_samples, nf), dtype=np.int64)
        for ix, start in zip(indexes, self.shard_start[:-1].tolist()):
            for j, name in enumerate(self.fields):
                if name in ix.fields:
                    col = ix.fields.index(name)
                    self.field_offset[start : start + ix.num_samples, j] = ix.field_offset[:, col]
                    self.field_size[start : start + ix.num_samples, j] = ix.field_size[:, col]
        key_lengths = np.concatenate([np.diff(ix.key_end, prepend=0) for ix in indexes] or [np.zeros(0, np.int64)])
        self.key_end = np.cumsum(key_lengths, dtype=np.int64)
        self.key_blob = np.concatenate([ix.key_blob for ix in indexes] or [np.zeros(0, np.uint8)])

    def __len__(self) -> int:
        return self.num_samples

    def key(self, i: int) -> str:
        start = int(self.key_end[i - 1]) if i > 0 else 0
        return bytes(self.key_blob[start : int(self.key_end[i])]).decode("utf-8")

    def shard_name(self, i: int) -> str:
        return self.shard_names[int(self.shard_of[i])]

    def read(self, i: int) -> dict[str, bytes]:
        """The encoded fields of sample ``i`` (only ``self.fields``), read with one pread."""
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample index {i} out of range for {self.num_samples} samples in {self.root}")
        offsets, sizes = self.field_offset[i], self.field_size[i]
        present = offsets >= 0
        if not present.any():
            return {}
        start = int(offsets[present].min())
        end = int((offsets + sizes)[present].max())
        shard = int(self.shard_of[i])
        try:
            data = os.pread(self._fd(shard), end - start, start)
        except OSError as err:
            raise self.sample_error(i, f"read failed: {err.strerror}") from err
        if len(data) != end - start:
            raise self.sample_error(i, f"short read: {len(data)} of {end - start} bytes at offset {start} "
                                       "(shard truncated?)")
        if int(present.sum()) == 1:  # one field spans the whole read: no second copy of its bytes
            return {self.fields[int(present.argmax())]: data}
        view = memoryview(data)
        return {
            name: bytes(view[int(offsets[j]) - start : int(offsets[j] + sizes[j]) - start])
            for j, name in enumerate(self.fields)
            if present[j]
        }

    def sample_error(self, i: int, what: str) -> SampleError:
        """A SampleError about sample ``i`` naming its shard, key and byte offset, saying ``what`` went wrong."""
        shard = self.shard_name(i)
        offset = int(self.sample_offset[i])
        return SampleError(f"{self.root / shard}: sample {self.key(i)!r} at byte {offset}: {what}",
                           shard=shard, key=self.key(i), offset=offset, index=i)

    def _fd(self, shard: int) -> int:
        if os.getpid() != self._pid:  # forked: descriptors are shared with the parent; reopen
            self._fds, self._pid, self._lock = {}, os.getpid(), threading.Lock()
        fd = self._fds.get(shard)
        if fd is None:
            with self._lock:
                fd = self._fds.get(shard)
                if fd is None:
                    path = self.root / self.shard_names[shard]
                    try:
                        fd = os.open(path, os.O_RDONLY)
                    except OSError as err:
                        raise ShardError(f"cannot open shard {path}: {err.strerror}") from err
                    self._fds[shard] = fd
        return fd

    def close(self) -> None:
        if os.getpid() == self._pid:
            for fd in self._fds.values():
                os.close(fd)
        self._fds = {}

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_fds"], state["_lock"] = {}, None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._pid, self._lock = -1, threading.Lock()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing useful to report
            pass
