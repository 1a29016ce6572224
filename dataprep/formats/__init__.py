"""The shard formats, reader and writer side by side: what ``dataprep`` writes and ``loaders`` reads.

This package is all a reader of our shards needs (it imports nothing else of dataprep but its
exception tree). Here, the reading side, light to import (numpy, no pyarrow):

- ``manifest``     ``manifest.json``: shards, counts, sha256, the format (``OutputFormat``, the one vocabulary
                   of format names; ``FORMAT_*`` its written members), read and written
- ``tar.index``    a tar shard's index sidecar (``<shard>.tar.idx``): per-sample and per-field byte ranges
- ``tokens.index`` a token shard's Megatron-Core ``.idx`` (``TokenIndex``) beside its ``.bin``
- ``sizes``        byte sizes as every format states them (binary units): ``parse_bytes``, ``format_bytes``
- ``durable``      durable writes: temporary name, fsync, rename (also the cache's writeback hint)
- ``samples``      what a writer takes: ``CleanRecord``, ``EncodedSample``

The writers (pyarrow for Parquet) are imported from their modules: ``writer`` (the
``ShardWriter`` protocol and ``RollingShardWriter``), ``tar.writer``, ``parquet.writer``,
``tokens.writer``, and ``registry`` (``open_writer``: a format's writer, ``manifest_schema``).
"""

from __future__ import annotations

from dataprep.errors import FormatError
from dataprep.formats.manifest import (FORMAT_PARQUET, FORMAT_TOKENS, FORMAT_WDS, MANIFEST_NAME, REJECTS_NAME,
                                       Manifest, OutputFormat, ShardInfo, Totals, read_manifest, sha256_file,
                                       write_manifest)
from dataprep.formats.samples import CleanRecord, EncodedSample
from dataprep.formats.sizes import format_bytes, parse_bytes
from dataprep.formats.tar.index import ShardIndex, index_path_for, index_tar, read_index, write_index
from dataprep.formats.tokens.index import TokenIndex, read_token_index

__all__ = [
    "FORMAT_PARQUET",
    "FORMAT_TOKENS",
    "FORMAT_WDS",
    "MANIFEST_NAME",
    "REJECTS_NAME",
    "CleanRecord",
    "EncodedSample",
    "FormatError",
    "Manifest",
    "OutputFormat",
    "ShardIndex",
    "ShardInfo",
    "TokenIndex",
    "Totals",
    "format_bytes",
    "index_path_for",
    "index_tar",
    "parse_bytes",
    "read_index",
    "read_manifest",
    "read_token_index",
    "sha256_file",
    "write_index",
    "write_manifest",
]
