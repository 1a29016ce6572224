"""Table inputs: stream the rows of CSV/TSV, JSONL and Parquet files, infer a schema, clean a row.

Reading is streaming with bounded memory (CSV and JSONL line by line, Parquet batch by
batch), and a bad row never stops the file: it is yielded as a ``RowError`` value that
``clean_row`` turns into a ``Reject`` naming the row. Invalid UTF-8 is found per row,
not per file. CSV has no null but the empty field, so the reader maps "" to None.

Row numbers are 1-based: for CSV/TSV the data row (the header and blank lines are not
counted), for JSONL the line number, for Parquet the row's position in the file.
"""

from __future__ import annotations

import csv
import datetime
import decimal
import hashlib
import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dataprep.clean.options import RESERVED_COLUMNS, TABLE_TYPES, TableOptions
from dataprep.errors import UsageError
from dataprep.formats.samples import CleanRecord
from dataprep.inputs.records import RawRecord, Reject, RejectReason

TABLE_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
SCHEMA_SAMPLE_ROWS = 1000
DEDUP_DIGEST_BYTES = 16
_PARQUET_BATCH_ROWS = 1024
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT = re.compile(r"[+-]?[0-9]+(\.0*)?")  # "3.0" is accepted as 3, as JSON's 3.0 is
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(nan|inf|infinity)", re.IGNORECASE)
# Inference counts "007" and "02134" as identifiers, not numbers (coercion still accepts them).
_CANONICAL_INT = re.compile(r"[+-]?(0|[1-9][0-9]*)")
_CANONICAL_FLOAT = re.compile(
    r"[+-]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(nan|inf|infinity)", re.IGNORECASE
)
_ARROW_TYPES = {"int64": pa.int64(), "double": pa.float64(), "string": pa.string(), "bool": pa.bool_()}
_TRUE, _FALSE = frozenset({"true", "1"}), frozenset({"false", "0"})

@dataclass(frozen=True, slots=True)
class RowError:
    """A row (or, with row None, a whole file) that could not be parsed, and why."""

    reason: RejectReason
    detail: str


Row = tuple[int | None, dict[str, object] | RowError]  # (row number, parsed row or why not)


def source_key_stem(source: str) -> str:
    """Key prefix of the records of a file: its path without suffix, '.' and '/' replaced by '_'."""
    stem = source.rsplit(".", 1)[0] if "." in source.rpartition("/")[2] else source
    return stem.replace("/", "_").replace(".", "_")


def iter_table_rows(path: Path, source: str, *, key_stem: str | None = None, start: int = 0,
                    end: int | None = None, first_row: int = 1) -> Iterator[RawRecord]:
    """One RawRecord per row of a table file; ``value`` is the row (column -> value) or a RowError.

    key: f"{key_stem}_{row:08d}" (default stem ``source_key_stem(source)``). A file that
    cannot be read at all yields one record with row None and a RowError. ``start``,
    ``end`` (byte offsets at line starts) and ``first_row`` (the line number at ``start``)
    read a part of a JSONL file; other kinds are read whole.
    """
    kind = TABLE_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise UsageError(f"{path}: not a table file (suffixes: {', '.join(sorted(TABLE_SUFFIXES))})")
    readers: dict[str, Callable[[Path], Iterator[Row]]] = {
        "csv": _csv_rows, "tsv": _tsv_rows, "parquet": _parquet_rows,
        "jsonl": lambda p: _jsonl_rows(p, start, end, first_row),
    }
    stem = key_stem if key_stem is not None else source_key_stem(source)
    last = 0
    try:
        for row, value in readers[kind](path):
            last = row or last
            yield RawRecord(f"{stem}_{row:08d}" if row else stem, source, row=row, value=value)
    except OSError as err:
        where = f" after row {last}" if last else ""
        error = RowError(RejectReason.UNREADABLE, f"cannot read {path}{where}: {err.strerror or err}")
        yield RawRecord(stem, source, value=error)


