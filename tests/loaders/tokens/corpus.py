"""Token-shard directories for the tests: Megatron .bin + .idx pairs and a version-3 manifest.

Written with ``dataprep.formats.tokens.index.encode_token_index`` and ``dataprep.formats.manifest`` directly, so
these tests do not depend on the dataprep writer. Documents are lists (or arrays) of token
ids; by the dataprep convention each ends with ``EOS``, which ``documents_with_eos`` appends.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dataprep.formats.manifest import FORMAT_TOKENS, Manifest, ShardInfo, Totals, sha256_file, write_manifest
from dataprep.formats.tokens.index import encode_token_index, token_dtype

EOS = 256  # the built-in byte tokenizer's EOS id (ids 0-255 are bytes)
VOCAB = 257
BYTES_SHA256 = "b" * 64


def tokenizer_block(*, vocab_size: int = VOCAB, eos_id: int = EOS, sha256: str = BYTES_SHA256) -> dict[str, object]:
    return {"name": "bytes", "sha256": sha256, "vocab_size": vocab_size, "eos": "<eos>", "eos_id": eos_id,
            "dtype": str(token_dtype(vocab_size))}


def documents_with_eos(bodies: Sequence[Sequence[int]], eos: int = EOS) -> list[np.ndarray]:
    """Each body followed by ``eos``, as int64 arrays."""
    return [np.append(np.asarray(body, dtype=np.int64), eos) for body in bodies]


def random_documents(rng: np.random.Generator, count: int, *, mean_len: int = 20, eos: int = EOS) -> list[np.ndarray]:
    """``count`` documents of 0..2*mean_len random byte tokens, each then EOS (so 1..2*mean_len+1 tokens)."""
    lengths = rng.integers(0, 2 * mean_len + 1, size=count)
    return documents_with_eos([rng.integers(0, 256, size=n) for n in lengths], eos)


def write_tokens(out: Path, documents: Sequence[Sequence[int] | np.ndarray], *, docs_per_shard: int | None = None,
                 vocab_size: int = VOCAB, eos_id: int = EOS, tokenizer_sha256: str = BYTES_SHA256) -> Path:
    """Write ``documents`` as token shards in ``out`` (``docs_per_shard`` each, default one shard); returns ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    dtype = token_dtype(vocab_size)
    per = docs_per_shard or max(1, len(documents))
    shards = []
    for number, first in enumerate(range(0, max(1, len(documents)), per)):
        chunk = [np.asarray(d, dtype=dtype) for d in documents[first:first + per]]
        name = f"shard-{number:06d}.bin"
        tokens = np.concatenate(chunk) if chunk else np.zeros(0, dtype=dtype)
        (out / name).write_bytes(tokens.astype(dtype).tobytes())
        index = name.replace(".bin", ".idx")
        (out / index).write_bytes(encode_token_index(dtype, np.array([len(d) for d in chunk], dtype=np.int64)))
        shards.append(ShardInfo(name=name, num_samples=len(chunk), bytes=tokens.nbytes, sha256=sha256_file(out / name),
                                index=index, num_tokens=int(tokens.shape[0]), index_sha256=sha256_file(out / index)))
    manifest = Manifest(format=FORMAT_TOKENS, layout="text", shards=tuple(shards),
                        totals=Totals(inputs_seen=len(documents), samples_kept=len(documents)),
                        tokenizer=tokenizer_block(vocab_size=vocab_size, eos_id=eos_id, sha256=tokenizer_sha256))
    write_manifest(out, manifest)
    return out


def packed_stream(documents: Sequence[np.ndarray], order: Sequence[int] | np.ndarray) -> np.ndarray:
    """The naive reference: ``documents`` concatenated in ``order`` (int64 [tokens])."""
    parts = [np.asarray(documents[d], dtype=np.int64) for d in order]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
