"""Table files as rows: stream the rows of CSV/TSV, JSONL and Parquet files as raw records.

Reading is streaming with bounded memory (CSV and JSONL line by line, Parquet batch by
batch), and a bad row never stops the file: it is yielded as a ``RowError`` value that
cleaning (``dataprep.clean.tables.clean_row``) turns into a ``Reject`` naming the row.
Invalid UTF-8 is found per row, not per file. CSV has no null but the empty field, so the
reader maps "" to None.

Row numbers are 1-based: for CSV/TSV the data row (the header and blank lines are not
counted), for JSONL the line number, for Parquet the row's position in the file.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dataprep.errors import UsageError
from dataprep.inputs.records import RawRecord, Reject, RejectReason


# Columns dataprep adds to every row it writes: a table may not have them.
RESERVED_COLUMNS = frozenset({"__key__", "__source__", "__row__"})
TABLE_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}


_PARQUET_BATCH_ROWS = 1024


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


def parsed_row(raw: RawRecord) -> Mapping[str, object] | Reject:
    """A table record's row (column -> value), or the reject of a row that could not be parsed."""
    value = raw.value
    if isinstance(value, RowError):
        return Reject(raw.source, value.reason, value.detail, raw.row)
    if not isinstance(value, Mapping):
        return Reject(raw.source, RejectReason.BAD_ROW, f"row is a {type(value).__name__}, expected column -> value",
                      raw.row)
    return value