# ----------------------------------------------------------------------------- readers


def _tsv_rows(path: Path) -> Iterator[Row]:
    return _csv_rows(path, delimiter="\t")


def _csv_rows(path: Path, delimiter: str = ",") -> Iterator[Row]:
    with open(path, "rb") as f:
        # Lines decode one by one; invalid bytes survive as lone surrogates and are
        # reported for the row that holds them, so one bad row does not stop the file.
        lines = (line.decode("utf-8", "surrogateescape") for line in f)
        reader = csv.reader(lines, delimiter=delimiter)
        header = _csv_header(reader)
        if isinstance(header, RowError):
            yield None, header
            return
        row = 0
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as err:  # e.g. a field over csv.field_size_limit(); the reader goes on
                row += 1
                yield row, RowError(RejectReason.BAD_ROW, f"line {reader.line_num}: {err}")
                continue
            if cells:  # skip blank lines
                row += 1
                yield row, _csv_value(header, cells, reader.line_num)


def _csv_header(reader: Iterator[list[str]]) -> list[str] | RowError:
    try:
        names = next((cells for cells in reader if cells), None)
    except csv.Error as err:
        return RowError(RejectReason.BAD_ROW, f"header does not parse: {err}")
    if names is None:
        return RowError(RejectReason.EMPTY_FILE, "no header line")
    names[0] = names[0].removeprefix("\ufeff")  # UTF-8 byte order mark
    if (bad := _invalid_utf8(names)) is not None:
        return RowError(RejectReason.INVALID_UTF8, f"header: column {bad[0] + 1} {bad[1]}")
    duplicated = sorted(name for name, n in Counter(names).items() if n > 1)
    reserved = sorted(RESERVED_COLUMNS.intersection(names))
    if "" in names or duplicated or reserved:
        problem = ("an empty column name" if "" in names
                   else f"column names used twice or reserved: {duplicated + reserved}")
        return RowError(RejectReason.BAD_ROW, f"header has {problem}")
    return names


def _csv_value(header: list[str], cells: list[str], line: int) -> dict[str, object] | RowError:
    if len(cells) > len(header):
        return RowError(RejectReason.BAD_ROW, f"line {line}: {len(cells)} fields, the header has {len(header)}")
    if (bad := _invalid_utf8(cells)) is not None:
        return RowError(RejectReason.INVALID_UTF8, f"line {line}, column {header[bad[0]]!r}: {bad[1]}")
    # Fewer fields than the header: the missing columns are absent (clean_row decides).
    return {name: (cell if cell != "" else None) for name, cell in zip(header, cells, strict=False)}


def _invalid_utf8(cells: list[str]) -> tuple[int, str] | None:
    """(index, detail) of the first cell holding surrogate-escaped bytes, else None."""
    for i, cell in enumerate(cells):
        if cell.isascii():
            continue
        try:
            cell.encode("utf-8")
        except UnicodeEncodeError as err:
            offset = len(cell[: err.start].encode("utf-8", "surrogateescape"))
            byte = ord(cell[err.start]) - 0xDC00 if 0xDC80 <= ord(cell[err.start]) <= 0xDCFF else ord(cell[err.start])
            return i, f"invalid UTF-8 byte 0x{byte:02x} at byte {offset} of the field"
    return None


def _jsonl_rows(path: Path, start: int = 0, end: int | None = None, first_row: int = 1) -> Iterator[Row]:
    with open(path, "rb") as f:
        f.seek(start)
        offset = start
        for number, line in enumerate(f, first_row):
            if end is not None and offset >= end:
                return
            offset += len(line)
            if number == 1:
                line = line.removeprefix(b"\xef\xbb\xbf")  # UTF-8 byte order mark
            if line.strip():  # skip blank lines
                yield number, _jsonl_value(line, number)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _jsonl_value(line: bytes, number: int) -> dict[str, object] | RowError:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as err:
        detail = f"line {number}: invalid UTF-8 byte 0x{line[err.start]:02x} at byte {err.start}"
        return RowError(RejectReason.INVALID_UTF8, detail)
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError as err:  # JSONDecodeError is a ValueError
        return RowError(RejectReason.BAD_ROW, f"line {number}: not JSON ({err})")
    if not isinstance(value, dict):
        return RowError(RejectReason.BAD_ROW, f"line {number}: a JSON {type(value).__name__}, expected an object")
    return value


