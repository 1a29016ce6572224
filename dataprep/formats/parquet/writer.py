"""Parquet shards: rows buffered into bounded row groups, one file per shard.

A row is a ``CleanRecord``'s fields (column -> Python value) plus ``"__key__"`` (the
sample key, a non-null string column placed first). Sizes are estimated from the Python
values (bytes/str length, 8 bytes per number) before compression: ``max_shard_bytes`` and
``row_group_bytes`` bound those estimates, not the compressed file size, which for
already-compressed payloads (JPEG) is close and for text is usually smaller.
pyarrow writes no timestamps, so identical rows give byte-identical files.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from dataprep.formats.durable import commit_tmp, tmp_path_for
from dataprep.formats.manifest import ShardInfo, sha256_file
from dataprep.formats.samples import CleanRecord, EncodedSample
from dataprep.errors import require_int, bad_argument
from dataprep.formats.writer import DEFAULT_MAX_SHARD_BYTES, ShardLimits, ShardNaming, WriterLifecycle, remove_quietly

log = logging.getLogger(__name__)
_T = TypeVar("_T")

PARQUET_SUFFIX = ".parquet"
KEY_COLUMN = "__key__"
DEFAULT_ROW_GROUP_BYTES = 64 * 2**20
# Python objects cost ~100 bytes per value whatever their payload: cap rows too.
MAX_ROWS_PER_GROUP = 64 * 1024
COMPRESSIONS = ("none", "snappy", "gzip", "brotli", "lz4", "zstd")
_CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def estimate_bytes(value: object) -> int:
    """Rough in-memory size of one value once in Arrow: payload length, 8 per number, 1 per null."""
    if value is None:
        return 1
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, (list, tuple)):
        return 8 + sum(estimate_bytes(v) for v in value)
    if isinstance(value, Mapping):
        return 8 + sum(estimate_bytes(k) + estimate_bytes(v) for k, v in value.items())
    return 8


def file_schema(schema: pa.Schema) -> pa.Schema:
    """The schema written to disk: ``__key__`` (string, not null) first, then the caller's columns."""
    if not isinstance(schema, pa.Schema):
        raise bad_argument("schema", "a pyarrow.Schema", schema, TypeError)
    columns = [f for f in schema if f.name != KEY_COLUMN]
    if KEY_COLUMN in schema.names and not pa.types.is_string(schema.field(KEY_COLUMN).type):
        raise ValueError(f"'schema' column {KEY_COLUMN!r} must be a string column (got "
                         f"{schema.field(KEY_COLUMN).type})")
    if not columns:
        raise ValueError("'schema' must have at least one column besides '__key__' (got none)")
    return pa.schema([pa.field(KEY_COLUMN, pa.string(), nullable=False), *columns])


@dataclass(frozen=True)
class ParquetOptions:
    """How rows become files: row-group size bound (estimated bytes) and compression codec."""

    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    compression: str = "zstd"

    def __post_init__(self) -> None:
        require_int("row_group_bytes", self.row_group_bytes, minimum=1, error=ValueError)
        if self.compression not in COMPRESSIONS:
            raise bad_argument("compression", f"one of {COMPRESSIONS}", self.compression, ValueError)
        if self.compression != "none" and not pa.Codec.is_available(self.compression):
            raise ValueError(f"'compression' {self.compression!r} is not available in this pyarrow build")


