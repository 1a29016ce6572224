"""The row groups of Parquet shards, read from their footers alone (no shard downloaded to list them).

``row_groups(files, shards)`` gives each shard's row-group sizes from its footer: the last
bytes of the file, read through ``ShardFiles.tail`` (a local file, the node cache's copy
when it has one, else one or two ranged reads of the remote object). pyarrow parses the
footer from a file object that holds only those bytes (``_Tail``). Remote shards are asked
in parallel (``_PARALLEL`` at a time): a dataset of 1,000 shards opens in seconds.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from dataprep.formats.manifest import ShardInfo
from loaders.errors import ShardError
from loaders.read.shard_files import ShardFiles

__all__ = ["row_groups"]

_FOOTER_READ = 64 * 1024  # what pyarrow reads first from a file's end: the tail must cover it
_PARALLEL = 8


class _Tail(io.RawIOBase):
    """A read-only file of ``size`` bytes of which only the last ``len(tail)`` are known (a Parquet footer's)."""

    def __init__(self, tail: bytes, size: int, where: str) -> None:
        super().__init__()
        self._tail, self._size, self._where = tail, size, where
        self._start = size - len(tail)
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]  # the buffer protocol, as io's
        if self._position < self._start:
            raise OSError(f"{self._where}: a footer read at byte {self._position}, before the {len(self._tail)} "
                          "bytes fetched from the end")
        chunk = self._tail[self._position - self._start : self._position - self._start + len(buffer)]
        buffer[: len(chunk)] = chunk
        self._position += len(chunk)
        return len(chunk)


def _footer(files: ShardFiles, info: ShardInfo) -> list[int]:
    """Rows of each row group of shard ``info``."""
    import pyarrow.parquet as pq

    files.check_shard(info)
    where = files.describe(info.name)
    tail = files.tail(info.name, info.bytes, min(info.bytes, _FOOTER_READ))
    if len(tail) < 8 or tail[-4:] != b"PAR1":
        raise ShardError(f"shard {where} listed in the manifest is not a Parquet file (no footer magic at its end)")
    (footer_bytes,) = struct.unpack("<I", tail[-8:-4])
    if footer_bytes + 8 > len(tail):
        if footer_bytes + 8 > info.bytes:
            raise ShardError(f"shard {where}: its footer claims {footer_bytes} bytes, more than the file's "
                             f"{info.bytes}")
        tail = files.tail(info.name, info.bytes, footer_bytes + 8)
    try:
        meta = pq.read_metadata(_Tail(tail, info.bytes, where))
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise ShardError(f"shard {where} listed in the manifest is missing or unreadable: {err}") from err
    return [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]


def row_groups(files: ShardFiles, shards: Sequence[ShardInfo]) -> list[list[int]]:
    """Per shard, in manifest order, the rows of each of its row groups."""
    if not files.batched or len(shards) < 2:
        return [_footer(files, info) for info in shards]
    with ThreadPoolExecutor(min(_PARALLEL, len(shards)), thread_name_prefix="parquet-footers") as pool:
        return list(pool.map(lambda info: _footer(files, info), shards))
