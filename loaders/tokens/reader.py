"""Token shards on disk -> flat document arrays and token slices (``TokenCorpus``).

One or several dataprep output directories of ``format: "tokens"`` (see
``dataprep.formats.tokens.index``: Megatron-Core ``IndexedDataset`` pairs) become one corpus
whose documents are numbered in order: every document of the first directory's first
shard, then its second shard, ..., then the second directory. Nothing is held per
document as a Python object: ``lengths`` is the int32 [documents] array of the .idx
files (a read-only memory map for a single shard, one int32 copy for several), the byte
offsets stay in the mapped .idx files, and tokens are read as views of the mapped .bin
files. Maps are opened lazily in each process (a pickled corpus carries paths, not data).
Each directory is opened as every dataset's folder is (``loaders.read.shard_files``); one that is
remote (``s3://``, ``gs://``, ``az://``) or given a cache is held whole in the node cache
(``ShardFiles.hold``: windows land on random documents of every shard from the first batch on)
and its files are the cache's verified copies.

Checked at construction, O(1) per shard (no pass over the data): the manifest's format
and tokenizer block, the same tokenizer (sha256, EOS id, vocabulary size, dtype) in every
directory (a mismatch names both), and per shard the .idx header against the manifest
(dtype, documents) and the .bin size against the manifest (bytes, tokens x itemsize) and
against the .idx (the last document ends at the last byte).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats import FormatError
from dataprep.formats.manifest import FORMAT_TOKENS, Manifest, ShardInfo
from dataprep.formats.tokens.index import TokenIndex, read_token_index
from loaders.cache import CacheConfig
from loaders.errors import ConfigError, ShardError
from loaders.read.shard_files import ShardFiles, cache_config, open_shard_files

__all__ = ["TokenCorpus", "TokenizerBlock"]

_TOKENIZER_KEYS = ("sha256", "eos_id", "vocab_size", "dtype")


@dataclass(frozen=True)
class TokenizerBlock:
    """What made the token ids: the manifest's tokenizer block (``sha256`` of the tokenizer file)."""

    name: str
    sha256: str
    vocab_size: int
    eos_id: int
    dtype: np.dtype

    @classmethod
    def from_manifest(cls, manifest: Manifest, where: Path | str) -> TokenizerBlock:
        block = manifest.tokenizer
        if manifest.format != FORMAT_TOKENS or not isinstance(block, dict):
            raise ShardError(f"{where}: format {manifest.format!r}, not token shards (expected format "
                             f"{FORMAT_TOKENS!r} with a tokenizer block); hint: write it with "
                             "`dataprep shard RAW OUT --tokenizer TOK`")
        try:
            tokenizer = cls(name=str(block.get("name", "")), sha256=str(block["sha256"]),
                            vocab_size=int(block["vocab_size"]), eos_id=int(block["eos_id"]),
                            dtype=np.dtype(block["dtype"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ShardError(f"{where}: malformed tokenizer block {block!r} ({err!r})") from err
        if tokenizer.dtype.kind not in "iu":
            raise ShardError(f"{where}: token dtype {tokenizer.dtype} is not an integer type "
                             "(expected uint16 or int32)")
        return tokenizer

    def differences(self, other: TokenizerBlock) -> list[str]:
        """``key: ours vs theirs`` for each of sha256, eos_id, vocab_size, dtype that differs."""
        return [f"{key}: {getattr(self, key)} vs {getattr(other, key)}" for key in _TOKENIZER_KEYS
                if getattr(self, key) != getattr(other, key)]


def _open_folder(path: str | os.PathLike[str], cache: CacheConfig | None) -> tuple[ShardFiles, Manifest]:
    """The token directory at ``path`` and its manifest, every ``.idx`` and ``.bin`` held (through the cache:
    downloaded before the dataset is built)."""
    files = open_shard_files(path, cache)
    manifest = files.manifest()
    files.hold([s.index for s in manifest.shards if s.index] + [s.name for s in manifest.shards if s.num_tokens])
    return files, manifest


def _check_shard(source: ShardFiles, shard: ShardInfo, index: TokenIndex, tokenizer: TokenizerBlock) -> None:
    """O(1) consistency of one shard's .idx and .bin with the manifest; ShardError naming the file."""
    bin_path = source.local_path(shard.name)
    problems = []
    if index.dtype != tokenizer.dtype:
        problems.append(f"dtype {index.dtype} in the .idx, {tokenizer.dtype} in the manifest")
    if index.num_sequences != shard.num_samples or index.documents.shape[0] != shard.num_samples + 1:
        problems.append(f"{index.num_sequences} documents in the .idx, {shard.num_samples} in the manifest")
    try:
        size = bin_path.stat().st_size
    except OSError as err:
        raise ShardError(f"{bin_path}: token shard missing or unreadable ({err})") from err
    tokens = shard.num_tokens if shard.num_tokens is not None else -1
    if size != shard.bytes or size != tokens * tokenizer.dtype.itemsize:
        problems.append(f"{size} bytes on disk, the manifest says {shard.bytes} bytes and {tokens} tokens "
                        f"of {tokenizer.dtype.itemsize} bytes")
    elif index.num_sequences:
        end = int(index.pointers[-1]) + int(index.lengths[-1]) * tokenizer.dtype.itemsize
        if end != size:
            problems.append(f"the .idx's last document ends at byte {end} of a {size}-byte .bin")
    if problems:
        raise ShardError(f"{bin_path}: token shard does not match its manifest or index: {'; '.join(problems)}; "
                         "hint: the shard was changed after `dataprep shard` wrote it (run `dataprep verify`)")


def _map_tokens(path: Path, dtype: np.dtype) -> np.ndarray:
    """The .bin as a read-only array over a shared map, read ahead of nothing (``MADV_RANDOM``).

    Windows land on random documents, and the kernel's read-ahead around each page fault
    (up to the block device's ``read_ahead_kb``, 8 MiB on some VMs) would read megabytes to
    serve 4 KiB. A plain ndarray, not a ``np.memmap``, because slicing one costs ~5x less.
    """
    try:
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as err:
        raise ShardError(f"{path}: cannot map the token shard ({type(err).__name__}: {err})") from err
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        mapped.madvise(mmap.MADV_RANDOM)
    return np.frombuffer(mapped, dtype=dtype)


class TokenCorpus:
    """The documents of one or several token-shard directories, numbered in order.

    ``lengths``: int32 [num_documents] tokens per document (EOS included);
    ``read(document, offset, length)``: a read-only view of those tokens in the .bin's dtype.
    """

    def __init__(self, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
                 cache_dir: str | os.PathLike[str] | None = None, cache_limit: int | str | None = None,
                 cache: CacheConfig | None = None) -> None:
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        if not paths:
            raise ConfigError("'paths' must name at least one token-shard directory (got none)")
        opened = [_open_folder(p, cache_config(p, cache_dir, cache_limit, cache)) for p in paths]
        self.sources = [files for files, _ in opened]
        self.paths: tuple[Path | str, ...] = tuple(s.where if "://" in str(p) else Path(p)
                                                  for p, s in zip(paths, self.sources))
        manifests = [manifest for _, manifest in opened]
        self.tokenizer = TokenizerBlock.from_manifest(manifests[0], self.paths[0])
        for path, manifest in zip(self.paths[1:], manifests[1:]):
            other = TokenizerBlock.from_manifest(manifest, path)
            if diff := self.tokenizer.differences(other):
                raise ShardError(f"{self.paths[0]} and {path} were tokenized differently ({'; '.join(diff)}); "
                                 "hint: tokenize every source with the same tokenizer and --eos")
        self._shards = [(src, s) for src, m in zip(self.sources, manifests) for s in m.shards]
        counts = [s.num_samples for _, s in self._shards]
        self.shard_starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        per_source = [sum(s.num_samples for s in m.shards) for m in manifests]
        self.source_starts = np.concatenate([[0], np.cumsum(per_source, dtype=np.int64)]).astype(np.int64)
        self.num_tokens = sum(s.num_tokens or 0 for _, s in self._shards)
        self._lock = threading.Lock()
        self._indices = self._open_indices(check=True)
        self._pointers = [i.pointers.view(np.ndarray) for i in self._indices]  # plain views: cheaper to index
        self._bins: list[np.ndarray | None] = [None] * len(self._shards)
        self.lengths = self._concat_lengths()

    @property
    def num_documents(self) -> int:
        return int(self.shard_starts[-1])

    @property
    def dtype(self) -> np.dtype:
        return self.tokenizer.dtype

    @property
    def bin_paths(self) -> list[Path]:
        """Every shard's .bin, in document order."""
        return [source.local_path(shard.name) for source, shard in self._shards]

    @property
    def lengths_mapped(self) -> bool:
        """True when ``lengths`` is the mapped .idx itself (one shard), False when it is a copy in memory."""
        return len(self._shards) == 1

    def _open_indices(self, *, check: bool) -> list[TokenIndex]:
        indices = []
        for source, shard in self._shards:
            if shard.index is None:
                raise ShardError(f"{source.where}/{shard.name}: the manifest names no .idx for this token shard")
            try:
                index = read_token_index(source.local_path(shard.index))
            except FormatError as err:
                raise ShardError(f"{source.where}/{shard.index}: unreadable token index: {err}") from err
            if check:
                _check_shard(source, shard, index, self.tokenizer)
            indices.append(index)
        return indices

    def _concat_lengths(self) -> np.ndarray:
        if self.lengths_mapped:
            return self._indices[0].lengths.view(np.ndarray)
        return np.concatenate([i.lengths for i in self._indices]).astype(np.int32, copy=False)

    def _bin(self, shard: int) -> np.ndarray:
        data = self._bins[shard]
        if data is None:
            source, info = self._shards[shard]
            with self._lock:
                data = self._bins[shard]
                if data is None:
                    data = _map_tokens(source.local_path(info.name), self.dtype) if info.num_tokens else \
                        np.empty(0, self.dtype)
                    self._bins[shard] = data
        return data

    def read(self, document: int, offset: int, length: int) -> np.ndarray:
        """Tokens ``[offset, offset + length)`` of ``document``: a read-only view, dtype ``self.dtype``, [length]."""
        shard = 0 if len(self._shards) == 1 else int(np.searchsorted(self.shard_starts, document, side="right")) - 1
        start = int(self._pointers[shard][document - int(self.shard_starts[shard])]) // self.dtype.itemsize + offset
        return self._bin(shard)[start:start + length]

    def source_of(self, documents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(directory index, document index within that directory) of global ``documents``: int64 [m] each."""
        source = np.searchsorted(self.source_starts, documents, side="right") - 1
        return source, documents - self.source_starts[source]

    def describe(self) -> dict[str, Any]:
        """Plain values that identify the data wherever it lies: documents, tokens, tokenizer and shard digests.

        ``data_sha256`` is the sha256 of the shards' manifest sha256s (.bin then .idx, in order).
        """
        digest = hashlib.sha256()
        for _, shard in self._shards:
            digest.update(f"{shard.sha256} {shard.index_sha256}\n".encode())
        return {"num_documents": self.num_documents, "num_tokens": self.num_tokens,
                "tokenizer_sha256": self.tokenizer.sha256, "data_sha256": digest.hexdigest()}

    def __getstate__(self) -> dict[str, Any]:
        """Paths and manifests only: the maps are reopened in the receiving process (a memmap pickles its data)."""
        state = self.__dict__.copy()
        for name in ("_lock", "_indices", "_pointers", "_bins", "lengths"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._indices = self._open_indices(check=False)
        self._pointers = [i.pointers.view(np.ndarray) for i in self._indices]
        self._bins = [None] * len(self._shards)
        self.lengths = self._concat_lengths()
