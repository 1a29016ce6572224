"""Table rows (``dataprep.inputs.tables`` reads them): infer a schema, clean a row, a row's duplicate digest.

A row that could not be parsed arrives as a ``RowError`` value, which ``clean_row`` turns into
a ``Reject`` naming the row; a parsed row is coerced to the schema's column types or rejected
(``wrong_type``, ``missing_column``).
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

import pyarrow as pa

from dataprep.clean.options import TABLE_TYPES, TableOptions
from dataprep.errors import UsageError
from dataprep.formats.samples import CleanRecord
from dataprep.inputs.names import without_codec
from dataprep.inputs.records import RawRecord, Reject, RejectReason
from dataprep.inputs.tables import RESERVED_COLUMNS, parsed_row

SCHEMA_SAMPLE_ROWS = 1000
DEDUP_DIGEST_BYTES = 16
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


# ----------------------------------------------------------------------------- readers


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
    fields["__source__"] = without_codec(raw.source)  # part-0.jsonl.gz holds part-0.jsonl
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
