"""The table files: ``part-0.csv`` and ``part-1.jsonl``, ``TABLE_COLUMNS``, with declared malformed rows."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from dataprep.inputs.records import RejectReason
from dataprep.synthetic.sink import Sink, prepare_dir
from dataprep.synthetic.spec import STREAM_TABLE
from dataprep.synthetic.vocab import WORDS

TABLE_ROWS_PER_FILE = 200
TABLE_COLUMNS = ("id", "name", "score", "tags", "split")  # int, str, float, str, str

# Data row (0-based) -> how it is broken, per file; each breaks exactly one rule.
# One duplicate id in all (a reject only where a run dedups on "id").
_BAD_KINDS = (RejectReason.WRONG_TYPE, RejectReason.MISSING_COLUMN, RejectReason.BAD_ROW, RejectReason.INVALID_UTF8,
              RejectReason.DUPLICATE)
_CSV_BAD = dict(zip((20, 60, 100, 140, 180), _BAD_KINDS))
_JSONL_BAD = dict(zip((30, 70, 110, 150), _BAD_KINDS[:4]))
_DUPLICATE_OF = 10  # the data row whose id the "duplicate" row repeats
_LATIN1_NAME = "Zürich".encode("latin-1")  # invalid as UTF-8
_LATIN1_PLACEHOLDER = "@@latin1@@"  # swapped for _LATIN1_NAME once the line is bytes


def _table_row(rng: np.random.Generator, row_id: int) -> dict[str, object]:
    tags = sorted({str(t) for t in rng.choice(("red", "large", "outdoor", "night", "macro"), int(rng.integers(1, 4)))})
    return {
        "id": row_id,
        "name": " ".join(str(w) for w in rng.choice(WORDS, 2)),
        "score": round(float(rng.normal(0.5, 0.2)), 4),
        "tags": ",".join(tags),  # commas inside a CSV field: needs quoting
        "split": str(rng.choice(("train", "val", "test"), p=(0.8, 0.1, 0.1))),
    }


def _break_row(row: dict[str, object], how: RejectReason, first_id: int) -> dict[str, object]:
    """A copy of ``row`` broken ``how``; ``invalid_utf8`` leaves a placeholder name to replace in bytes."""
    row = dict(row)
    if how is RejectReason.WRONG_TYPE:
        row["score"] = "abc"
    elif how is RejectReason.INVALID_UTF8:
        row["name"] = _LATIN1_PLACEHOLDER
    elif how is RejectReason.DUPLICATE:
        row["id"] = first_id + _DUPLICATE_OF
    return row


def _csv_line(row: dict[str, object], how: RejectReason | None) -> bytes:
    values = list(row.values())
    if how is RejectReason.MISSING_COLUMN:
        values[0] = ""  # empty id: null in a required int column
    elif how is RejectReason.BAD_ROW:
        values.append("one field too many")
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerow(values)
    return text.getvalue().encode().replace(_LATIN1_PLACEHOLDER.encode(), _LATIN1_NAME)


def _jsonl_line(row: dict[str, object], how: RejectReason | None) -> bytes:
    if how is RejectReason.MISSING_COLUMN:
        row = {k: v for k, v in row.items() if k != "name"}
    line = json.dumps(row, ensure_ascii=False)
    if how is RejectReason.BAD_ROW:
        line = line[: len(line) // 2]  # an unterminated object
    return (line + "\n").encode().replace(_LATIN1_PLACEHOLDER.encode(), _LATIN1_NAME)


def write_tables(top: Path, seed: int, sink: Sink) -> dict[tuple[str, int], str]:
    """Write ``part-0.csv`` and ``part-1.jsonl`` under ``top``; returns (file, line number) -> reject reason."""
    prepare_dir(top)
    rng = np.random.default_rng([seed, STREAM_TABLE])
    rejects: dict[tuple[str, int], str] = {}
    for part, (name, bad, header) in enumerate((("part-0.csv", _CSV_BAD, 1), ("part-1.jsonl", _JSONL_BAD, 0))):
        first_id = part * TABLE_ROWS_PER_FILE
        lines = [",".join(TABLE_COLUMNS).encode() + b"\n"] if header else []
        for n in range(TABLE_ROWS_PER_FILE):
            how = bad.get(n)
            row = _break_row(_table_row(rng, first_id + n), how, first_id) if how else _table_row(rng, first_id + n)
            lines.append(_csv_line(row, how) if name.endswith(".csv") else _jsonl_line(row, how))
            if how:
                rejects[(name, header + n + 1)] = str(how)
        sink.write(top / name, b"".join(lines))
    return rejects