def _parquet_rows(path: Path) -> Iterator[Row]:
    try:
        parquet = pq.ParquetFile(path)
    except OSError:
        raise  # an I/O error: iter_table_rows reports the file as unreadable
    except pa.ArrowException as err:
        yield None, RowError(RejectReason.BAD_ROW, f"not a readable Parquet file: {err}")
        return
    row = 0
    try:
        for batch in parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS):
            for value in batch.to_pylist():
                row += 1
                yield row, value
    except OSError:
        raise
    except pa.ArrowException as err:  # a damaged page or an unsupported type: nothing after it can be read
        yield row + 1, RowError(RejectReason.BAD_ROW, f"rows from {row + 1} on cannot be read: {err}")
    finally:
        parquet.close()


# ----------------------------------------------------------------------------- schema


def _kind(value: object) -> str | None:
    """The narrowest column type that ``value`` fits, None for null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("true", "false"):
            return "bool"
        if _CANONICAL_INT.fullmatch(text):
            return "int64"
        if _CANONICAL_FLOAT.fullmatch(text):
            return "double"
    return "string"


def infer_schema(
    sample_rows: Iterable[Mapping[str, object]], *, max_rows: int = SCHEMA_SAMPLE_ROWS, majority: float = 0.5
) -> dict[str, str]:
    """Column -> type name ("int64", "double", "bool", "string") from the first ``max_rows`` rows.

    A type wins when more than ``majority`` of a column's non-null values have it, so one
    malformed value does not decide a column; among numbers the most general wins (any
    double makes the column double). Columns are in order of first appearance; columns
    named like the metadata columns (``RESERVED_COLUMNS``) are left out.
    """
    kinds: dict[str, Counter[str]] = {}
    for row in itertools.islice(sample_rows, max_rows):
        for column, value in row.items():
            if column in RESERVED_COLUMNS:
                continue
            counts = kinds.setdefault(column, Counter())
            if (kind := _kind(value)) is not None:
                counts[kind] += 1
    return {column: _winner(counts, majority) for column, counts in kinds.items()}


def _winner(counts: Counter[str], majority: float) -> str:
    total = sum(counts.values())
    if total == 0:
        return "string"
    if counts["bool"] > majority * total:
        return "bool"
    if counts["int64"] + counts["double"] > majority * total:
        return "double" if counts["double"] else "int64"
    return "string"


def arrow_schema(schema: Mapping[str, str]) -> pa.Schema:
    """The Parquet schema of cleaned rows: ``__key__``, the columns (nullable), ``__source__``, ``__row__``."""
    columns = []
    for column, type_name in schema.items():
        if column in RESERVED_COLUMNS or type_name not in _ARROW_TYPES:
            allowed = sorted(TABLE_TYPES)
            raise UsageError(f"schema column {column!r}: the name is reserved or {type_name!r} is not one of {allowed}")
        columns.append(pa.field(column, _ARROW_TYPES[type_name]))
    return pa.schema([
        pa.field("__key__", pa.string(), nullable=False),
        *columns,
        pa.field("__source__", pa.string(), nullable=False),
        pa.field("__row__", pa.int64(), nullable=False),
    ])


# ----------------------------------------------------------------------------- cleaning


def _to_int64(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("a bool")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and _INT.fullmatch(text := value.strip()):
        value = int(text.partition(".")[0])
    if not isinstance(value, int) or not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError("not an int64")
    return value


def _to_double(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError("a bool")
    if isinstance(value, (int, float)):
        return float(value)  # OverflowError (an ArithmeticError) for ints beyond 1.8e308
    if isinstance(value, str) and _FLOAT.fullmatch(text := value.strip()):
        return float(text)
    raise ValueError("not a number")


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and (text := value.strip().lower()) in _TRUE | _FALSE:
        return text in _TRUE
    raise ValueError("not a bool")


def _to_string(value: object) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, (bool, int, float, dict, list)):
        # JSON spelling: true, 1.5, {"a":1}; nested values are kept as JSON text.
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    elif isinstance(value, (datetime.date, datetime.time)):
        text = value.isoformat()
    elif isinstance(value, decimal.Decimal):
        text = str(value)
    else:
        raise ValueError(f"a {type(value).__name__}")
    if not text.isascii():
        text.encode("utf-8")  # UnicodeEncodeError for a lone surrogate (e.g. a "\udcff" escape in JSON)
    return text


_COERCE: dict[str, Callable[[object], object]] = {
    "int64": _to_int64, "double": _to_double, "bool": _to_bool, "string": _to_string,
}


def _show(value: object) -> str:
    text = repr(value)
    return f"{text[:60]}... ({type(value).__name__})" if len(text) > 60 else f"{text} ({type(value).__name__})"


def parsed_row(raw: RawRecord) -> Mapping[str, object] | Reject:
    """A table record's row (column -> value), or the reject of a row that could not be parsed."""
    value = raw.value
    if isinstance(value, RowError):
        return Reject(raw.source, value.reason, value.detail, raw.row)
    if not isinstance(value, Mapping):
        return Reject(raw.source, RejectReason.BAD_ROW, f"row is a {type(value).__name__}, expected column -> value",
                      raw.row)
    return value


