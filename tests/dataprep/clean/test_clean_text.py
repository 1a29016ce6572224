"""Text records: per file and per line, strict UTF-8, blank text, Unicode normalisation, digests."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from dataprep.clean.options import TextOptions
from dataprep.clean.text import clean_text, text_digest
from dataprep.inputs.tables import RowError
from dataprep.inputs.text import TextUnit, iter_text_records
from dataprep.formats.samples import CleanRecord
from dataprep.inputs.records import RawRecord, Reject, RejectReason

NFC = "Crème brûlée in Zürich, déjà vu."
NFD = unicodedata.normalize("NFD", NFC)


def text_record(data: bytes, row: int | None = None) -> RawRecord:
    return RawRecord("k", "notes.txt", row=row, value=data)


def test_file_unit_yields_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "a.b.txt"
    path.write_bytes(b"one\ntwo\n")
    [record] = iter_text_records(path, "docs/a.b.txt", TextUnit.FILE)
    assert (record.key, record.source, record.row, record.value) == ("docs_a_b", "docs/a.b.txt", None, b"one\ntwo\n")


def test_line_unit_yields_numbered_lines_without_terminators(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"one\r\ntwo\n\nlast")
    records = list(iter_text_records(path, "a.txt", TextUnit.LINE))
    assert [(r.row, r.value) for r in records] == [(1, b"one"), (2, b"two"), (3, b""), (4, b"last")]
    assert records[0].key == "a_00000001"


def test_unreadable_file_gives_one_record_that_cleans_to_a_reject(tmp_path: Path) -> None:
    [record] = iter_text_records(tmp_path / "gone.txt", "gone.txt", TextUnit.LINE)
    assert isinstance(record.value, RowError)
    result = clean_text(record, TextOptions())
    assert isinstance(result, Reject) and result.reason is RejectReason.UNREADABLE and "gone.txt" in result.detail


def test_clean_text_normalises_to_nfc() -> None:
    result = clean_text(text_record(NFD.encode(), row=3), TextOptions())
    assert isinstance(result, CleanRecord)
    assert result.fields == {"text": NFC, "__source__": "notes.txt", "__row__": 3}
    assert result.key == "k" and NFD != NFC


def test_other_normal_forms() -> None:
    result = clean_text(text_record("ﬁ ①".encode()), TextOptions(normalize="NFKC"))
    assert isinstance(result, CleanRecord) and result.fields["text"] == "fi 1"


def test_invalid_utf8_reports_the_byte_offset() -> None:
    result = clean_text(text_record(b"caf\xc3\xa9 au lait \xe9t\xe9", row=7), TextOptions())
    assert isinstance(result, Reject) and result.reason is RejectReason.INVALID_UTF8 and result.row == 7
    assert "byte offset 14" in result.detail and "0xe9" in result.detail and "line 7" in result.detail


@pytest.mark.parametrize("data", [b"", b"   \t\r\n ", "\u3000\u2003".encode(), b"\xef\xbb\xbf\n"])
def test_blank_text_is_empty(data: bytes) -> None:
    result = clean_text(text_record(data), TextOptions())
    assert isinstance(result, Reject) and result.reason is RejectReason.EMPTY_TEXT


def test_byte_order_mark_is_dropped_only_at_the_start_of_a_file() -> None:
    first = clean_text(text_record(b"\xef\xbb\xbfhello", row=1), TextOptions())
    later = clean_text(text_record(b"\xef\xbb\xbfhello", row=2), TextOptions())
    assert isinstance(first, CleanRecord) and first.fields["text"] == "hello"
    assert isinstance(later, CleanRecord) and later.fields["text"] == "\ufeffhello"


def test_text_digest_is_equal_for_equal_normalised_text() -> None:
    a = clean_text(text_record(NFC.encode()), TextOptions())
    b = clean_text(text_record(NFD.encode(), row=9), TextOptions())
    c = clean_text(text_record(b"something else"), TextOptions())
    assert isinstance(a, CleanRecord) and isinstance(b, CleanRecord) and isinstance(c, CleanRecord)
    assert text_digest(a) == text_digest(b) != text_digest(c)
    assert len(text_digest(a)) == 16


def test_clean_text_refuses_a_non_bytes_value() -> None:
    with pytest.raises(TypeError, match=r"notes\.txt"):
        clean_text(text_record("already text"), TextOptions())  # type: ignore[arg-type]
