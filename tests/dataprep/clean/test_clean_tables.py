"""Table rows: streaming readers with per-row errors, schema inference, coercion, Arrow schema."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataprep.clean.options import TableOptions
from dataprep.clean.tables import arrow_schema, clean_row, dedup_value, infer_schema
from dataprep.inputs.tables import RowError, iter_table_rows, source_key_stem
from dataprep.errors import UsageError
from dataprep.formats.samples import CleanRecord
from dataprep.inputs.records import RawRecord, Reject, RejectReason

SCHEMA = {"id": "int64", "name": "string", "score": "double", "ok": "bool"}


def rows_of(path: Path, source: str | None = None) -> list[RawRecord]:
    return list(iter_table_rows(path, source or path.name))


def errors_of(records: list[RawRecord]) -> dict[int | None, RejectReason]:
    return {r.row: r.value.reason for r in records if isinstance(r.value, RowError)}


def raw_row(value: object, row: int = 1) -> RawRecord:
    return RawRecord(f"t_{row:08d}", "t.csv", row=row, value=value)


# ----------------------------------------------------------------------------- readers


def test_csv_rows_are_numbered_from_the_first_data_row(tmp_path: Path) -> None:
    path = tmp_path / "part.0.csv"
    path.write_bytes(b'\xef\xbb\xbfid,name,score\r\n1,Zo\xc3\xab,0.5\r\n\r\n2,"multi\nline",\r\n3\n')
    records = rows_of(path, "sub/part.0.csv")
    assert [r.row for r in records] == [1, 2, 3]
    assert [r.value for r in records] == [
        {"id": "1", "name": "Zoë", "score": "0.5"},
        {"id": "2", "name": "multi\nline", "score": None},  # "" is null in CSV
        {"id": "3"},  # short row: the rest is absent
    ]
    assert [r.key for r in records] == ["sub_part_0_00000001", "sub_part_0_00000002", "sub_part_0_00000003"]
    assert all(r.source == "sub/part.0.csv" for r in records)


def test_invalid_utf8_in_one_csv_row_does_not_stop_the_others(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"id,name\n1,ok\n2,caf\xe9\n3,fine\n")
    records = rows_of(path)
    assert errors_of(records) == {2: RejectReason.INVALID_UTF8}
    detail = records[1].value.detail
    assert "line 3" in detail and "'name'" in detail and "0xe9" in detail
    good = [r.value for r in records if not isinstance(r.value, RowError)]
    assert good == [{"id": "1", "name": "ok"}, {"id": "3", "name": "fine"}]


def test_csv_row_errors_carry_their_row_numbers(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    huge = b'"' + b"x" * 200_000 + b'"'  # over csv.field_size_limit()
    path.write_bytes(b"a,b\n1,2\n1,2,3\n" + huge + b",1\n4,5\n")
    records = rows_of(path)
    assert errors_of(records) == {2: RejectReason.BAD_ROW, 3: RejectReason.BAD_ROW}
    assert "3 fields" in records[1].value.detail
    assert records[3].value == {"a": "4", "b": "5"}


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"", RejectReason.EMPTY_FILE), (b"\n\n", RejectReason.EMPTY_FILE), (b"a,a\n1,2\n", RejectReason.BAD_ROW),
     (b"a,\n1,2\n", RejectReason.BAD_ROW), (b"a,__row__\n1,2\n", RejectReason.BAD_ROW),
     (b"a,\xff\n1,2\n", RejectReason.INVALID_UTF8)],
)
def test_bad_csv_header_rejects_the_file_once(tmp_path: Path, content: bytes, reason: RejectReason) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    records = rows_of(path)
    assert len(records) == 1 and records[0].row is None and records[0].value.reason is reason


def test_tsv(tmp_path: Path) -> None:
    path = tmp_path / "t.tsv"
    path.write_bytes(b"a\tb\n1\tx,y\n")
    assert [r.value for r in rows_of(path)] == [{"a": "1", "b": "x,y"}]


def test_jsonl_rows_are_line_numbers_and_bad_lines_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = [b'{"id": 1, "name": "a"}', b"", b'{"id": 2', b"[1, 2]", b'{"name": "caf\xe9"}', b'{"x": NaN}',
             b'{"id": 7}']
    path.write_bytes(b"\n".join(lines) + b"\n")
    records = rows_of(path)
    assert [r.row for r in records] == [1, 3, 4, 5, 6, 7]  # the blank line 2 is skipped
    bad, utf8 = RejectReason.BAD_ROW, RejectReason.INVALID_UTF8
    assert errors_of(records) == {3: bad, 4: bad, 5: utf8, 6: bad}
    assert "byte 13" in records[3].value.detail and "line 5" in records[3].value.detail
    assert records[0].value == {"id": 1, "name": "a"} and records[-1].value == {"id": 7}


def test_parquet_rows_stream_in_batches(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    table = pa.table({"id": list(range(2500)), "name": [f"n{i}" for i in range(2500)]})
    pq.write_table(table, path, row_group_size=1000)
    records = rows_of(path)
    assert len(records) == 2500 and records[0].row == 1 and records[-1].row == 2500
    assert records[1233].value == {"id": 1233, "name": "n1233"}


def test_unreadable_and_unparsable_files(tmp_path: Path) -> None:
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    [record] = rows_of(tmp_path / "bad.parquet")
    assert record.row is None and record.value.reason is RejectReason.BAD_ROW and "Parquet" in record.value.detail
    [record] = rows_of(tmp_path / "missing.csv")
    assert record.value.reason is RejectReason.UNREADABLE and "missing.csv" in record.value.detail
    with pytest.raises(UsageError, match="not a table file"):
        rows_of(tmp_path / "notes.txt")


def test_source_key_stem() -> None:
    assert source_key_stem("a/b.c/part.1.csv") == "a_b_c_part_1"
    assert source_key_stem(".hidden.jsonl") == "_hidden"
    assert source_key_stem("dir.x/noext") == "dir_x_noext"


# ----------------------------------------------------------------------------- schema


def test_infer_schema_types() -> None:
    rows = [
        {"id": "1", "score": "0.5", "flag": "true", "name": "a", "n": 3, "f": 1.5, "b": True, "zip": "02134",
         "nested": {"a": 1}},
        {"id": "-22", "score": "3", "flag": "False", "name": "12", "n": None, "f": 2, "b": False, "zip": "10001",
         "nested": None},
    ]
    assert infer_schema(rows) == {
        "id": "int64", "score": "double", "flag": "bool", "name": "string", "n": "int64", "f": "double",
        "b": "bool", "zip": "string", "nested": "string",
    }


def test_one_malformed_value_does_not_decide_a_column() -> None:
    rows = [{"id": str(i), "x": None} for i in range(50)] + [{"id": "oops", "x": None}]
    assert infer_schema(rows) == {"id": "int64", "x": "string"}  # all-null columns are strings
    assert infer_schema([{"v": "a"}, {"v": "1"}, {"v": "b"}]) == {"v": "string"}


def test_infer_schema_reads_at_most_max_rows_and_skips_reserved_names() -> None:
    def endless():
        i = 0
        while True:
            yield {"v": str(i) if i < 10 else "text", "__row__": 1}
            i += 1

    assert infer_schema(endless(), max_rows=10) == {"v": "int64"}


# ----------------------------------------------------------------------------- clean_row


def test_clean_row_coerces_and_adds_source_and_row() -> None:
    value = {"id": " 12 ", "name": "Zoë", "score": "1e3", "ok": "TRUE", "extra": "dropped"}
    result = clean_row(raw_row(value, row=5), SCHEMA, TableOptions())
    assert isinstance(result, CleanRecord)
    assert result.fields == {"id": 12, "name": "Zoë", "score": 1000.0, "ok": True, "__source__": "t.csv", "__row__": 5}


def test_clean_row_from_json_types() -> None:
    value = {"id": 3.0, "name": {"b": [1, 2]}, "score": 2, "ok": 0}
    result = clean_row(raw_row(value), SCHEMA, TableOptions())
    assert isinstance(result, CleanRecord)
    assert [result.fields[c] for c in SCHEMA] == [3, '{"b":[1,2]}', 2.0, False]
    spelled_as_float = clean_row(raw_row({"id": "7.00"}), SCHEMA, TableOptions())
    assert isinstance(spelled_as_float, CleanRecord) and spelled_as_float.fields["id"] == 7


@pytest.mark.parametrize(
    ("column", "value"),
    [("id", "1.5"), ("id", "abc"), ("id", True), ("id", str(2**63)), ("score", "1,5"), ("score", False),
     ("score", 10**400), ("ok", "maybe"), ("ok", 2), ("name", b"bytes")],
)
def test_wrong_type_names_column_and_value(column: str, value: object) -> None:
    result = clean_row(raw_row({column: value}, row=9), SCHEMA, TableOptions())
    assert isinstance(result, Reject) and result.reason is RejectReason.WRONG_TYPE and result.row == 9
    assert repr(column) in result.detail and SCHEMA[column] in result.detail and repr(value)[:20] in result.detail


def test_missing_required_columns() -> None:
    opts = TableOptions(required=("id",))
    absent = clean_row(raw_row({"name": "x"}), SCHEMA, opts)
    null = clean_row(raw_row({"id": None}), SCHEMA, opts)
    assert isinstance(absent, Reject) and absent.reason is RejectReason.MISSING_COLUMN and "absent" in absent.detail
    assert isinstance(null, Reject) and null.reason is RejectReason.MISSING_COLUMN and "null" in null.detail
    kept = clean_row(raw_row({"id": "1"}), SCHEMA, opts)
    assert isinstance(kept, CleanRecord) and kept.fields["name"] is None
    every = clean_row(raw_row({"id": "1", "name": "x", "score": "1"}), SCHEMA, TableOptions(required=None))
    assert isinstance(every, Reject) and "'ok'" in every.detail


def test_row_errors_and_non_mappings_become_rejects() -> None:
    result = clean_row(raw_row(RowError(RejectReason.INVALID_UTF8, "line 3: bad"), row=2), SCHEMA, TableOptions())
    assert result == Reject("t.csv", RejectReason.INVALID_UTF8, "line 3: bad", 2)
    result = clean_row(raw_row([1, 2]), SCHEMA, TableOptions())
    assert isinstance(result, Reject) and result.reason is RejectReason.BAD_ROW


def test_lone_surrogate_in_a_string_is_invalid_utf8() -> None:
    value = json.loads('{"name": "a\\udcff"}')
    result = clean_row(raw_row(value), SCHEMA, TableOptions())
    assert isinstance(result, Reject) and result.reason is RejectReason.INVALID_UTF8 and "'name'" in result.detail


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_any_int64_round_trips_through_csv_text(n: int) -> None:
    result = clean_row(raw_row({"id": str(n)}), {"id": "int64"}, TableOptions())
    assert isinstance(result, CleanRecord) and result.fields["id"] == n


def test_dedup_value() -> None:
    record = CleanRecord("k", "t.csv", {"a": None, "b": math.nan, "c": "x"})
    assert dedup_value(record, "a") is None and dedup_value(record, "b") == "NaN" and dedup_value(record, "c") == "x"


# ----------------------------------------------------------------------------- arrow


def test_arrow_schema_holds_clean_rows(tmp_path: Path) -> None:
    schema = arrow_schema(SCHEMA)
    assert schema.names == ["__key__", "id", "name", "score", "ok", "__source__", "__row__"]
    assert [schema.field(c).type for c in SCHEMA] == [pa.int64(), pa.string(), pa.float64(), pa.bool_()]
    path = tmp_path / "t.csv"
    path.write_bytes(b"id,name,score,ok\n1,a,0.5,true\n2,,,\n")
    records = [clean_row(r, SCHEMA, TableOptions()) for r in rows_of(path)]
    table = pa.Table.from_pylist([{"__key__": r.key, **r.fields} for r in records], schema=schema)
    assert table.column("name").to_pylist() == ["a", None] and table.column("__row__").to_pylist() == [1, 2]
    with pytest.raises(UsageError, match="reserved"):
        arrow_schema({"__key__": "string"})
    with pytest.raises(UsageError, match="int32"):
        arrow_schema({"a": "int32"})
