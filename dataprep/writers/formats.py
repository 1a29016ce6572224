"""The output formats: which one a run writes (``choose_format``), its shard writer (``open_writer``).

A format is decided once per run, from ``--format`` and the layout, and its writer is
opened here for every range; a new format (token shards, issue 21) is one more entry of
``WRITERS`` and, where its manifest carries a schema, of ``manifest_schema``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from dataprep.detection import Layout
from dataprep.errors import UsageError
from dataprep.manifest import FORMAT_PARQUET, FORMAT_WDS, ShardInfo
from dataprep.writers.base import ShardWriter
from dataprep.writers.parquet import ParquetShardWriter
from dataprep.writers.tar import TarShardWriter


@dataclass(frozen=True)
class WriterOptions:
    """How a run's shards roll over and are laid out, whatever the format.

    max_shard_bytes, max_samples_per_shard: when a shard is full (``ShardLimits``);
    row_group_bytes: Parquet row-group bound; parquet_schema: the columns of Parquet
    shards (the layout's; None for other formats).
    """

    max_shard_bytes: int | None
    max_samples_per_shard: int | None
    row_group_bytes: int
    parquet_schema: pa.Schema | None = None


WriterOpener = Callable[[Path, str, int, WriterOptions], ShardWriter]


def _open_tar(out_dir: Path, prefix: str, start_shard: int, options: WriterOptions) -> ShardWriter:
    return TarShardWriter(out_dir, prefix=prefix, max_shard_bytes=options.max_shard_bytes,
                          max_samples_per_shard=options.max_samples_per_shard, start_shard=start_shard)


def _open_parquet(out_dir: Path, prefix: str, start_shard: int, options: WriterOptions) -> ShardWriter:
    if options.parquet_schema is None:
        raise ValueError("Parquet shards need WriterOptions.parquet_schema (got None)")
    return ParquetShardWriter(out_dir, schema=options.parquet_schema, prefix=prefix,
                              max_shard_bytes=options.max_shard_bytes,
                              max_samples_per_shard=options.max_samples_per_shard,
                              row_group_bytes=options.row_group_bytes, start_shard=start_shard)


# Output format (``Manifest.format``) -> how its writer is opened.
WRITERS: dict[str, WriterOpener] = {FORMAT_WDS: _open_tar, FORMAT_PARQUET: _open_parquet}


def open_writer(fmt: str, out_dir: Path, *, prefix: str, start_shard: int, options: WriterOptions) -> ShardWriter:
    """The writer of format ``fmt``: shards ``{prefix}-{n:06d}.*`` in ``out_dir``, numbered from ``start_shard``."""
    try:
        opener = WRITERS[fmt]
    except KeyError:
        raise UsageError(f"output format {fmt!r} has no shard writer (known: {', '.join(sorted(WRITERS))})") from None
    return opener(out_dir, prefix, start_shard, options)


def choose_format(requested: str, layout: Layout) -> str:
    """The output format for ``--format`` (auto, wds, parquet) and the layout."""
    if requested == "auto":
        return FORMAT_WDS if layout.is_media else FORMAT_PARQUET
    if requested == FORMAT_WDS and not layout.is_media:
        raise UsageError(f"--format wds holds media samples; a {layout} dataset goes to --format parquet")
    return requested


def manifest_schema(fmt: str, parquet_schema: pa.Schema, shards: tuple[ShardInfo, ...]) -> list[dict[str, str]]:
    """The manifest's ``schema``: the fields of tar shards (as written), else the Parquet columns."""
    if fmt != FORMAT_WDS:
        return [{"name": f.name, "type": str(f.type)} for f in parquet_schema]
    fields = sorted({f for s in shards for f in s.fields})
    return [{"name": f, "type": "int64" if f == "cls" else "binary"} for f in fields]
