"""Shard writers: clean records -> numbered shards (temporary name, then atomic rename).

Modules:
    base     the ``ShardWriter`` protocol, rollover limits (``ShardLimits``), shard naming
    tar      ``TarShardWriter``: WebDataset tar shards streamed to disk, with index sidecars
    parquet  ``ParquetShardWriter``: Parquet shards in bounded row groups
"""

from __future__ import annotations

from dataprep.writers.base import DEFAULT_MAX_SHARD_BYTES, ShardLimits, ShardNaming, ShardWriter
from dataprep.writers.parquet import KEY_COLUMN, ParquetShardWriter
from dataprep.writers.tar import EncodedSample, TarShardWriter, encode_sample

__all__ = [
    "DEFAULT_MAX_SHARD_BYTES",
    "EncodedSample",
    "KEY_COLUMN",
    "ParquetShardWriter",
    "ShardLimits",
    "ShardNaming",
    "ShardWriter",
    "TarShardWriter",
    "encode_sample",
]
