"""``dataprep info``: what a shard directory holds — counts, sizes, labels, rejects."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataprep.index import read_index
from dataprep.manifest import FORMAT_PARQUET, Manifest, read_manifest


@dataclass(frozen=True)
class DatasetInfo:
    """A summary of a finished shard directory. label_counts maps class name (or index) -> samples."""

    manifest: Manifest
    label_counts: dict[str, int]
    fields: dict[str, int]  # field -> number of samples that have it

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
        }


def dataset_info(out: str | os.PathLike[str]) -> DatasetInfo:
    root = Path(out)
    manifest = read_manifest(root)
    names = {v: k for k, v in (manifest.label_map or {}).items()}
    labels: Counter[str] = Counter()
    fields: Counter[str] = Counter()
    for shard in manifest.shards:
        if manifest.format == FORMAT_PARQUET:
            _parquet_counts(root / shard.name, names, labels, fields)
            continue
        index = read_index(root / (shard.index or shard.name + ".idx"))
        for j, field in enumerate(index.fields):
            fields[field] += int((index.field_offset[:, j] >= 0).sum())
        if "cls" in index.fields:
            _tar_labels(root / shard.name, index, names, labels)
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
