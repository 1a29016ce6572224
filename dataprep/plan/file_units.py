"""The units of a table or text RAW: one ``FilePart`` per file, line-based files cut into parts at lines.

Also the table schema a plan records: ``--schema``, else inferred from the first rows, with
the columns the options name checked to exist.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from dataprep.clean.options import TableOptions
from dataprep.clean.tables import infer_schema
from dataprep.inputs.tables import TABLE_SUFFIXES, iter_table_rows
from dataprep.inputs.text import TextUnit
from dataprep.errors import UsageError
from dataprep.inputs.records import FilePart, Reject, RejectReason
from dataprep.inputs.sources import KeyAssigner, Layout, RawFile
from dataprep.inputs.names import TEXT_EXTENSIONS, extension

# Line-based files above this many bytes are planned as several parts (a part is never
# larger than a range either).
MAX_PART_BYTES = 64 * 2**20
_SCHEMA_SAMPLE_ROWS = 1000
_LINE_KINDS = frozenset({"jsonl"})


def table_kind(name: str) -> str | None:
    """'csv', 'tsv', 'jsonl' or 'parquet' for a table file name, else None."""
    suffix = "." + name.rpartition(".")[2].lower() if "." in name.rpartition("/")[2] else ""
    return TABLE_SUFFIXES.get(suffix)


def file_units(items: Iterable[RawFile | Reject], layout: Layout, text_unit: TextUnit, part_bytes: int, *,
               single: bool, keys: KeyAssigner) -> Iterator[FilePart | Reject]:
    """The units of a table or text RAW from its walked ``items``, in their order; parts of about ``part_bytes``
    for line-based files. single: RAW is one file (read as the layout whatever its extension); keys: the run's."""
    for item in items:
        if isinstance(item, Reject):
            yield item
            continue
        kind = table_kind(item.rel)
        if layout is Layout.TABLE:
            usable, line_based = kind is not None, kind in _LINE_KINDS
        else:
            usable = single or extension(item.rel) in TEXT_EXTENSIONS
            line_based = text_unit is TextUnit.LINE
        if not usable:
            yield Reject(item.rel, RejectReason.UNSUPPORTED,
                         f"'{item.rel.rpartition('/')[2]}' is not a file of a {layout} dataset")
            continue
        name = item.rel.rpartition("/")[2]
        stem = item.rel[: len(item.rel) - len(name)] + (name.rpartition(".")[0] if "." in name.lstrip(".") else name)
        key = keys.assign(stem)
        if not line_based or item.size <= part_bytes:
            yield FilePart(item.rel, item.path, key, item.size)
            continue
        for start, end, first_row in line_parts(Path(item.path), part_bytes):
            size = (end if end is not None else item.size) - start
            yield FilePart(source=item.rel, path=item.path, key=key, size=size, start=start, end=end,
                           first_row=first_row)


def line_parts(path: Path, part_bytes: int) -> list[tuple[int, int | None, int]]:
    """(start, end, first line number) of parts of about ``part_bytes``, each starting at a line.

    One read of the file in 1 MiB chunks, counting newlines. The last part's end is None.
    """
    parts: list[tuple[int, int | None, int]] = []
    start, first_row, lines, pos, target = 0, 1, 0, 0, part_bytes
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            i = 0
            while target < pos + len(chunk):
                j = chunk.find(b"\n", max(target - pos, i))
                if j < 0:
                    break
                lines += chunk.count(b"\n", i, j + 1)
                parts.append((start, pos + j + 1, first_row))
                start, first_row, i = pos + j + 1, lines + 1, j + 1
                target = start + part_bytes
            lines += chunk.count(b"\n", i)
            pos += len(chunk)
    if start < pos or not parts:
        parts.append((start, None, first_row))
    else:
        parts[-1] = (parts[-1][0], None, parts[-1][2])
    return parts


def table_schema_of(table: TableOptions, text_column: str | None, units_path: Path,
                    offsets: np.ndarray) -> dict[str, str]:
    """The table schema: ``--schema``, else inferred from the first rows; checks the named columns exist.

    text_column: token output's text column (then ``table`` names none: it must be the one that exists).
    """
    schema = table.schema
    if schema is None:
        schema = infer_schema(_schema_sample(units_path, offsets), max_rows=_SCHEMA_SAMPLE_ROWS)
        named = [("--dedup-on", table.dedup_on)] if table.dedup_on else []
        named += [("--required", c) for c in table.required or ()]
        hint = "check the name, or pass --schema to declare the columns"
        if text_column is not None:  # the text column is the one that matters; --schema does not apply
            named, hint = [("--text-column", text_column)], "name the column of the text with --text-column"
        for option, column in named:
            if column not in schema:
                found = ", ".join(schema) or "none"
                raise UsageError(f"{option} {column!r}: no such column in the first {_SCHEMA_SAMPLE_ROWS} rows of "
                                 f"the tables (columns found: {found}); {hint}")
    return schema


def _schema_sample(units_path: Path, offsets: np.ndarray) -> Iterator[dict[str, object]]:
    fd = os.open(units_path, os.O_RDONLY)
    try:
        for i in range(len(offsets) - 1):
            start, end = int(offsets[i]), int(offsets[i + 1])
            unit = pickle.loads(os.pread(fd, end - start, start))
            if not isinstance(unit, FilePart):
                continue
            for record in iter_table_rows(Path(unit.path), unit.source, key_stem=unit.key, start=unit.start,
                                          end=unit.end, first_row=unit.first_row):
                if isinstance(record.value, dict):
                    yield record.value
    finally:
        os.close(fd)