def clean_row(raw: RawRecord, schema: Mapping[str, str], opts: TableOptions) -> CleanRecord | Reject:
    """A table row coerced to ``schema``, or why not.

    fields: column -> Python value (int, float, bool, str or None) for every schema
    column, plus "__source__" (str) and "__row__" (int). Columns outside the schema are
    dropped. ``opts.required`` columns (all schema columns when None) must be non-null.
    """
    value = parsed_row(raw)
    if isinstance(value, Reject):
        return value
    for column in (schema if opts.required is None else opts.required):
        if value.get(column) is None:
            state = "null" if column in value else "absent"
            return Reject(raw.source, RejectReason.MISSING_COLUMN, f"required column {column!r} is {state}", raw.row)
    fields: dict[str, object] = {}
    for column, type_name in schema.items():
        cell = value.get(column)
        try:
            fields[column] = None if cell is None else _COERCE[type_name](cell)
        except UnicodeEncodeError as err:
            detail = f"column {column!r}: character {err.start} is a lone surrogate, which has no UTF-8 form"
            return Reject(raw.source, RejectReason.INVALID_UTF8, detail, raw.row)
        except (ValueError, ArithmeticError):
            detail = f"column {column!r}: expected {type_name}, got {_show(cell)}"
            return Reject(raw.source, RejectReason.WRONG_TYPE, detail, raw.row)
    fields["__source__"] = raw.source
    fields["__row__"] = raw.row
    return CleanRecord(raw.key, raw.source, fields)


def dedup_value(record: CleanRecord, column: str) -> object:
    """The hashable value that duplicate detection on ``column`` compares; None (null) takes no part.

    NaN compares unequal to itself, so it is mapped to the string "NaN" (values of one
    column share one type, so that cannot meet a real string).
    """
    value = record.fields.get(column)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def dedup_digest(record: CleanRecord, column: str) -> bytes | None:
    """16-byte BLAKE2b of ``dedup_value(record, column)``; None for a null, which is never a duplicate."""
    value = dedup_value(record, column)
    if value is None:
        return None
    return hashlib.blake2b(repr(value).encode("utf-8", "surrogatepass"), digest_size=DEDUP_DIGEST_BYTES).digest()