class _RowBuffer:
    """Rows of the current row group, column-wise, with their keys and estimated bytes."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.columns: dict[str, list[object]] = {name: [] for name in schema.names}
        self.num_rows = 0
        self.nbytes = 0

    def append(self, key: str, row: Mapping[str, object], nbytes: int) -> None:
        for name, values in self.columns.items():
            values.append(key if name == KEY_COLUMN else row.get(name))
        self.num_rows += 1
        self.nbytes += nbytes

    def to_table(self, shard: str) -> pa.Table:
        """Convert to Arrow; a value that does not fit its column raises ``TypeError`` naming key and column."""
        try:
            table = pa.Table.from_pydict(self.columns, schema=self.schema)
        except _CONVERSION_ERRORS as err:
            raise self._locate_bad_value(shard, err) from err
        for field in self.schema:
            if not field.nullable and table.column(field.name).null_count:
                key = self.columns[KEY_COLUMN][self.columns[field.name].index(None)]
                raise TypeError(f"{shard}: sample {key!r} column {field.name!r} is null or missing; the schema "
                                "declares it not null")
        return table

    def _locate_bad_value(self, shard: str, err: Exception) -> TypeError:
        # Only on the error path: convert value by value to name the culprit.
        for i in range(self.num_rows):
            for field in self.schema:
                value = self.columns[field.name][i]
                try:
                    pa.array([value], type=field.type)
                except _CONVERSION_ERRORS:
                    key, shown = self.columns[KEY_COLUMN][i], repr(value)[:80]
                    return TypeError(f"{shard}: sample {key!r} column {field.name!r}: {shown} does not fit "
                                     f"{field.type}")
        return TypeError(f"{shard}: rows do not fit the schema: {err}")


@dataclass
class _OpenShard:
    """A shard being written under its temporary name; the file exists from its first row group."""

    name: str
    final: Path
    tmp: Path
    num_samples: int = 0
    nbytes: int = 0
    writer: pq.ParquetWriter | None = None
    fileobj: BinaryIO | None = None


class ParquetShardWriter(WriterLifecycle):
    """Writes ``CleanRecord``s (fields: column -> value) into Parquet shards of a given schema.

    Shards are ``f"{prefix}-{n:06d}.parquet"`` in ``out_dir``, numbered from ``start_shard``.
    Memory holds at most one row group (``row_group_bytes`` estimated bytes or
    ``MAX_ROWS_PER_GROUP`` rows). Not thread-safe.
    """

    def __init__(
        self,
        out_dir: Path,
        *,
        schema: pa.Schema,
        prefix: str = "shard",
        max_shard_bytes: int | None = DEFAULT_MAX_SHARD_BYTES,
        max_samples_per_shard: int | None = None,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        start_shard: int = 0,
        compression: str = "zstd",
    ) -> None:
        self._schema = file_schema(schema)
        self._limits = ShardLimits(max_shard_bytes, max_samples_per_shard)
        self._options = ParquetOptions(row_group_bytes, compression)
        self._naming = ShardNaming(Path(out_dir), prefix, PARQUET_SUFFIX, start_shard)
        self._columns = frozenset(self._schema.names) - {KEY_COLUMN}
        self._next_shard = start_shard
        self._open: _OpenShard | None = None
        self._buffer = _RowBuffer(self._schema)
        self._done: list[ShardInfo] = []
        self._is_finished = False

    @property
    def schema(self) -> pa.Schema:
        """The schema of the files: ``__key__`` first, then the caller's columns."""
        return self._schema

    @property
    def shards(self) -> tuple[ShardInfo, ...]:
        """Every shard completed so far, in order."""
        return tuple(self._done)

    def write(self, record: CleanRecord | EncodedSample) -> list[ShardInfo]:
        """Add one row; returns the shard this call completed, if any (already renamed)."""
        if self._is_finished:
            raise ValueError("write() on a ParquetShardWriter that was closed or aborted")
        if not isinstance(record, CleanRecord):
            raise TypeError(f"sample {record.key!r}: Parquet shards take CleanRecord rows (got a "
                            f"{type(record).__name__}, "
                            "a sample encoded for tar shards)")
        unknown = record.fields.keys() - self._columns
        if unknown:
            raise ValueError(f"sample {record.key!r}: columns {sorted(unknown)} are not in the schema "
                             f"{sorted(self._columns)}")
        if not isinstance(record.key, str) or not record.key:
            raise ValueError(f"sample key must be a non-empty str (got {record.key!r} that is a "
                             f"{type(record.key).__name__})")
        nbytes = estimate_bytes(record.key) + sum(estimate_bytes(v) for v in record.fields.values())
        closed: list[ShardInfo] = []
        shard = self._open
        if shard is not None and self._limits.is_overflow(shard.nbytes, shard.num_samples, nbytes):
            closed.append(self._finish_open())
        shard = self._open or self._start_shard()
        self._buffer.append(record.key, record.fields, nbytes)
        shard.num_samples += 1
        shard.nbytes += nbytes
        if self._buffer.nbytes >= self._options.row_group_bytes or self._buffer.num_rows >= MAX_ROWS_PER_GROUP:
            self._guarded(self._flush_row_group)
        if self._limits.is_full(shard.num_samples):
            closed.append(self._finish_open())
        return closed

    def abort(self) -> None:
        """Drop buffered rows and remove the temporary file of the open shard; completed shards stay."""
        self._is_finished = True
        shard, self._open = self._open, None
        self._buffer = _RowBuffer(self._schema)
        if shard is None:
            return
        try:
            # Closing the writer (it writes a footer into the doomed file) keeps it from
            # trying again at garbage collection, after its file object is gone.
            if shard.writer is not None:
                shard.writer.close()
        except (pa.ArrowException, OSError) as err:
            log.warning("ignored while aborting shard %s: %s", shard.tmp, err)
        finally:
            if shard.fileobj is not None:
                shard.fileobj.close()
            remove_quietly(shard.tmp)

    def _start_shard(self) -> _OpenShard:
        final = self._naming.path(self._next_shard)
        self._open = _OpenShard(final.name, final, tmp_path_for(final))
        self._next_shard += 1
        return self._open

    def _flush_row_group(self) -> None:
        shard = self._open
        if shard is None or self._buffer.num_rows == 0:
            return
        table = self._buffer.to_table(shard.name)
        if shard.writer is None:
            # Our own file object, so that we can fsync it before the rename.
            shard.fileobj = open(shard.tmp, "wb")  # noqa: SIM115 (lives as long as the shard)
            compression = None if self._options.compression == "none" else self._options.compression
            shard.writer = pq.ParquetWriter(shard.fileobj, self._schema, compression=compression)
        shard.writer.write_table(table, row_group_size=table.num_rows)
        self._buffer = _RowBuffer(self._schema)

    def _finish_open(self) -> ShardInfo:
        shard = self._open
        if shard is None:
            raise RuntimeError("no open shard to finish")  # internal invariant, not user input
        self._guarded(self._flush_row_group)
        info = self._guarded(lambda: self._commit(shard))
        self._open = None
        self._done.append(info)
        return info

    def _commit(self, shard: _OpenShard) -> ShardInfo:
        if shard.writer is None or shard.fileobj is None:
            raise RuntimeError("shard has no rows to commit")  # internal invariant
        shard.writer.close()
        shard.fileobj.flush()
        os.fsync(shard.fileobj.fileno())
        shard.fileobj.close()
        commit_tmp(shard.tmp, shard.final)
        fields = tuple(n for n in self._schema.names if n != KEY_COLUMN)
        return ShardInfo(name=shard.name, num_samples=shard.num_samples, bytes=shard.final.stat().st_size,
                         sha256=sha256_file(shard.final), index=None, fields=fields)

    def _guarded(self, step: Callable[[], _T]) -> _T:
        """Run a step that touches the open shard; on failure abort it (its file is unusable) and re-raise."""
        try:
            return step()
        except (OSError, TypeError, ValueError) as err:
            if self._open is not None:
                err.add_note(f"while writing shard {self._open.tmp}")
            self.abort()
            raise
