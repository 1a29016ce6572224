"""Output formats: which one a run writes (``choose_format``), its writer (``open_writer``), the manifest's
schema; the same raw data in tar and in Parquet shards; token shards chosen by a tokenizer."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from dataprep.errors import UsageError
from dataprep.formats.manifest import FORMAT_PARQUET, FORMAT_TOKENS, FORMAT_WDS, ShardInfo, read_manifest
from dataprep.formats.samples import CleanRecord
from dataprep.inputs.sources import Layout
from dataprep.formats.parquet.writer import ParquetShardWriter
from dataprep.formats.tar.writer import TarShardWriter, encode_sample
from dataprep.formats.tokens.writer import TokenShardWriter
from dataprep.formats.registry import WriterOptions, manifest_schema, open_writer
from dataprep.commands.output_format import choose_format
from tests.dataprep.helpers import image_file, reasons_by_source, shard_cli
from tests.samples import tar_samples

SCHEMA = pa.schema([("text", pa.string())])
OPTIONS = WriterOptions(max_shard_bytes=None, max_samples_per_shard=2, row_group_bytes=1 << 20, parquet_schema=SCHEMA)


@pytest.mark.parametrize(("fmt", "writer", "suffix"), [(FORMAT_WDS, TarShardWriter, ".tar"),
                                                      (FORMAT_PARQUET, ParquetShardWriter, ".parquet")])
def test_open_writer_opens_the_format_s_writer_with_the_run_s_limits(tmp_path, fmt, writer, suffix):
    with open_writer(fmt, tmp_path, prefix="shard-00003", start_shard=5, options=OPTIONS) as shards:
        assert isinstance(shards, writer)
        value = {"text": "x"} if fmt == FORMAT_PARQUET else {"txt": b"x"}
        closed = [info for i in range(3) for info in shards.write(CleanRecord(f"k{i}", "src", value))]
    assert [info.name for info in closed] == [f"shard-00003-000005{suffix}"]  # full at 2 samples
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".idx")) == [
        f"shard-00003-000005{suffix}", f"shard-00003-000006{suffix}"]


def test_open_writer_refuses_a_format_without_a_writer_and_parquet_without_a_schema(tmp_path):
    with pytest.raises(UsageError, match="output format 'zip' has no shard writer"):
        open_writer("zip", tmp_path, prefix="p", start_shard=0, options=OPTIONS)
    no_schema = WriterOptions(max_shard_bytes=1 << 20, max_samples_per_shard=None, row_group_bytes=1 << 20)
    with pytest.raises(ValueError, match="parquet_schema"):
        open_writer(FORMAT_PARQUET, tmp_path, prefix="p", start_shard=0, options=no_schema)
    with pytest.raises(ValueError, match="token_dtype"):
        open_writer(FORMAT_TOKENS, tmp_path, prefix="p", start_shard=0, options=no_schema)


def test_open_writer_opens_token_shards_of_the_tokenizer_s_dtype(tmp_path):
    options = WriterOptions(max_shard_bytes=None, max_samples_per_shard=2, row_group_bytes=1 << 20,
                            token_dtype=np.dtype(np.int32))
    with open_writer(FORMAT_TOKENS, tmp_path, prefix="shard-00001", start_shard=0, options=options) as shards:
        assert isinstance(shards, TokenShardWriter) and shards.dtype == np.int32
        closed = [info for i in range(3)
                  for info in shards.write(CleanRecord(f"k{i}", "src", {"tokens": np.arange(i + 1)}))]
    assert [(info.name, info.index, info.num_tokens) for info in closed] == [
        ("shard-00001-000000.bin", "shard-00001-000000.idx", 3)]
    assert manifest_schema(FORMAT_TOKENS, SCHEMA, (), np.dtype(np.int32)) == [{"name": "tokens", "type": "int32"}]


@pytest.mark.parametrize("layout", [Layout.TEXT, Layout.TABLE])
def test_a_tokenizer_chooses_token_shards_of_text_only(layout):
    assert choose_format("auto", layout, tokenized=True) == choose_format("tokens", layout, tokenized=True) == "tokens"
    with pytest.raises(UsageError, match="not --format parquet"):
        choose_format("parquet", layout, tokenized=True)
    with pytest.raises(UsageError, match="--format tokens needs --tokenizer"):
        choose_format("tokens", layout)
    with pytest.raises(UsageError, match="--tokenizer tokenizes text, but RAW is image-folder"):
        choose_format("auto", Layout.IMAGE_FOLDER, tokenized=True)


def test_parquet_writer_refuses_a_sample_encoded_for_tar(tmp_path):
    with open_writer(FORMAT_PARQUET, tmp_path, prefix="p", start_shard=0, options=OPTIONS) as shards:
        with pytest.raises(TypeError, match="Parquet shards take CleanRecord rows"):
            shards.write(encode_sample(CleanRecord("k", "src", {"txt": b"x"})))


@pytest.mark.parametrize(("requested", "layout", "chosen"), [
    ("auto", Layout.IMAGE_FOLDER, FORMAT_WDS), ("auto", Layout.GROUPED, FORMAT_WDS),
    ("auto", Layout.TABLE, FORMAT_PARQUET), ("auto", Layout.TEXT, FORMAT_PARQUET),
    ("parquet", Layout.IMAGE_FOLDER, FORMAT_PARQUET), ("wds", Layout.GROUPED, FORMAT_WDS)])
def test_choose_format_follows_the_layout_unless_asked(requested, layout, chosen):
    assert choose_format(requested, layout) == chosen


@pytest.mark.parametrize("layout", [Layout.TABLE, Layout.TEXT])
def test_tar_shards_of_rows_are_refused(layout):
    with pytest.raises(UsageError, match=f"--format wds holds media samples; a {layout} dataset goes to --format parq"):
        choose_format("wds", layout)


def test_manifest_schema_lists_the_tar_fields_written_or_the_parquet_columns():
    shards = (ShardInfo(name="a.tar", num_samples=1, bytes=1, sha256="", fields=("jpg", "cls")),
              ShardInfo(name="b.tar", num_samples=1, bytes=1, sha256="", fields=("json", "jpg")))
    assert manifest_schema(FORMAT_WDS, SCHEMA, shards) == [
        {"name": "cls", "type": "int64"}, {"name": "jpg", "type": "binary"}, {"name": "json", "type": "binary"}]
    assert manifest_schema(FORMAT_PARQUET, SCHEMA, ()) == [{"name": "text", "type": "string"}]


def test_resize_short_and_parquet_images(image_tree, tmp_path):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--workers", "1", "--resize-short", "64", "--format", "parquet") == 0
    manifest = read_manifest(out)
    table = pq.read_table(out / manifest.shards[0].name)
    assert {"__key__", "jpg", "cls", "json"} <= set(table.column_names)
    for data in table.column("jpg").to_pylist()[:10]:
        if data is not None:
            assert min(Image.open(io.BytesIO(data)).size) == 64


def test_non_integer_cls_with_parquet_is_a_bad_label_reject(tmp_path):
    raw = tmp_path / "raw" / "g"
    raw.mkdir(parents=True)
    for i, cls in enumerate(["3", "tabby", "7"]):
        image_file(raw / f"{i:04d}.jpg", (40, 40), (i * 50, 100, 200), quality=-1)
        (raw / f"{i:04d}.cls").write_text(cls)
    out = tmp_path / "out"
    assert shard_cli(raw.parent, out, "--workers", "1", "--layout", "grouped", "--format", "parquet") == 0
    assert reasons_by_source(out) == {"g/0001.jpg": "bad_label"}
    table = pq.read_table(out / read_manifest(out).shards[0].name)
    assert sorted(table.column("cls").to_pylist()) == [3, 7]
    wds = tmp_path / "wds"  # a tar shard keeps cls as text
    assert shard_cli(raw.parent, wds, "--workers", "1", "--layout", "grouped") == 0
    assert sorted(f["cls"] for f in tar_samples(wds).values()) == [b"3", b"7", b"tabby"]
