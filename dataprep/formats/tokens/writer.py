"""Token shards: each document's ids appended to ``<shard>.bin``, its ``<shard>.idx`` written on close.

A shard is a Megatron-Core ``IndexedDataset`` pair (format: ``dataprep.formats.tokens.index``), named
``f"{prefix}-{n:06d}.bin"`` and ``.idx`` (the write loop passes ``prefix = f"{run prefix}-{range:05d}"``,
as for tar and Parquet shards). One sequence per document, in write order.

Both files are written under temporary names (``fsutil.tmp_path_for``) and fsync'd, then
renamed: the ``.bin`` first, the ``.idx`` last, each rename made durable before the next. The
``.idx`` is the commit point: a ``.bin`` without its ``.idx`` is not a shard (Megatron cannot
open it) and is the only thing a crash between the two renames can leave; if the ``.idx``
rename fails, the ``.bin`` is taken back. sha256 of both are computed while writing.
``max_shard_bytes`` bounds the ``.bin`` and ``.idx`` together, as they will be on disk.
"""

from __future__ import annotations

import hashlib
import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
from numpy.typing import DTypeLike

from dataprep.formats.durable import commit_tmp, fsync_dir, tmp_path_for
from dataprep.formats.manifest import ShardInfo
from dataprep.formats.samples import CleanRecord, EncodedSample
from dataprep.formats.tokens.index import BIN_SUFFIX, DTYPE_CODES, IDX_HEADER_BYTES, IDX_SUFFIX, encode_token_index
from dataprep.formats.writer import DEFAULT_MAX_SHARD_BYTES, OpenShardFile, RollingShardWriter, remove_quietly

__all__ = ["INDEX_BYTES_PER_DOCUMENT", "TOKENS_FIELD", "TokenShardWriter", "TokenizedDocument", "token_index_path_for"]

TOKENS_FIELD = "tokens"  # a CleanRecord's field holding its token ids
# What a document adds to the .idx: an int32 length, an int64 pointer, an int64 document index.
INDEX_BYTES_PER_DOCUMENT = 4 + 8 + 8
_EMPTY_INDEX_BYTES = IDX_HEADER_BYTES + 8  # header and the closing document index
_MAX_DOCUMENT_TOKENS = np.iinfo(np.int32).max


def token_index_path_for(bin_path: str | os.PathLike[str]) -> Path:
    """The ``.idx`` that goes with ``<prefix>.bin``."""
    return Path(bin_path).with_suffix(IDX_SUFFIX)


@dataclass(frozen=True, slots=True)
class TokenizedDocument:
    """One document as token ids: 1-D integer array (CPU), EOS included; key and source for error messages."""

    key: str
    source: str
    tokens: np.ndarray


def _document_of(record: CleanRecord | EncodedSample | TokenizedDocument) -> TokenizedDocument:
    if isinstance(record, TokenizedDocument):
        return record
    tokens = record.fields.get(TOKENS_FIELD) if isinstance(record, CleanRecord) else None
    if not isinstance(tokens, np.ndarray):
        raise TypeError(f"sample {record.key!r}: a token shard takes a {TOKENS_FIELD!r} field holding a numpy array "
                        f"(got {type(tokens).__name__}; fields {sorted(record.fields)})")
    return TokenizedDocument(record.key, record.source, tokens)


def _as_dtype(doc: TokenizedDocument, dtype: np.dtype) -> np.ndarray:
    """The document's ids in ``dtype``, little-endian; ValueError naming the key if they do not fit."""
    tokens = doc.tokens
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"sample {doc.key!r}: token ids must be a 1-D integer array "
                         f"(got {tokens.dtype} {tokens.shape})")
    if tokens.shape[0] > _MAX_DOCUMENT_TOKENS:
        raise ValueError(f"sample {doc.key!r}: {tokens.shape[0]} tokens; the index holds at most "
                         f"{_MAX_DOCUMENT_TOKENS} per document")
    if tokens.dtype != dtype and tokens.size:
        info = np.iinfo(dtype)
        low, high = int(tokens.min()), int(tokens.max())
        if low < info.min or high > info.max:
            raise ValueError(f"sample {doc.key!r}: token ids {low}..{high} do not fit the shard dtype {dtype} "
                             f"({info.min}..{info.max})")
    return tokens.astype(dtype.newbyteorder("<"), copy=False)


