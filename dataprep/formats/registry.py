"""The output formats' writers: a format's shard writer (``open_writer``) and its manifest ``schema``.

A format is decided once per run (``dataprep.commands.output_format.choose_format``), and its
writer is opened here for every range; a new format is one more entry of ``WRITERS`` and,
where its manifest carries a schema, of ``manifest_schema``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from dataprep.errors import UsageError
from dataprep.formats.manifest import FORMAT_PARQUET, FORMAT_TOKENS, FORMAT_WDS, ShardInfo
from dataprep.formats.writer import ShardWriter
from dataprep.formats.parquet.writer import ParquetShardWriter
from dataprep.formats.tar.writer import TarShardWriter
from dataprep.formats.tokens.writer import TOKENS_FIELD, TokenShardWriter


@dataclass(frozen=True)
class WriterOptions:
    """How a run's shards roll over and are laid out, whatever the format.

    max_shard_bytes, max_samples_per_shard: when a shard is full (``ShardLimits``);
    row_group_bytes: Parquet row-group bound; parquet_schema: the columns of Parquet
    shards (the layout's; None for other formats); token_dtype: the ids' dtype in token
    shards (``Tokenizer.dtype``; None for other formats).
    """

    max_shard_bytes: int | None
    max_samples_per_shard: int | None
    row_group_bytes: int
    parquet_schema: pa.Schema | None = None
    token_dtype: np.dtype | None = None


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


def _open_tokens(out_dir: Path, prefix: str, start_shard: int, options: WriterOptions) -> ShardWriter:
    if options.token_dtype is None:
        raise ValueError("token shards need WriterOptions.token_dtype (got None)")
    return TokenShardWriter(out_dir, dtype=options.token_dtype, prefix=prefix, max_shard_bytes=options.max_shard_bytes,
                            max_samples_per_shard=options.max_samples_per_shard, start_shard=start_shard)


# Output format (``Manifest.format``) -> how its writer is opened.
WRITERS: dict[str, WriterOpener] = {FORMAT_WDS: _open_tar, FORMAT_PARQUET: _open_parquet, FORMAT_TOKENS: _open_tokens}


def open_writer(fmt: str, out_dir: Path, *, prefix: str, start_shard: int, options: WriterOptions) -> ShardWriter:
    """The writer of format ``fmt``: shards ``{prefix}-{n:06d}.*`` in ``out_dir``, numbered from ``start_shard``."""
    try:
        opener = WRITERS[fmt]
    except KeyError:
        raise UsageError(f"output format {fmt!r} has no shard writer (known: {', '.join(sorted(WRITERS))})") from None
    return opener(out_dir, prefix, start_shard, options)


def manifest_schema(fmt: str, parquet_schema: pa.Schema, shards: tuple[ShardInfo, ...],
                    token_dtype: np.dtype | None = None) -> list[dict[str, str]]:
    """The manifest's ``schema``: the fields of tar shards (as written), the token ids' dtype, else the Parquet
    columns."""
    if fmt == FORMAT_TOKENS:
        return [{"name": TOKENS_FIELD, "type": str(token_dtype)}]
    if fmt != FORMAT_WDS:
        return [{"name": f.name, "type": str(f.type)} for f in parquet_schema]
    fields = sorted({f for s in shards for f in s.fields})
    return [{"name": f, "type": "int64" if f == "cls" else "binary"} for f in fields]
