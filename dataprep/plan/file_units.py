"""The units of a table or text RAW: one ``FilePart`` per file, line-based files cut into parts at lines.

A compressed file (``part-0.jsonl.gz``) cannot be entered but at its start: it is one unit, sized by its
compressed bytes. A compressed Parquet file is a reject, and a ``.json`` table holding one JSON array (or
one pretty-printed document) is refused, naming the file: dataprep reads JSON lines.

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
from dataprep.inputs.compressed import DECODER_ERRORS, open_input
from dataprep.inputs.lines import DEFAULT_MAX_RECORD_BYTES
from dataprep.inputs.tables import COMPRESSED_PARQUET, iter_table_rows, table_kind
from dataprep.inputs.text import TextUnit
from dataprep.errors import UsageError
from dataprep.inputs.records import FilePart, Reject, RejectReason
from dataprep.inputs.sources import KeyAssigner, Layout, RawFile
from dataprep.inputs.names import TEXT_EXTENSIONS, codec_of, data_extension, printable, without_codec

# Line-based files above this many bytes are planned as several parts (a part is never
# larger than a range either).
MAX_PART_BYTES = 64 * 2**20
_SCHEMA_SAMPLE_ROWS = 1000
_LINE_KINDS = frozenset({"jsonl"})
_JSON_PEEK_BYTES = 64 * 2**10  # of a .json table, read at planning: JSON lines, or one JSON document?


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
            usable = single or data_extension(item.rel) in TEXT_EXTENSIONS
            line_based = text_unit is TextUnit.LINE
        detail = _unreadable_table(item) if usable and layout is Layout.TABLE else None
        if not usable or detail is not None:
            detail = detail or f"'{item.rel.rpartition('/')[2]}' is not a file of a {layout} dataset"
            yield Reject(item.rel, RejectReason.UNSUPPORTED, detail)
            continue
        rel = without_codec(item.rel)  # part-0.jsonl.gz has part-0.jsonl's key: compression is not part of a name
        name = rel.rpartition("/")[2]
        stem = rel[: len(rel) - len(name)] + (name.rpartition(".")[0] if "." in name.lstrip(".") else name)
        key = keys.assign(stem)
        if not line_based or item.size <= part_bytes or codec_of(item.rel) is not None:  # compressed: one unit
            yield FilePart(item.rel, item.path, key, item.size)
            continue
        for start, end, first_row in line_parts(Path(item.path), part_bytes):
            size = (end if end is not None else item.size) - start
            yield FilePart(source=item.rel, path=item.path, key=key, size=size, start=start, end=end,
                           first_row=first_row)


def _unreadable_table(item: RawFile) -> str | None:
    """Why a table file is rejected (a compressed Parquet file), else None.

    A ``.json`` file must hold JSON lines: one holding a JSON array, or one JSON document over several
    lines, is refused (UsageError naming the file and the fix) rather than read as lines it does not hold.
    """
    if codec_of(item.rel) is not None and table_kind(item.rel) == "parquet":
        return COMPRESSED_PARQUET
    if data_extension(item.rel) != "json":
        return None
    try:
        with open_input(Path(item.path)) as src:
            head = src.stream.readline(_JSON_PEEK_BYTES).lstrip(b"\xef\xbb\xbf \t\r\n")
    except DECODER_ERRORS:
        return None  # unreadable or damaged: the reader says so, with the rows it could read
    if head.startswith(b"[") or head.rstrip() == b"{":
        what = "one JSON array" if head.startswith(b"[") else "one JSON document over several lines"
        raise UsageError(f"{printable(item.rel)}: holds {what}, not JSON lines (one object per line), which is what "
                         "dataprep reads from a .json file (the C4 / Dolma convention); convert it, e.g. "
                         "jq -c '.[]' FILE > FILE.jsonl, or move it out of RAW")
    return None


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
                    offsets: np.ndarray, *, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> dict[str, str]:
    """The table schema: ``--schema``, else inferred from the first rows; checks the named columns exist.

    text_column: token output's text column (then ``table`` names none: it must be the one that exists).
    max_record_bytes: rows over it are not sampled (they are ``record_too_long`` rejects).
    """
    schema = table.schema
    if schema is None:
        schema = infer_schema(_schema_sample(units_path, offsets, max_record_bytes), max_rows=_SCHEMA_SAMPLE_ROWS)
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


def _schema_sample(units_path: Path, offsets: np.ndarray, max_record_bytes: int) -> Iterator[dict[str, object]]:
    fd = os.open(units_path, os.O_RDONLY)
    try:
        for i in range(len(offsets) - 1):
            start, end = int(offsets[i]), int(offsets[i + 1])
            unit = pickle.loads(os.pread(fd, end - start, start))
            if not isinstance(unit, FilePart):
                continue
            for record in iter_table_rows(Path(unit.path), unit.source, key_stem=unit.key, start=unit.start,
                                          end=unit.end, first_row=unit.first_row, max_record_bytes=max_record_bytes):
                if isinstance(record.value, dict):
                    yield record.value
    finally:
        os.close(fd)
