"""Shard writers: clean records -> numbered shards (temporary name, then atomic rename).

Modules:
    base     the ``ShardWriter`` protocol, rollover limits (``ShardLimits``), shard naming, the skeleton of
             the writers that stream a shard to disk (``RollingShardWriter``)
    tar      ``TarShardWriter``: WebDataset tar shards streamed to disk, with index sidecars
    parquet  ``ParquetShardWriter``: Parquet shards in bounded row groups
    tokens   ``TokenShardWriter``: Megatron-Core ``IndexedDataset`` token shards (``.bin`` + ``.idx``)
    formats  which format a run writes (``choose_format``) and its writer (``open_writer``)
"""

from __future__ import annotations

from dataprep.records import EncodedSample
from dataprep.writers.base import DEFAULT_MAX_SHARD_BYTES, ShardLimits, ShardNaming, ShardWriter
from dataprep.writers.formats import WriterOptions, choose_format, manifest_schema, open_writer
from dataprep.writers.parquet import KEY_COLUMN, ParquetShardWriter
from dataprep.writers.tar import TarShardWriter, encode_sample
from dataprep.writers.tokens import TokenizedDocument, TokenShardWriter

__all__ = [
    "DEFAULT_MAX_SHARD_BYTES",
    "EncodedSample",
    "KEY_COLUMN",
    "ParquetShardWriter",
    "ShardLimits",
    "ShardNaming",
    "ShardWriter",
    "TarShardWriter",
    "TokenShardWriter",
    "TokenizedDocument",
    "WriterOptions",
    "choose_format",
    "encode_sample",
    "manifest_schema",
    "open_writer",
]
