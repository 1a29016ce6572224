"""Table files as rows: stream the rows of CSV/TSV, JSONL and Parquet files as raw records.

Reading is streaming with bounded memory (CSV and JSONL line by line, Parquet batch by
batch), and a bad row never stops the file: it is yielded as a ``RowError`` value that
cleaning (``dataprep.clean.tables.clean_row``) turns into a ``Reject`` naming the row.
Invalid UTF-8 is found per row, not per file. CSV has no null but the empty field, so the
reader maps "" to None.

CSV, TSV and JSON lines may be compressed (``part-0.jsonl.gz``: ``dataprep.inputs.compressed``), and
``.json`` is read as JSON lines (the C4 / Dolma convention; planning refuses a ``.json`` holding one JSON
array). A line longer than ``max_record_bytes`` is a ``record_too_long`` row error, skipped without being
held; a damaged compressed file ends with one ``corrupt_compressed`` error for the file (row None) after the
rows decoded before the damage (``dataprep.inputs.lines``).

Row numbers are 1-based: for CSV/TSV the data row (the header and blank lines are not
counted), for JSONL the line number, for Parquet the row's position in the file.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dataprep.errors import UsageError
from dataprep.inputs.lines import DEFAULT_MAX_RECORD_BYTES, Line, LongLine, StreamDamage, describe_long, read_lines
from dataprep.inputs.names import codec_of, data_extension, without_codec
from dataprep.inputs.records import RawRecord, Reject, RejectReason


# Columns dataprep adds to every row it writes: a table may not have them.
RESERVED_COLUMNS = frozenset({"__key__", "__source__", "__row__"})
# A table file's extension (its compression aside) -> how it is read.
TABLE_KINDS = {"csv": "csv", "tsv": "tsv", "jsonl": "jsonl", "ndjson": "jsonl", "json": "jsonl", "parquet": "parquet"}
COMPRESSED_PARQUET = ("a compressed Parquet file cannot be read as a stream (Parquet needs to seek, and its pages "
                      "are compressed already): decompress it")


_PARQUET_BATCH_ROWS = 1024
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class RowError:
    """A row (or, with row None, a whole file) that could not be parsed, and why."""

    reason: RejectReason
    detail: str


Row = tuple[int | None, dict[str, object] | RowError]  # (row number, parsed row or why not)


def table_kind(name: str) -> str | None:
    """'csv', 'tsv', 'jsonl' or 'parquet' for a table file's name, its compression aside ('a.json.gz': 'jsonl')."""
    return TABLE_KINDS.get(data_extension(name))


def source_key_stem(source: str) -> str:
    """Key prefix of the records of a file: its path without suffix (nor compression), '.' and '/' replaced by '_'."""
    source = without_codec(source)
    stem = source.rsplit(".", 1)[0] if "." in source.rpartition("/")[2] else source
    return stem.replace("/", "_").replace(".", "_")


