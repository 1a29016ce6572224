"""Text files as raw records: one per file, or one per line (a byte range of a file read line by line)."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from pathlib import Path

from dataprep.inputs.records import RawRecord, RejectReason
from dataprep.inputs.tables import RowError, source_key_stem


class TextUnit(enum.StrEnum):
    """One text sample per file or per line."""

    FILE = "file"
    LINE = "line"


def iter_text_records(path: Path, source: str, unit: TextUnit, *, key_stem: str | None = None, start: int = 0,
                      end: int | None = None, first_row: int = 1) -> Iterator[RawRecord]:
    """Raw text records of one file, in file order; ``value`` is bytes (or a RowError if unreadable).

    FILE: one record, the whole file, row None, key ``key_stem`` (default ``source_key_stem(source)``).
    LINE: one record per line without its line terminator (``\\n`` or ``\\r\\n``), row =
    1-based line number, key f"{key_stem}_{row:08d}"; read line by line. With ``start``
    (a byte offset at the start of a line), ``end`` (bytes, exclusive; None = to the end)
    and ``first_row`` (the line number at ``start``) only that part of the file is read.
    """
    stem = key_stem if key_stem is not None else source_key_stem(source)
    row = first_row - 1
    try:
        if unit is TextUnit.FILE:
            yield RawRecord(stem, source, value=path.read_bytes())
            return
        with open(path, "rb") as f:
            f.seek(start)
            offset = start
            for row, line in enumerate(f, first_row):
                if end is not None and offset >= end:
                    return
                offset += len(line)
                yield RawRecord(f"{stem}_{row:08d}", source, row=row,
                                value=line.removesuffix(b"\n").removesuffix(b"\r"))
    except OSError as err:
        where = f" after line {row}" if row >= first_row else ""
        error = RowError(RejectReason.UNREADABLE, f"cannot read {path}{where}: {err.strerror or err}")
        yield RawRecord(stem, source, value=error)
