"""A token corpus at any scale for the benchmarks: a real Megatron .idx and a sparse .bin (``make_corpus``).

Document lengths are log-normally spread around the mean (every one >= 1); the .bin is a
sparse file (every token reads as 0, so each window is one segment). Written in chunks, so
10^8 documents cost no more memory than 4 * 2^22 of them.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from dataprep.formats.manifest import FORMAT_TOKENS, Manifest, ShardInfo, Totals, write_manifest
from dataprep.formats.tokens.index import DTYPE_CODES, IDX_MAGIC, IDX_VERSION, token_dtype
from tools.common.report import ToolError

__all__ = ["EOS", "VOCAB", "make_corpus"]

VOCAB = 50_257  # GPT-2's: uint16 tokens
EOS = 50_256
_CHUNK_DOCS = 1 << 22  # documents generated and written per step


def _lengths(docs: int, tokens: int, seed: int) -> np.ndarray:
    """int32 [docs] log-normal lengths (sigma 1) summing to ``tokens``, each in 1 .. 2^31-1."""
    if tokens < docs:
        raise ToolError(f"--tokens {tokens} must be >= --docs {docs} (every document holds at least its EOS)")
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(0.0, 1.0, size=docs).astype(np.float32)
    scale = (tokens - docs) / float(raw.sum(dtype=np.float64))
    lengths = np.floor(raw * scale).astype(np.int64) + 1
    rest = tokens - int(lengths.sum())
    lengths[:: max(1, docs // max(1, abs(rest)))][: abs(rest)] += int(np.sign(rest))
    if int(lengths.sum()) != tokens or int(lengths.min()) < 1 or int(lengths.max()) >= 2**31:
        raise ToolError(f"cannot spread {tokens} tokens over {docs} documents in int32 lengths")
    return lengths.astype(np.int32)


def _write_index(path: Path, lengths: np.ndarray, dtype: np.dtype) -> None:
    """A Megatron .idx (``dataprep.formats.tokens.index`` layout), written in chunks: lengths, pointers, documents."""
    count = int(lengths.shape[0])
    with open(path, "wb") as f:
        f.write(IDX_MAGIC + struct.pack("<QBQQ", IDX_VERSION, DTYPE_CODES[dtype], count, count + 1))
        for first in range(0, count, _CHUNK_DOCS):
            f.write(lengths[first:first + _CHUNK_DOCS].astype("<i4").tobytes())
        base = 0
        for first in range(0, count, _CHUNK_DOCS):
            chunk = lengths[first:first + _CHUNK_DOCS].astype(np.int64) * dtype.itemsize
            pointers = np.cumsum(chunk) - chunk + base
            base += int(chunk.sum())
            f.write(pointers.astype("<i8").tobytes())
        for first in range(0, count + 1, _CHUNK_DOCS):
            f.write(np.arange(first, min(first + _CHUNK_DOCS, count + 1), dtype="<i8").tobytes())


def make_corpus(root: Path, docs: int, tokens: int, shards: int, seed: int = 0) -> list[Path]:
    """``shards`` (.bin sparse, .idx real) pairs + manifest.json under ``root``; returns the .idx paths."""
    dtype = token_dtype(VOCAB)
    lengths = _lengths(docs, tokens, seed)
    bounds = np.linspace(0, docs, shards + 1).astype(np.int64)
    infos, indices = [], []
    for s in range(shards):
        part = lengths[bounds[s]:bounds[s + 1]]
        name = f"shard-{s:06d}.bin"
        count = int(part.sum(dtype=np.int64))
        with open(root / name, "wb") as f:
            f.truncate(count * dtype.itemsize)
        _write_index(root / name.replace(".bin", ".idx"), part, dtype)
        indices.append(root / name.replace(".bin", ".idx"))
        infos.append(ShardInfo(name=name, num_samples=int(part.shape[0]), bytes=count * dtype.itemsize,
                               sha256="0" * 64, index=indices[-1].name, num_tokens=count, index_sha256="0" * 64))
    tokenizer = {"name": "synthetic", "sha256": "0" * 64, "vocab_size": VOCAB, "eos": "<|endoftext|>",
                 "eos_id": EOS, "dtype": str(dtype)}
    write_manifest(root, Manifest(format=FORMAT_TOKENS, layout="text", shards=tuple(infos),
                                  totals=Totals(docs, docs, 0, {}), tokenizer=tokenizer))
    return indices
