"""Text records (``dataprep.inputs.text`` reads them) cleaned: strict UTF-8, not blank, Unicode-normalised.

The text of a table's column (token output, ``clean_table_text``) is cleaned the same way.
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Literal, cast

from dataprep.clean.options import TextOptions
from dataprep.inputs.tables import RowError, parsed_row
from dataprep.formats.samples import CleanRecord
from dataprep.inputs.names import without_codec
from dataprep.inputs.records import RawRecord, Reject, RejectReason

TEXT_DIGEST_BYTES = 16
NormalForm = Literal["NFC", "NFD", "NFKC", "NFKD"]  # what TextOptions.normalize is validated to be


def clean_text(raw: RawRecord, opts: TextOptions) -> CleanRecord | Reject:
    """A text record decoded and normalised, or why not.

    fields: "text" (str, ``opts.normalize`` form, not stripped), "__source__" (str),
    "__row__" (int line number, or None for a whole file). A byte order mark at the
    start of a file is dropped.
    """
    data = raw.value
    if isinstance(data, RowError):
        return Reject(raw.source, data.reason, data.detail, raw.row)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"clean_text needs the record's bytes as value (got a {type(data).__name__} for "
                        f"{raw.source!r})")
    data = bytes(data)
    where = f" of line {raw.row}" if raw.row is not None else ""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        detail = f"invalid UTF-8 byte 0x{data[err.start]:02x} at byte offset {err.start}{where} ({err.reason})"
        return Reject(raw.source, RejectReason.INVALID_UTF8, detail, raw.row)
    if raw.row is None or raw.row == 1:
        text = text.removeprefix("\ufeff")
    what = "line" if raw.row is not None else "file"
    return _text_record(raw, text, opts, f"{what} is empty or only whitespace ({len(data)} bytes)")


def clean_table_text(raw: RawRecord, column: str, opts: TextOptions) -> CleanRecord | Reject:
    """The text in ``column`` of a table row, cleaned as ``clean_text`` cleans a line, or why not.

    fields as ``clean_text``'s (``__row__``: the row number); the row's other columns are
    dropped. A row without the column is a ``missing_column`` reject; a null, empty or blank
    value an ``empty_text`` one; a value that is not a string a ``wrong_type`` one.
    """
    value = parsed_row(raw)
    if isinstance(value, Reject):
        return value
    if column not in value:
        return Reject(raw.source, RejectReason.MISSING_COLUMN,
                      f"no column {column!r} (--text-column) in this row (its columns: {', '.join(map(str, value))})",
                      raw.row)
    text = "" if value[column] is None else value[column]
    if not isinstance(text, str):
        return Reject(raw.source, RejectReason.WRONG_TYPE,
                      f"column {column!r}: expected text, got {str(text)[:60]!r} ({type(text).__name__})", raw.row)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:  # a lone surrogate, e.g. a "\udcff" escape in JSON
        detail = f"column {column!r}: character {err.start} is a lone surrogate, which has no UTF-8 form"
        return Reject(raw.source, RejectReason.INVALID_UTF8, detail, raw.row)
    return _text_record(raw, text, opts, f"column {column!r} is null, empty or only whitespace")


def _text_record(raw: RawRecord, text: str, opts: TextOptions, empty_detail: str) -> CleanRecord | Reject:
    """``text`` normalised as a clean record of ``raw``, or an ``empty_text`` reject if it is blank."""
    if not text.strip():
        return Reject(raw.source, RejectReason.EMPTY_TEXT, empty_detail, raw.row)
    text = unicodedata.normalize(cast(NormalForm, opts.normalize), text)
    fields: dict[str, object] = {"text": text, "__source__": without_codec(raw.source), "__row__": raw.row}
    return CleanRecord(raw.key, raw.source, fields)


def text_digest(record: CleanRecord) -> bytes:
    """16-byte BLAKE2b of the record's normalised text (UTF-8): equal digests = exact duplicates."""
    text = record.fields["text"]
    if not isinstance(text, str):
        raise TypeError(f"text_digest needs a clean text record (field 'text' of {record.key!r} is a "
                        f"{type(text).__name__})")
    return hashlib.blake2b(text.encode("utf-8"), digest_size=TEXT_DIGEST_BYTES).digest()
