"""Append-only files a plan is built with: 1-d ``.npy`` arrays written as they grow, pickled objects read back by index.

Planning keeps none of its per-input arrays in memory: each is written in blocks as the
inputs stream by (``NpyWriter``: the header, padded to a fixed size, gets the final
length at ``close``), read back in blocks (``read_npy_chunks``, plain reads: no mapping,
so the pages never count in the process's RSS) or one entry at a time (``PickleFile``:
one ``pread`` of the offsets and one of the object).

``PickleSpill`` writes a run of pickled objects (``units.bin``, the replaced units) with their
offsets (int64 [N + 1], byte ranges in the data file) and one int64 value per object
(a unit's input bytes, a replaced unit's index).
"""

from __future__ import annotations

import os
import pickle
import struct
from array import array
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

__all__ = ["NPY_HEADER_BYTES", "NpyWriter", "PickleFile", "PickleSpill", "read_npy_chunks"]

NPY_HEADER_BYTES = 128  # magic, version 1.0, header length, the dict padded: room for any 1-d length
_BLOCK_ROWS = 1 << 16  # values buffered per array before a write (512 KiB of int64)


def npy_header(dtype: np.dtype, count: int) -> bytes:
    """The 128-byte header of a 1-d ``.npy`` (format 1.0) of ``count`` values of ``dtype``."""
    text = repr({"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (count,)})
    body = text.encode("latin1").ljust(NPY_HEADER_BYTES - 11) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body


class NpyWriter:
    """A 1-d ``.npy`` file written in blocks: ``write`` arrays, ``append`` single values, ``close`` (fsync'd)."""

    def __init__(self, path: Path, dtype: np.dtype | type) -> None:
        self.path, self.dtype = path, np.dtype(dtype)
        if self.dtype.kind not in "iu" or self.dtype.itemsize != 8:
            raise ValueError(f"NpyWriter writes int64 or uint64 values (got {self.dtype})")
        self.count = 0
        self._pending = array("q" if self.dtype.kind == "i" else "Q")
        self._file = open(path, "wb")
        self._file.write(npy_header(self.dtype, 0))

    def append(self, value: int) -> None:
        self._pending.append(value)
        if len(self._pending) >= _BLOCK_ROWS:
            self._drain()

    def write(self, values: np.ndarray) -> None:
        self._drain()
        data = np.ascontiguousarray(values, dtype=self.dtype)
        self._file.write(data.data)
        self.count += len(data)

    def _drain(self) -> None:
        if self._pending:
            self._file.write(self._pending.tobytes())
            self.count += len(self._pending)
            self._pending = array(self._pending.typecode)

    def close(self) -> int:
        """Write what is pending and the header's length; fsync. Returns the number of values."""
        if self._file.closed:
            return self.count
        self._drain()
        self._file.seek(0)
        self._file.write(npy_header(self.dtype, self.count))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return self.count


def read_npy_chunks(path: Path, rows: int) -> Iterator[np.ndarray]:
    """The values of a 1-d ``.npy`` file, ``rows`` at a time, by plain reads (no memory map)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(f)
        left = int(np.prod(shape))
        while left > 0:
            chunk = np.fromfile(f, dtype=dtype, count=min(rows, left))
            if not len(chunk):
                raise ValueError(f"{path}: ends {left} values before its header's length")
            left -= len(chunk)
            yield chunk


def npy_data_offset(path: Path) -> int:
    """Byte offset of the values in a ``.npy`` file."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            np.lib.format.read_array_header_1_0(f)
        else:
            np.lib.format.read_array_header_2_0(f)
        return f.tell()


class PickleSpill:
    """Pickled objects appended to ``data``; offsets int64 [N + 1] to ``offsets``; an int64 value each to ``values``."""

    def __init__(self, data: Path, offsets: Path, values: Path) -> None:
        self._file = open(data, "wb", buffering=1 << 20)
        self._offsets, self._values = NpyWriter(offsets, np.int64), NpyWriter(values, np.int64)
        self._offsets.append(0)
        self._end = 0
        self.max_value = -1

    def add(self, item: object, value: int) -> None:
        data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        self._file.write(data)
        self._end += len(data)
        self._offsets.append(self._end)
        self._values.append(value)
        if value > self.max_value:
            self.max_value = value

    def close(self) -> int:
        """Flush and fsync everything; the number of objects."""
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        self._offsets.close()
        return self._values.close()

    def __enter__(self) -> PickleSpill:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class PickleFile:
    """The objects of a ``PickleSpill`` read back by index (two ``pread`` each); a context manager."""

    def __init__(self, data: Path, offsets: Path) -> None:
        self._base = npy_data_offset(offsets)
        self._data_fd = os.open(data, os.O_RDONLY)
        self._offsets_fd = os.open(offsets, os.O_RDONLY)

    def __getitem__(self, index: int) -> Any:
        start, end = struct.unpack("<qq", os.pread(self._offsets_fd, 16, self._base + 8 * index))
        return pickle.loads(os.pread(self._data_fd, end - start, start))

    def close(self) -> None:
        if self._data_fd >= 0:
            os.close(self._data_fd)
            os.close(self._offsets_fd)
            self._data_fd = self._offsets_fd = -1

    def __enter__(self) -> PickleFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
