from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataprep.formats.manifest import ShardInfo, sha256_file
from dataprep.formats.samples import CleanRecord
from dataprep.formats.parquet.writer import KEY_COLUMN, ParquetShardWriter
from dataprep.formats.parquet import writer as parquet_module

TABLE_SCHEMA = pa.schema([("text", pa.string()), ("score", pa.float64()), ("tags", pa.list_(pa.string()))])
IMAGE_SCHEMA = pa.schema([("jpg", pa.binary()), ("cls", pa.int64()), ("json", pa.string())])


def table_records(n: int) -> list[CleanRecord]:
    return [
        CleanRecord(f"row_{i:05d}", f"data.csv:{i + 1}", {"text": f"line {i} ✓", "score": i / 4, "tags": ["a", str(i)]})
        for i in range(n)
    ]


def image_records(n: int, *, seed: int = 0) -> list[CleanRecord]:
    rng = random.Random(seed)
    return [
        CleanRecord(f"img_{i:04d}", f"raw/{i}.jpg", {"jpg": rng.randbytes(500 + rng.randrange(1500)), "cls": i % 5,
                                                     "json": f"[{i}]"})
        for i in range(n)
    ]


def write_all(out: Path, records: list[CleanRecord], **kwargs: object) -> list[ShardInfo]:
    shards: list[ShardInfo] = []
    with ParquetShardWriter(out, **kwargs) as writer:  # type: ignore[arg-type]
        for rec in records:
            shards.extend(writer.write(rec))
        shards.extend(writer.close())
    return shards


def read_rows(path: Path, schema: pa.Schema) -> list[dict[str, object]]:
    table = pq.read_table(path, schema=pa.schema([pa.field(KEY_COLUMN, pa.string(), nullable=False), *schema]))
    return table.to_pylist()


def test_rows_read_back_with_the_declared_schema(tmp_path: Path) -> None:
    records = table_records(50)
    [shard] = write_all(tmp_path, records, schema=TABLE_SCHEMA)
    path = tmp_path / shard.name
    assert shard == ShardInfo(path.name, 50, path.stat().st_size, sha256_file(path), None, ("text", "score", "tags"))
    assert pq.read_schema(tmp_path / shard.name).names == [KEY_COLUMN, "text", "score", "tags"]
    assert read_rows(tmp_path / shard.name, TABLE_SCHEMA) == [{KEY_COLUMN: r.key, **r.fields} for r in records]


def test_image_samples_with_binary_int_and_string_columns(tmp_path: Path) -> None:
    records = image_records(30)
    shards = write_all(tmp_path, records, schema=IMAGE_SCHEMA, max_shard_bytes=20_000)
    assert len(shards) > 1
    rows = [row for s in shards for row in read_rows(tmp_path / s.name, IMAGE_SCHEMA)]
    assert rows == [{KEY_COLUMN: r.key, **r.fields} for r in records]
    assert pq.read_schema(tmp_path / shards[0].name).field("cls").type == pa.int64()


def test_row_groups_are_bounded_by_estimated_bytes(tmp_path: Path) -> None:
    records = image_records(40)
    [shard] = write_all(tmp_path, records, schema=IMAGE_SCHEMA, row_group_bytes=8_000)
    meta = pq.read_metadata(tmp_path / shard.name)
    # Expected: a group closes at the first row that takes its estimated bytes to 8000.
    expected, rows, nbytes = [], 0, 0
    for rec in records:
        rows += 1
        nbytes += len(rec.key) + len(rec.fields["jpg"]) + 8 + len(rec.fields["json"])  # type: ignore[arg-type]
        if nbytes >= 8_000:
            expected.append(rows)
            rows = nbytes = 0
    expected += [rows] if rows else []
    assert len(expected) > 3
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == expected


def test_row_groups_are_bounded_in_rows_for_tiny_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parquet_module, "MAX_ROWS_PER_GROUP", 16)
    [shard] = write_all(tmp_path, table_records(50), schema=TABLE_SCHEMA)
    meta = pq.read_metadata(tmp_path / shard.name)
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [16, 16, 16, 2]


def test_rollover_by_count(tmp_path: Path) -> None:
    shards = write_all(tmp_path, table_records(25), schema=TABLE_SCHEMA, max_shard_bytes=None,
                       max_samples_per_shard=10, start_shard=3)
    assert [(s.name,
             s.num_samples) for s in shards] == [(f"shard-{n:06d}.parquet", k) for n, k in ((3, 10), (4, 10), (5, 5))]
    assert [pq.read_metadata(tmp_path / s.name).num_rows for s in shards] == [10, 10, 5]