@dataclass
class _OpenShard(OpenShardFile):
    """A shard being written: the .bin under its temporary name, the documents' lengths so far."""

    lengths: array = field(default_factory=lambda: array("q"))

    @property
    def num_samples(self) -> int:
        return len(self.lengths)

    @property
    def closed_bytes(self) -> int:
        """The .bin and .idx together, were the shard closed now."""
        return self.position + _EMPTY_INDEX_BYTES + INDEX_BYTES_PER_DOCUMENT * self.num_samples

    def add(self, tokens: np.ndarray) -> None:
        self.put(tokens.tobytes())
        self.lengths.append(int(tokens.shape[0]))


class TokenShardWriter(RollingShardWriter[_OpenShard]):
    """Writes tokenized documents into Megatron-Core ``IndexedDataset`` shards (``.bin`` + ``.idx``).

    ``write`` takes a ``TokenizedDocument`` or a ``CleanRecord`` whose ``"tokens"`` field is a
    1-D integer array (ids of ``dtype`` or ids that fit it). ``ShardInfo``: ``name`` the
    ``.bin``, ``bytes``/``sha256`` of it, ``index``/``index_sha256`` the ``.idx``,
    ``num_samples`` documents, ``num_tokens`` their tokens. Memory: 8 bytes per document
    of the open shard. Not thread-safe.
    """

    def __init__(
        self,
        out_dir: Path,
        *,
        dtype: DTypeLike,
        prefix: str = "shard",
        max_shard_bytes: int | None = DEFAULT_MAX_SHARD_BYTES,
        max_samples_per_shard: int | None = None,
        start_shard: int = 0,
    ) -> None:
        shard_dtype = np.dtype(dtype)
        if shard_dtype not in DTYPE_CODES or not np.issubdtype(shard_dtype, np.integer):
            raise ValueError(f"'dtype' must be an integer dtype Megatron knows (got {shard_dtype}; usually "
                             "dataprep.formats.tokens.index.token_dtype(vocab_size))")
        self._dtype = shard_dtype
        super().__init__(out_dir, suffix=BIN_SUFFIX, prefix=prefix, max_shard_bytes=max_shard_bytes,
                         max_samples_per_shard=max_samples_per_shard, start_shard=start_shard)

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    def write(self, record: CleanRecord | EncodedSample | TokenizedDocument) -> list[ShardInfo]:
        """Add one document; returns the shard this call completed, if any (both files already final).

        An ``EncodedSample`` (a sample serialised for a tar shard) is a ``TypeError``.
        """
        self._check_writable()
        doc = _document_of(record)
        tokens = _as_dtype(doc, self._dtype)
        return self._put(doc.key, tokens.nbytes + INDEX_BYTES_PER_DOCUMENT, lambda shard: shard.add(tokens))

    def _new_shard(self, final: Path, tmp: Path, fileobj: BinaryIO) -> _OpenShard:
        return _OpenShard(final.name, final, tmp, fileobj)

    def _remove_temporaries(self, shard: _OpenShard) -> None:
        remove_quietly(tmp_path_for(token_index_path_for(shard.final)))

    def _commit(self, shard: _OpenShard) -> ShardInfo:
        """fsync both files under their temporary names, then rename the .bin, then the .idx."""
        shard.fileobj.flush()
        os.fsync(shard.fileobj.fileno())
        shard.fileobj.close()
        lengths = np.frombuffer(shard.lengths, dtype=np.int64) if shard.lengths else np.zeros(0, np.int64)
        index = encode_token_index(self._dtype, lengths)
        index_final = token_index_path_for(shard.final)
        index_tmp = tmp_path_for(index_final)
        with open(index_tmp, "wb") as f:
            f.write(index)
            f.flush()
            os.fsync(f.fileno())
        commit_tmp(shard.tmp, shard.final)
        try:
            os.replace(index_tmp, index_final)
        except OSError:
            remove_quietly(shard.final)  # without its .idx the .bin must not stay under its final name
            raise
        fsync_dir(index_final.parent)
        return ShardInfo(name=shard.name, num_samples=shard.num_samples, bytes=shard.position,
                         sha256=shard.digest.hexdigest(), index=index_final.name,
                         num_tokens=int(lengths.sum(dtype=np.int64)),
                         index_sha256=hashlib.sha256(index).hexdigest())
