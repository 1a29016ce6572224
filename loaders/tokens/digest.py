"""The order digest: a sha256 of which data a range of global sequences holds.

Each segment of each sequence, in stream order, is one row of five little-endian int64s
``(source, epoch, document, offset, length)``: the source directory (``TokenDataset``) or
mixture source (``Mixture``), the epoch that source is read in, the document within that
source, the first token within the document, the number of tokens. The digest hashes a
version tag, then the rows of sequences ``[start, stop)`` in order, so it does not depend
on how the range is chunked, and it changes when any sequence is skipped, repeated,
reordered or read from other documents. Two runs that read the same global sequences of
the same data prove it by equal digests (``order_digest(start, stop, epoch)``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

__all__ = ["DIGEST_VERSION", "ROW_FIELDS", "OrderDigest", "digest_rows"]

DIGEST_VERSION = b"shardfeed-order-digest-v1\n"
ROW_FIELDS = ("source", "epoch", "document", "offset", "length")


class OrderDigest:
    """An incremental order digest: ``update(rows)`` with int64 [m, 5] rows, ``hexdigest()``."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256(DIGEST_VERSION)
        self.rows = 0

    def update(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype="<i8")
        if rows.ndim != 2 or rows.shape[1] != len(ROW_FIELDS):
            raise ValueError(f"digest rows must be int64 [m, {len(ROW_FIELDS)}] {ROW_FIELDS} (got {rows.shape})")
        self._hash.update(rows.tobytes())
        self.rows += rows.shape[0]

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def digest_rows(chunks: Iterable[np.ndarray]) -> str:
    """The hex sha256 of row chunks (each int64 [m, 5]) in order."""
    digest = OrderDigest()
    for rows in chunks:
        digest.update(rows)
    return digest.hexdigest()