def test_rollover_by_estimated_bytes(tmp_path: Path) -> None:
    records = [CleanRecord(f"k{i}", "raw", {"jpg": b"x" * 1000, "cls": i, "json": "{}"}) for i in range(10)]
    # ~1012 estimated bytes per row: three rows fit in 3100, a fourth does not.
    shards = write_all(tmp_path, records, schema=IMAGE_SCHEMA, max_shard_bytes=3100)
    assert [s.num_samples for s in shards] == [3, 3, 3, 1]


def test_identical_inputs_give_identical_bytes_and_no_temporary_files(tmp_path: Path) -> None:
    records = image_records(20)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        write_all(tmp_path / name, records, schema=IMAGE_SCHEMA, max_samples_per_shard=8, row_group_bytes=5_000)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["shard-000000.parquet", "shard-000001.parquet", "shard-000002.parquet"]
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == names
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_value_of_the_wrong_type_names_key_and_column_and_aborts(tmp_path: Path) -> None:
    writer = ParquetShardWriter(tmp_path, schema=IMAGE_SCHEMA, row_group_bytes=1)
    with pytest.raises(TypeError, match=r"'bad'.*'cls'.*int64"):
        writer.write(CleanRecord("bad", "raw", {"jpg": b"x", "cls": "three", "json": "{}"}))
    assert list(tmp_path.iterdir()) == []


def test_bad_value_found_at_close_names_the_row(tmp_path: Path) -> None:
    writer = ParquetShardWriter(tmp_path, schema=IMAGE_SCHEMA)
    writer.write(CleanRecord("good", "raw", {"jpg": b"x", "cls": 1, "json": "{}"}))
    writer.write(CleanRecord("bad", "raw", {"jpg": 5, "cls": 1, "json": "{}"}))
    with pytest.raises(TypeError, match=r"'bad'.*'jpg'"):
        writer.close()
    assert list(tmp_path.iterdir()) == []


def test_missing_not_null_column_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("cls", pa.int64(), nullable=False), pa.field("txt", pa.string())])
    writer = ParquetShardWriter(tmp_path, schema=schema)
    writer.write(CleanRecord("a", "raw", {"cls": 1}))  # nullable txt may be missing
    writer.write(CleanRecord("b", "raw", {"txt": "no label"}))
    with pytest.raises(TypeError, match=r"'b'.*'cls'.*not null"):
        writer.close()


def test_unknown_column_is_refused(tmp_path: Path) -> None:
    with ParquetShardWriter(tmp_path,
                            schema=IMAGE_SCHEMA) as writer, pytest.raises(ValueError, match=r"'k'.*\['png'\]"):
        writer.write(CleanRecord("k", "raw", {"png": b"x"}))


def test_abort_removes_the_temporary_file(tmp_path: Path) -> None:
    writer = ParquetShardWriter(tmp_path, schema=TABLE_SCHEMA, max_samples_per_shard=10, row_group_bytes=100)
    for rec in table_records(15):
        writer.write(rec)
    assert (tmp_path / ".shard-000001.parquet.tmp").exists()
    writer.abort()
    assert [p.name for p in tmp_path.iterdir()] == ["shard-000000.parquet"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"schema": {"a": "int"}}, TypeError, "'schema' must be a pyarrow.Schema"),
        ({"schema": pa.schema([(KEY_COLUMN, pa.int64()), ("a", pa.int64())])}, ValueError, "must be a string column"),
        ({"schema": TABLE_SCHEMA, "row_group_bytes": 0}, ValueError,
         r"'row_group_bytes' must be a positive int \(got 0 that is a int\)"),
        ({"schema": TABLE_SCHEMA, "compression": "zip"}, ValueError, "'compression' must be one of"),
        ({"schema": TABLE_SCHEMA, "max_shard_bytes": None}, ValueError, "at least one"),
    ],
)
def test_bad_arguments_are_refused_at_construction(tmp_path: Path, kwargs: dict[str, object], error: type[Exception],
                                                   message: str) -> None:
    with pytest.raises(error, match=message):
        ParquetShardWriter(tmp_path, **kwargs)  # type: ignore[arg-type]


def test_uncompressed_files_are_readable(tmp_path: Path) -> None:
    [shard] = write_all(tmp_path, table_records(5), schema=TABLE_SCHEMA, compression="none")
    assert pq.read_metadata(tmp_path / shard.name).row_group(0).column(1).compression == "UNCOMPRESSED"
