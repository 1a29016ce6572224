"""Rows and lines of compressed tables and text (``inputs.tables``, ``inputs.text``), long records and damage as
row errors, and how planning takes compressed files (``plan.file_units``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataprep.errors import UsageError
from dataprep.inputs.raw_source import RawSource
from dataprep.inputs.records import FilePart, Reject, RejectReason
from dataprep.inputs.sources import KeyAssigner, Layout
from dataprep.inputs.tables import RowError, iter_table_rows
from dataprep.inputs.text import TextUnit, iter_text_records
from dataprep.plan.file_units import file_units
from dataprep.plan.plan_input import RawTree
from tests.dataprep.compressed_samples import CODECS, EXTENSIONS, compress


def _rows(n: int) -> bytes:
    return b"".join(json.dumps({"id": i, "text": f"document {i} " * 20}).encode() + b"\n" for i in range(n))


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _errors(records: list) -> list[tuple[int | None, RejectReason]]:
    return [(r.row, r.value.reason) for r in records if isinstance(r.value, RowError)]


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_jsonl_gives_the_rows_and_keys_of_its_plain_copy(tmp_path: Path, codec: str) -> None:
    data = _rows(500)
    plain = _write(tmp_path / "part-0.jsonl", data)
    packed = _write(tmp_path / f"part-0.json.{EXTENSIONS[codec]}", compress(data, codec))
    want = [(r.key, r.row, r.value) for r in iter_table_rows(plain, "part-0.jsonl")]
    got = [(r.key, r.row, r.value) for r in iter_table_rows(packed, packed.name)]
    assert got == want and len(got) == 500


def test_a_truncated_csv_ends_with_one_damage_error_after_its_complete_rows(tmp_path: Path) -> None:
    data = b"id,name\n" + b"".join(b"%d,name %d\n" % (i, i) for i in range(20_000))
    packed = compress(data, "zstd")
    path = _write(tmp_path / "t.csv.zst", packed[: len(packed) - 100])
    records = list(iter_table_rows(path, "t.csv.zst"))
    *rows, last = records
    assert last.row is None and last.value.reason is RejectReason.CORRUPT_COMPRESSED
    assert f"{len(rows)} records read before it" in last.value.detail
    assert [r.value for r in rows] == [{"id": str(i), "name": f"name {i}"} for i in range(len(rows))]
    assert 15_000 < len(rows) < 20_000  # what the last whole block of zstd decodes to


def test_long_csv_lines_are_rows_too_long_and_the_rest_is_read(tmp_path: Path) -> None:
    long = b"9," + b"x" * 5000
    data = b"id,name\n1,a\n" + long + b'\n2,"b\n' + b"y" * 5000 + b'"\n3,c\n'
    path = _write(tmp_path / "t.csv.gz", compress(data, "gzip"))
    records = list(iter_table_rows(path, "t.csv.gz", max_record_bytes=1000))
    assert [(r.row, r.value) for r in records if not isinstance(r.value, RowError)] == \
        [(1, {"id": "1", "name": "a"}), (4, {"id": "3", "name": "c"})]
    assert _errors(records) == [(2, RejectReason.RECORD_TOO_LONG), (3, RejectReason.RECORD_TOO_LONG)]


def test_a_csv_header_too_long_rejects_the_file_once(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", b"a" * 3000 + b"\n1\n")
    records = list(iter_table_rows(path, "t.csv", max_record_bytes=1000))
    assert len(records) == 1 and records[0].value.reason is RejectReason.RECORD_TOO_LONG


def test_long_jsonl_line_in_a_plain_file_is_skipped(tmp_path: Path) -> None:
    data = b'{"id": 1}\n{"id": "' + b"z" * 4000 + b'"}\n{"id": 3}\n'
    path = _write(tmp_path / "t.jsonl", data)
    records = list(iter_table_rows(path, "t.jsonl", max_record_bytes=100))
    assert [(r.row, r.value) for r in records] == [
        (1, {"id": 1}), (2, records[1].value), (3, {"id": 3})]
    assert records[1].value.reason is RejectReason.RECORD_TOO_LONG and "4010 bytes" in records[1].value.detail


def test_compressed_parquet_is_an_unsupported_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.parquet.gz", compress(b"PAR1", "gzip"))
    (record,) = iter_table_rows(path, "t.parquet.gz")
    assert record.value.reason is RejectReason.UNSUPPORTED and "decompress it" in record.value.detail


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_text_by_file_and_by_line(tmp_path: Path, codec: str) -> None:
    data = b"first line\nsecond line\r\nthird"
    path = _write(tmp_path / f"a.txt.{EXTENSIONS[codec]}", compress(data, codec))
    (whole,) = iter_text_records(path, path.name, TextUnit.FILE)
    assert whole.key == "a" and whole.value == data
    lines = list(iter_text_records(path, path.name, TextUnit.LINE))
    assert [(r.key, r.row, r.value) for r in lines] == [
        ("a_00000001", 1, b"first line"), ("a_00000002", 2, b"second line"), ("a_00000003", 3, b"third")]


def test_text_too_long_and_damaged(tmp_path: Path) -> None:
    big = _write(tmp_path / "big.txt.xz", compress(b"w" * 5000, "xz"))
    (record,) = iter_text_records(big, "big.txt.xz", TextUnit.FILE, max_record_bytes=1000)
    assert record.value.reason is RejectReason.RECORD_TOO_LONG
    packed = compress(b"".join(b"line %d\n" % i for i in range(50_000)), "gzip")
    cut = _write(tmp_path / "cut.txt.gz", packed[: len(packed) // 2])
    (whole,) = iter_text_records(cut, "cut.txt.gz", TextUnit.FILE)
    assert whole.value.reason is RejectReason.CORRUPT_COMPRESSED and f"byte {len(packed) // 2} of" in whole.value.detail
    *lines, damage = iter_text_records(cut, "cut.txt.gz", TextUnit.LINE)
    assert [r.value for r in lines] == [b"line %d" % i for i in range(len(lines))]
    assert damage.row is None and damage.value.reason is RejectReason.CORRUPT_COMPRESSED
    assert f"{len(lines)} records read before it" in damage.value.detail


def _units(raw: Path, layout: Layout, unit: TextUnit = TextUnit.LINE, part_bytes: int = 1000) -> list:
    tree = RawTree(RawSource(raw))
    return list(file_units(tree.items(), layout, unit, part_bytes, single=tree.single_file, keys=KeyAssigner()))


def test_a_compressed_file_is_one_unit_keyed_as_its_plain_name(tmp_path: Path) -> None:
    data = _rows(200)  # far larger than a part: a plain copy is cut into parts
    _write(tmp_path / "raw/a/part-0.jsonl.gz", compress(data, "gzip"))
    _write(tmp_path / "raw/b/part-0.jsonl", data)
    _write(tmp_path / "raw/c/notes.parquet.zst", b"\x28\xb5\x2f\xfd")
    units = _units(tmp_path / "raw", Layout.TABLE)
    packed = [u for u in units if isinstance(u, FilePart) and u.source.startswith("a/")]
    plain = [u for u in units if isinstance(u, FilePart) and u.source.startswith("b/")]
    assert len(packed) == 1 and packed[0].start == 0 and packed[0].end is None
    assert packed[0].size == (tmp_path / "raw/a/part-0.jsonl.gz").stat().st_size
    assert len(plain) > 1
    assert packed[0].key == "a__part-0" and plain[0].key == "b__part-0"
    (rejected,) = [u for u in units if isinstance(u, Reject)]
    assert rejected.source == "c/notes.parquet.zst" and rejected.reason is RejectReason.UNSUPPORTED


def test_compressed_text_is_a_text_unit(tmp_path: Path) -> None:
    _write(tmp_path / "raw/a.txt.zst", compress(b"x\n" * 5000, "zstd"))
    _write(tmp_path / "raw/b.csv.gz", compress(b"id\n1\n", "gzip"))
    units = _units(tmp_path / "raw", Layout.TEXT)
    assert isinstance(units[0], FilePart) and units[0].key == "a"
    assert isinstance(units[1], Reject) and units[1].reason is RejectReason.UNSUPPORTED


@pytest.mark.parametrize(("content", "what"), [(b'  [{"id": 1},\n {"id": 2}]\n', "one JSON array"),
                                               (b'{\n  "id": 1\n}\n', "one JSON document over several lines")])
def test_a_json_file_that_is_not_json_lines_is_refused_naming_it(tmp_path: Path, content: bytes, what: str) -> None:
    _write(tmp_path / "raw/good.json", b'{"id": 1}\n')
    _write(tmp_path / "raw/sub/bad.json.bz2", compress(content, "bzip2"))
    with pytest.raises(UsageError, match=f"sub/bad.json.bz2: holds {what}, not JSON lines.*jq -c"):
        _units(tmp_path / "raw", Layout.TABLE)
