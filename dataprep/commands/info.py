"""``dataprep info``: what a shard directory (or a store URL) holds — counts, sizes, labels, rejects; tokens too."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.tar.index import read_index
from dataprep.formats.manifest import FORMAT_PARQUET, FORMAT_TOKENS, Manifest
from dataprep.output.out_files import OutFiles, open_out_files
from dataprep.formats.tokens.index import read_token_index


@dataclass(frozen=True)
class TokenCounts:
    """The documents of token shards: how many, their tokens (EOS included), and tokens per document."""

    documents: int
    tokens: int
    min_tokens: int
    median_tokens: float
    max_tokens: int

    @classmethod
    def of(cls, lengths: Counter[int]) -> TokenCounts:
        """From ``lengths``: tokens per document -> number of documents with that many."""
        values = np.array(sorted(lengths), dtype=np.int64)
        counts = np.array([lengths[v] for v in values.tolist()], dtype=np.int64)
        documents = int(counts.sum())
        if documents == 0:
            return cls(0, 0, 0, 0.0, 0)
        ends = np.cumsum(counts)

        def item(k: int) -> int:  # item k (0-based) of the lengths in ascending order
            return int(values[np.searchsorted(ends, k, side="right")])

        median = (item((documents - 1) // 2) + item(documents // 2)) / 2
        return cls(documents, int((values * counts).sum()), int(values[0]), median, int(values[-1]))

    def to_json(self) -> dict[str, Any]:
        return {"documents": self.documents, "tokens": self.tokens,
                "tokens_per_document": {"min": self.min_tokens, "median": self.median_tokens, "max": self.max_tokens}}


@dataclass(frozen=True)
class DatasetInfo:
    """A summary of a finished shard directory. label_counts maps class name (or index) -> samples.

    tokens: for token shards, their documents and tokens (``TokenCounts``), else None.
    """

    manifest: Manifest
    label_counts: dict[str, int]
    fields: dict[str, int]  # field -> number of samples that have it
    tokens: TokenCounts | None = None

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        sizes = [s.bytes for s in m.shards]
        return {
            "format": m.format,
            "layout": m.layout,
            "layout_reason": m.layout_reason,
            "shards": len(m.shards),
            "samples": m.num_samples,
            "bytes": sum(sizes),
            "shard_bytes_min": min(sizes, default=0),
            "shard_bytes_max": max(sizes, default=0),
            "fields": self.fields,
            "labels": self.label_counts,
            "totals": m.totals.to_json(),
            "tokenizer": m.tokenizer,
            "tokens": self.tokens.to_json() if self.tokens is not None else None,
        }


def dataset_info(out: str | os.PathLike[str]) -> DatasetInfo:
    """What OUT holds (a folder, or a store URL: each file it reads fetched one at a time, ``shard_files``)."""
    with open_out_files(out) as files:
        manifest = files.manifest()
        if manifest.format == FORMAT_TOKENS:
            return DatasetInfo(manifest, {}, {}, token_counts(files, manifest))
        names = {v: k for k, v in (manifest.label_map or {}).items()}
        labels: Counter[str] = Counter()
        fields: Counter[str] = Counter()
        for shard in manifest.shards:
            if manifest.format == FORMAT_PARQUET:
                with files.local(shard.name) as path:
                    _parquet_counts(path, names, labels, fields)
                continue
            with files.local(shard.index or shard.name + ".idx") as path:
                index = read_index(path)
            for j, field in enumerate(index.fields):
                fields[field] += int((index.field_offset[:, j] >= 0).sum())
            if "cls" in index.fields:
                with files.local(shard.name) as path:
                    _tar_labels(path, index, names, labels)
    return DatasetInfo(manifest, dict(sorted(labels.items())), dict(sorted(fields.items())))


def _tar_labels(path: Path, index: Any, names: dict[int, str], labels: Counter[str]) -> None:
    col = index.fields.index("cls")
    fd = os.open(path, os.O_RDONLY)
    try:
        for off, size in zip(index.field_offset[:, col].tolist(), index.field_size[:, col].tolist()):
            if off >= 0:
                value = os.pread(fd, size, off).decode("ascii", "replace").strip()
                labels[names.get(int(value), value) if value.isdigit() else value] += 1
    finally:
        os.close(fd)


def _parquet_counts(path: Path, names: dict[int, str], labels: Counter[str], fields: Counter[str]) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    for name in table.column_names:
        fields[name] += table.num_rows - table.column(name).null_count
    if "cls" in table.column_names:
        for value in table.column("cls").to_pylist():
            if value is not None:
                labels[names.get(value, str(value))] += 1


def token_counts(files: OutFiles, manifest: Manifest) -> TokenCounts:
    """Documents and tokens of every token shard, from their ``.idx`` (memory: one count per distinct length)."""
    lengths: Counter[int] = Counter()
    for shard in manifest.shards:
        with files.local(shard.index or "") as path:
            values, counts = np.unique(read_token_index(path).lengths, return_counts=True)
        lengths.update(dict(zip(values.tolist(), counts.tolist())))
    return TokenCounts.of(lengths)
