"""The inputs as dataprep finds them: ``RawRecord`` (one input), ``Reject`` (one dropped input, and why),
``FilePart`` (a table or text file, or a part of one) and ``Unit`` (what a plan holds per input).

A *raw record* is one input as found in RAW (an image with its sidecar files, a table
row, a text line). Cleaning turns it into a *clean record* (the fields of one sample,
as encoded bytes; ``dataprep.formats.samples``) or a *reject* with a reason code.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field


class RejectReason(enum.StrEnum):
    """Why an input was dropped. Stable strings: they appear in rejects.jsonl and the manifest."""

    UNREADABLE = "unreadable"          # I/O error, permission denied, dangling symlink
    EMPTY_FILE = "empty_file"          # zero bytes
    NOT_AN_IMAGE = "not_an_image"      # no image format recognised
    TRUNCATED = "truncated"            # image data ends early
    CORRUPT = "corrupt"                # image header fine, data does not decode
    TOO_SMALL = "too_small"            # shorter side < --min-side
    TOO_LARGE = "too_large"            # more pixels than --max-pixels (decompression bomb guard)
    DUPLICATE = "duplicate"            # same content as an earlier input (by sorted key)
    BAD_LABEL = "bad_label"            # label missing, not in the label map, or not an integer
    BAD_METADATA = "bad_metadata"      # sidecar .json is not a JSON object / .txt not UTF-8
    SYMLINK_OUTSIDE = "symlink_outside"  # symlink leaving RAW without --follow-symlinks
    BAD_ROW = "bad_row"                # table row unparsable (malformed CSV/JSON line)
    WRONG_TYPE = "wrong_type"          # table value does not match the column type
    MISSING_COLUMN = "missing_column"  # a required column is absent or null
    INVALID_UTF8 = "invalid_utf8"      # text or table value is not valid UTF-8
    EMPTY_TEXT = "empty_text"          # text is empty after stripping
    TOO_FEW_TOKENS = "too_few_tokens"  # fewer tokens than --min-tokens (token output)
    NO_MEDIA = "no_media"              # grouped files with no image in the group
    UNSUPPORTED = "unsupported"        # a file the layout has no use for (e.g. a README among tables)
    WORKER_CRASH = "worker_crash"      # cleaning it killed the worker process (a decoder crash)
    RECORD_TOO_LONG = "record_too_long"  # a line, row or text file over --max-record-bytes (skipped, never held)
    CORRUPT_COMPRESSED = "corrupt_compressed"  # a compressed file truncated or corrupt: one per file, naming the
    # compressed byte offset and the records read before it (those are kept or rejected on their own)


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One input found in RAW.

    key: shard-safe sample key (no '/', '..', leading dot or extra dots), unique in the run.
    source: path relative to RAW as text (undecodable bytes escaped with surrogateescape).
    files: field name (lower-case extension without dot, e.g. "jpg", "txt") -> absolute path.
    label: class name for the image-folder layout, else None.
    row: 1-based row or line number for table and text inputs, else None.
    value: the parsed row (tables) or the raw line bytes (text), else None.
    """

    key: str
    source: str
    files: dict[str, str] = field(default_factory=dict)
    label: str | None = None
    row: int | None = None
    value: object = None




@dataclass(frozen=True, slots=True)
class Reject:
    """One dropped input and why: a line of rejects.jsonl."""

    source: str
    reason: RejectReason
    detail: str
    row: int | None = None

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"source": self.source, "reason": str(self.reason), "detail": self.detail}
        if self.row is not None:
            doc["row"] = self.row
        return doc


@dataclass(frozen=True, slots=True)
class FilePart:
    """A table or text file, or the part of one in bytes [start, end) (end None: to its end).

    key: the file's unique key stem (records are ``f"{key}_{row:08d}"``, or ``key`` for a
    whole text file); first_row: the 1-based line number at ``start``; size: bytes planned.
    """

    source: str
    path: str
    key: str
    size: int
    start: int = 0
    end: int | None = None
    first_row: int = 1


# What a run plan holds per input: a media input or its reject, or a part of a table or text file.
Unit = RawRecord | Reject | FilePart


def reject_line(reject: Reject) -> bytes:
    """One line of rejects.jsonl: UTF-8 JSON; names that are not UTF-8 keep their bytes as \\udcXX escapes."""
    doc = reject.to_json()
    try:
        return json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # a lone surrogate from surrogateescape: os.fsencode restores the bytes
        return json.dumps(doc).encode("ascii") + b"\n"
