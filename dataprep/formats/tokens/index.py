"""The token shard format: Megatron-Core's ``IndexedDataset`` (``<prefix>.bin`` + ``<prefix>.idx``).

``<prefix>.bin`` holds every document's token ids back to back (dtype below, little-endian,
no header). ``<prefix>.idx``, little-endian, version 1, is byte-compatible with
``megatron.core.datasets.indexed_dataset.IndexedDataset(prefix)``::

    offset 0   9 bytes   magic b"MMIDIDX\\x00\\x00"
    offset 9   uint64    version, 1
    offset 17  uint8     dtype code of the .bin (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
                         6 float64, 7 float32, 8 uint16)
    offset 18  uint64    S, sequence count
    offset 26  uint64    D, document index count (documents + 1)
    offset 34  int32[S]  sequence_lengths   tokens in each sequence
               int64[S]  sequence_pointers  byte offset of each sequence in the .bin
               int64[D]  document_indices   sequence index where each document starts, then S

shardfeed writes one sequence per document, so ``document_indices`` is ``0, 1, ..., S`` and
document i is tokens ``[pointer_i / itemsize, + length_i)`` of the .bin. The dtype is uint16
when the vocabulary has fewer than 65,500 ids, else int32 (Megatron's ``optimal_dtype``).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dataprep.errors import FormatError

__all__ = [
    "BIN_SUFFIX",
    "DTYPE_CODES",
    "IDX_HEADER_BYTES",
    "IDX_MAGIC",
    "IDX_SUFFIX",
    "IDX_VERSION",
    "TokenIndex",
    "encode_token_index",
    "read_token_index",
    "token_dtype",
]

IDX_MAGIC = b"MMIDIDX\x00\x00"
IDX_VERSION = 1
IDX_HEADER_BYTES = 34
BIN_SUFFIX = ".bin"
IDX_SUFFIX = ".idx"
DTYPE_CODES: dict[np.dtype, int] = {
    np.dtype(np.uint8): 1, np.dtype(np.int8): 2, np.dtype(np.int16): 3, np.dtype(np.int32): 4,
    np.dtype(np.int64): 5, np.dtype(np.float64): 6, np.dtype(np.float32): 7, np.dtype(np.uint16): 8,
}
_CODE_DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}
_UINT16_VOCAB_LIMIT = 65_500  # Megatron-Core's threshold, kept as is for byte compatibility


def token_dtype(vocab_size: int) -> np.dtype:
    """The .bin dtype for a vocabulary of ``vocab_size`` ids: uint16 below 65,500 ids, else int32."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive (got {vocab_size})")
    return np.dtype(np.uint16) if vocab_size < _UINT16_VOCAB_LIMIT else np.dtype(np.int32)


def encode_token_index(dtype: np.dtype, lengths: np.ndarray) -> bytes:
    """The .idx bytes for one sequence per document of ``lengths`` tokens (int [S]) in a .bin of ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype not in DTYPE_CODES:
        raise ValueError(f"dtype {dtype} has no Megatron code (known: {', '.join(map(str, DTYPE_CODES))})")
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1 or (lengths.size and int(lengths.min()) < 0) or (
            lengths.size and int(lengths.max()) > np.iinfo(np.int32).max):
        raise ValueError("lengths must be a 1-D array of counts in 0..2^31-1")
    count = int(lengths.shape[0])
    pointers = np.zeros(count, dtype=np.int64)
    if count > 1:
        np.cumsum(lengths[:-1] * dtype.itemsize, out=pointers[1:])
    head = IDX_MAGIC + struct.pack("<QBQQ", IDX_VERSION, DTYPE_CODES[dtype], count, count + 1)
    documents = np.arange(count + 1, dtype=np.int64)
    return b"".join((head, lengths.astype("<i4").tobytes(), pointers.astype("<i8").tobytes(),
                     documents.astype("<i8").tobytes()))


@dataclass(frozen=True, eq=False)
class TokenIndex:
    """A decoded .idx: dtype of the .bin and three flat arrays (views of a read-only memory map).

    lengths: int32 [S] tokens per sequence; pointers: int64 [S] byte offsets in the .bin;
    documents: int64 [D] sequence index of each document's start, then S.
    """

    path: Path
    dtype: np.dtype
    lengths: np.ndarray
    pointers: np.ndarray
    documents: np.ndarray

    @property
    def num_sequences(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum(dtype=np.int64))


def read_token_index(path: str | os.PathLike[str]) -> TokenIndex:
    """Map and check ``<prefix>.idx``; FormatError naming the file and byte offset when malformed."""
    path = Path(path)
    try:
        data = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as err:  # ValueError: an empty file cannot be mapped
        raise FormatError(f"{path}: cannot map the token index ({type(err).__name__}: {err})") from err
    if data.shape[0] < IDX_HEADER_BYTES or bytes(data[:9]) != IDX_MAGIC:
        raise FormatError(f"{path}: not a Megatron token index (expected {IDX_MAGIC!r} at byte 0, "
                          f"got {bytes(data[:9])!r} in a {data.shape[0]}-byte file)")
    version, code, count, doc_count = struct.unpack("<QBQQ", bytes(data[9:IDX_HEADER_BYTES]))
    if version != IDX_VERSION:
        raise FormatError(f"{path}: token index version {version} at byte 9 (this reader knows {IDX_VERSION})")
    if code not in _CODE_DTYPES:
        raise FormatError(f"{path}: unknown dtype code {code} at byte 17 (known: {sorted(_CODE_DTYPES)})")
    expected = IDX_HEADER_BYTES + 12 * count + 8 * doc_count
    if data.shape[0] < expected:
        raise FormatError(f"{path}: truncated: {data.shape[0]} bytes, the header's {count} sequences and "
                          f"{doc_count} document indices need {expected}")
    offset = IDX_HEADER_BYTES
    lengths = data[offset:offset + 4 * count].view("<i4")
    offset += 4 * count
    pointers = data[offset:offset + 8 * count].view("<i8")
    offset += 8 * count
    documents = data[offset:offset + 8 * doc_count].view("<i8")
    return TokenIndex(path=path, dtype=_CODE_DTYPES[code], lengths=lengths, pointers=pointers, documents=documents)
