"""Text files as raw records: one per file, or one per line (a byte range of a file read line by line).

A text file may be compressed (``corpus.txt.zst``: ``dataprep.inputs.compressed``). A record (a line, or a
whole file) longer than ``max_record_bytes`` is a ``record_too_long`` error, never held whole; a damaged
compressed file ends with one ``corrupt_compressed`` error for the file after the lines before the damage.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from pathlib import Path

from dataprep.inputs.lines import (DEFAULT_MAX_RECORD_BYTES, LongLine, StreamDamage, describe_long, read_lines,
                                   read_whole)
from dataprep.inputs.records import RawRecord, RejectReason
from dataprep.inputs.tables import RowError, damage_error, long_line_error, source_key_stem


class TextUnit(enum.StrEnum):
    """One text sample per file or per line."""

    FILE = "file"
    LINE = "line"


def iter_text_records(path: Path, source: str, unit: TextUnit, *, key_stem: str | None = None, start: int = 0,
                      end: int | None = None, first_row: int = 1,
                      max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[RawRecord]:
    """Raw text records of one file, in file order; ``value`` is bytes (or a RowError).

    FILE: one record, the whole file, row None, key ``key_stem`` (default ``source_key_stem(source)``).
    LINE: one record per line without its line terminator (``\\n`` or ``\\r\\n``), row =
    1-based line number, key f"{key_stem}_{row:08d}"; read line by line. With ``start``
    (a byte offset at the start of a line), ``end`` (bytes, exclusive; None = to the end)
    and ``first_row`` (the line number at ``start``) only that part of the file is read.
    A file that cannot be read, or the damage of a compressed one, is a record with row None.
    """
    stem = key_stem if key_stem is not None else source_key_stem(source)
    row = first_row - 1
    try:
        if unit is TextUnit.FILE:
            yield RawRecord(stem, source, value=_whole_file(path, max_record_bytes))
            return
        for row, line in enumerate(read_lines(path, max_record_bytes, start=start, end=end), first_row):
            key = f"{stem}_{row:08d}"
            if isinstance(line, bytes):  # the common case first: a line per record, millions of them
                yield RawRecord(key, source, row=row, value=line.removesuffix(b"\n").removesuffix(b"\r"))
            elif isinstance(line, LongLine):
                yield RawRecord(key, source, row=row, value=long_line_error(line, row, max_record_bytes))
            else:
                yield RawRecord(stem, source, value=damage_error(line, row - first_row))
    except OSError as err:
        where = f" after line {row}" if row >= first_row else ""
        error = RowError(RejectReason.UNREADABLE, f"cannot read {path}{where}: {err.strerror or err}")
        yield RawRecord(stem, source, value=error)


def _whole_file(path: Path, max_record_bytes: int) -> bytes | RowError:
    """A file's bytes as one record, or why not (too long, damaged)."""
    data = read_whole(path, max_record_bytes)
    if isinstance(data, StreamDamage):
        return damage_error(data, 0)
    if isinstance(data, LongLine):
        return RowError(RejectReason.RECORD_TOO_LONG, describe_long(data, max_record_bytes, whole_file=True))
    return data
