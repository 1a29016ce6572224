"""Random access to the samples of a dataprep tar-shard directory, local or read through the node cache.

``TarShardSet`` opens the manifest and every index sidecar once and keeps all sample
metadata in flat numpy arrays (no per-sample Python objects, so forked workers do not
copy it page by page). A sample is one ``pread`` of its byte range, sliced per field,
through ``loaders.read.shard_files`` (a local folder's descriptors, or the cache's leases).
Each sidecar is checked against the manifest (shard name, size, sample count, byte ranges
inside the shard) before its arrays are used.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from dataprep.formats import FormatError
from dataprep.formats.tar.index import ShardIndex
from dataprep.formats.manifest import FORMAT_WDS, Manifest, ShardInfo
from loaders.errors import SampleError, ShardError
from loaders.read.shard_files import LocalShardFiles, ShardFiles


class TarShardSet:
    """All samples of the tar shards in ``root``; sample ``i`` is global across shards.

    Arrays (length N = number of samples): ``shard_of`` int32, ``sample_offset`` int64
    (byte offset in its shard), ``sample_size`` int64; [N, F]: ``field_offset`` (-1 when
    absent) and ``field_size``, F = len(``fields``).
    """

    def __init__(self, root: str | os.PathLike[str] | ShardFiles, *, fields: Sequence[str] | None = None) -> None:
        self.files: ShardFiles = LocalShardFiles(root) if isinstance(root, (str, os.PathLike)) else root
        self.root = self.files.where
        self.manifest: Manifest = self.files.manifest()
        if self.manifest.format != FORMAT_WDS:
            raise ShardError(f"{self.root}: holds {self.manifest.format} shards; use ParquetShardDataset")
        indexes = [self._open_index(info) for info in self.manifest.shards]
        all_fields = tuple(sorted({f for ix in indexes for f in ix.fields}))
        if fields is not None:
            missing = sorted(set(fields) - set(all_fields))
            if missing:
                raise ShardError(f"{self.root}: no shard has field(s) {missing}; fields present: {list(all_fields)}")
        self.fields: tuple[str, ...] = tuple(fields) if fields is not None else all_fields
        self.shard_names = [s.name for s in self.manifest.shards]
        self._build_arrays(indexes)

    def _open_index(self, info: ShardInfo) -> ShardIndex:
        self.files.check_shard(info)
        name = info.index or info.name + ".idx"
        where = self.files.describe(name)

        def parse(data: bytes) -> ShardIndex:
            try:
                index = ShardIndex.from_bytes(data, where=where)
            except FormatError as err:
                raise ShardError(str(err)) from err
            _check_index(index, info, where)
            return index

        return self.files.read_sidecar(name, parse)

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
        shard = self.shard_names[int(self.shard_of[i])]
        try:
            data = self.files.pread(shard, end - start, start)
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
        return SampleError(f"{self.files.describe(shard)}: sample {self.key(i)!r} at byte {offset}: {what}",
                           shard=shard, key=self.key(i), offset=offset, index=i)

    def close(self) -> None:
        self.files.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing useful to report
            pass


def _check_index(index: ShardIndex, info: ShardInfo, where: str) -> None:
    """ShardError unless ``index`` describes ``info``'s shard: its size, its count, every byte range inside it.

    The manifest records no sha256 of a tar's sidecar: these checks are what catches a damaged one.
    """
    if index.num_samples != info.num_samples:
        raise ShardError(f"{where} lists {index.num_samples} samples, the manifest {info.num_samples} for {info.name}")
    if index.shard_bytes != info.bytes:
        raise ShardError(f"{where} describes a shard of {index.shard_bytes} bytes, the manifest says {info.name} is "
                         f"{info.bytes} bytes (a damaged or foreign sidecar)")
    ends = index.sample_offset + index.sample_size
    present = index.field_offset >= 0
    fields_end = np.where(present, index.field_offset + index.field_size, 0)
    inside = (index.sample_offset >= 0).all() and (index.sample_size >= 0).all() and (ends <= info.bytes).all() \
        and (index.field_size >= 0).all() and (fields_end <= info.bytes).all() \
        and (np.diff(index.key_end, prepend=0) >= 0).all() and int(index.key_end[-1:].sum()) <= index.key_blob.size
    if not inside:
        raise ShardError(f"{where}: byte ranges outside the {info.bytes} bytes of shard {info.name} "
                         "(a damaged sidecar)")