def iter_table_rows(path: Path, source: str, *, key_stem: str | None = None, start: int = 0,
                    end: int | None = None, first_row: int = 1,
                    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[RawRecord]:
    """One RawRecord per row of a table file; ``value`` is the row (column -> value) or a RowError.

    key: f"{key_stem}_{row:08d}" (default stem ``source_key_stem(source)``). A file that
    cannot be read at all, or whose compressed data is damaged, yields one record with row
    None and a RowError (after the rows before the damage). ``start``, ``end`` (byte offsets
    at line starts) and ``first_row`` (the line number at ``start``) read a part of a plain
    JSONL file; other kinds are read whole. ``max_record_bytes``: the longest line read.
    """
    kind = table_kind(path.name)
    if kind is None:
        raise UsageError(f"{path}: not a table file (extensions: {', '.join(sorted(TABLE_KINDS))}, "
                         "each also compressed)")
    readers: dict[str, Callable[[], Iterator[Row]]] = {
        "csv": lambda: _csv_rows(path, ",", max_record_bytes), "tsv": lambda: _csv_rows(path, "\t", max_record_bytes),
        "parquet": lambda: _parquet_rows(path),
        "jsonl": lambda: _jsonl_rows(path, start, end, first_row, max_record_bytes),
    }
    stem = key_stem if key_stem is not None else source_key_stem(source)
    if kind == "parquet" and codec_of(path.name) is not None:
        yield RawRecord(stem, source, value=RowError(RejectReason.UNSUPPORTED, COMPRESSED_PARQUET))
        return
    last = 0
    try:
        for row, value in readers[kind]():
            last = row or last
            yield RawRecord(f"{stem}_{row:08d}" if row else stem, source, row=row, value=value)
    except OSError as err:
        where = f" after row {last}" if last else ""
        error = RowError(RejectReason.UNREADABLE, f"cannot read {path}{where}: {err.strerror or err}")
        yield RawRecord(stem, source, value=error)


def damage_error(damage: StreamDamage, records: int) -> RowError:
    """The ``corrupt_compressed`` error that ends a damaged file, ``records`` read before the damage."""
    return RowError(RejectReason.CORRUPT_COMPRESSED, damage.describe(records))


def long_line_error(long: LongLine, number: int, max_record_bytes: int) -> RowError:
    """The ``record_too_long`` error of line ``number``."""
    return RowError(RejectReason.RECORD_TOO_LONG, f"line {number}: {describe_long(long, max_record_bytes)}")


@dataclass(slots=True)
class _CsvLines:
    """The lines the csv module reads, as text; what it cannot be shown (a long line, damage) noted aside."""

    long: list[LongLine] = field(default_factory=list)
    damage: StreamDamage | None = None

    def text(self, lines: Iterator[Line]) -> Iterator[str]:
        # Lines decode one by one; invalid bytes survive as lone surrogates and are
        # reported for the row that holds them, so one bad row does not stop the file.
        for line in lines:
            if isinstance(line, StreamDamage):
                self.damage = line
                return
            if isinstance(line, LongLine):
                self.long.append(line)
                # in its place a line that opens or closes a quoted field as it did: the csv reader stays in
                # step, and the row that held the line is reported too long
                yield '"\n' if line.odd_quotes else "\n"
                continue
            yield line.decode("utf-8", "surrogateescape")


def _csv_rows(path: Path, delimiter: str, max_record_bytes: int) -> Iterator[Row]:
    lines = _CsvLines()
    reader = csv.reader(lines.text(read_lines(path, max_record_bytes)), delimiter=delimiter)
    header = _csv_header(reader)
    if lines.long or lines.damage is not None:
        header = _csv_header_lost(lines, max_record_bytes)
    if isinstance(header, RowError):
        yield None, header
        return
    row = 0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as err:  # e.g. a field over csv.field_size_limit(); the reader goes on
            if lines.damage is not None:  # the row the damage cut: not a complete record
                break
            row += 1
            yield row, RowError(RejectReason.BAD_ROW, f"line {reader.line_num}: {err}")
            continue
        if lines.long:  # the row held a line too long (a row of its own, or inside a quoted field)
            row += 1
            yield row, long_line_error(lines.long[0], reader.line_num, max_record_bytes)
            lines.long.clear()
        elif cells:  # skip blank lines
            row += 1
            yield row, _csv_value(header, cells, reader.line_num)
    if lines.damage is not None:
        yield None, damage_error(lines.damage, row)


def _csv_header_lost(lines: _CsvLines, max_record_bytes: int) -> RowError:
    """Why there is no header: the header line was too long, or the damage came before it ended."""
    if lines.damage is not None:
        return damage_error(lines.damage, 0)
    return RowError(RejectReason.RECORD_TOO_LONG,
                    f"header line: {describe_long(lines.long[0], max_record_bytes)}; no row can be read without it")


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


def _jsonl_rows(path: Path, start: int, end: int | None, first_row: int, max_record_bytes: int) -> Iterator[Row]:
    records = 0
    for number, line in enumerate(read_lines(path, max_record_bytes, start=start, end=end), first_row):
        if isinstance(line, StreamDamage):
            yield None, damage_error(line, records)
            return
        if isinstance(line, LongLine):
            records += 1
            yield number, long_line_error(line, number, max_record_bytes)
            continue
        if number == 1:
            line = line.removeprefix(_BOM)
        if line.strip():  # skip blank lines
            records += 1
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
