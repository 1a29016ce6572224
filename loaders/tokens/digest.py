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

from collections.abc import Iterable

import numpy as np

from loaders.read.grid import OrderDigest

__all__ = ["DIGEST_VERSION", "ROW_FIELDS", "digest_rows", "token_digest"]

DIGEST_VERSION = b"shardfeed-order-digest-v1\n"
ROW_FIELDS = ("source", "epoch", "document", "offset", "length")


def token_digest() -> OrderDigest:
    """The order digest of a token stream: the one ``OrderDigest``, over rows of ``ROW_FIELDS``."""
    return OrderDigest(DIGEST_VERSION, ROW_FIELDS)


def digest_rows(chunks: Iterable[np.ndarray]) -> str:
    """The hex sha256 of row chunks (each int64 [m, 5]) in order."""
    digest = token_digest()
    for rows in chunks:
        digest.update(rows)
    return digest.hexdigest()
