"""Per-layout handling seen from the CLI: odd inputs end as rejects with a reason, never as a
traceback that leaves OUT stuck (issue 12, items 4, 8, 10)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from dataprep.cli import main
from dataprep.layouts import IdentityPacker
from dataprep.manifest import MANIFEST_VERSION, read_manifest
from tests.samples import tar_samples


def shard_cli(*args: object) -> int:
    return main(["shard", *[os.fspath(a) if isinstance(a, Path) else str(a) for a in args]])


def rejects(out: Path) -> dict[str, str]:
    return {json.loads(line)["source"]: json.loads(line)["reason"] for line in (out / "rejects.jsonl").read_text().splitlines()}


def _jpeg(path: Path, shade: int) -> None:
    Image.new("RGB", (40, 40), (shade, 100, 200)).save(path, "JPEG")


@pytest.mark.parametrize("output_format", ["wds", "parquet"])
def test_sidecars_a_shard_cannot_hold_are_rejects_and_the_run_finishes(tmp_path, output_format):
    raw = tmp_path / "raw"
    (raw / "cat").mkdir(parents=True)
    for i, name in enumerate("abcd"):
        _jpeg(raw / "cat" / f"{name}.jpg", i * 60)
    (raw / "cat" / "a").write_text("sidecar without extension")
    (raw / "cat" / "b._meta").write_text("field starting with _")
    bad_ext = os.fsencode(raw / "cat") + b"/c.\xff\xfe"
    with open(bad_ext, "wb") as f:
        f.write(b"extension that is not UTF-8")
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--layout", "image-folder", "--format", output_format) == 0
    found = rejects(out)
    totals = read_manifest(out).totals
    assert totals.inputs_seen == totals.samples_kept + totals.rejected
    assert sorted(found.values()) == ["unsupported"] * 3, found
    assert any(s.startswith("cat/c.") for s in found)  # rejects.jsonl is UTF-8 whatever the names' bytes
    assert main(["verify", os.fspath(out)]) == 0


def test_non_integer_cls_with_parquet_is_a_bad_label_reject(tmp_path):
    raw = tmp_path / "raw" / "g"
    raw.mkdir(parents=True)
    for i, cls in enumerate(["3", "tabby", "7"]):
        _jpeg(raw / f"{i:04d}.jpg", i * 50)
        (raw / f"{i:04d}.cls").write_text(cls)
    out = tmp_path / "out"
    assert shard_cli(raw.parent, out, "--workers", "1", "--layout", "grouped", "--format", "parquet") == 0
    assert rejects(out) == {"g/0001.jpg": "bad_label"}
    table = pq.read_table(out / read_manifest(out).shards[0].name)
    assert sorted(table.column("cls").to_pylist()) == [3, 7]
    wds = tmp_path / "wds"  # a tar shard keeps cls as text
    assert shard_cli(raw.parent, wds, "--workers", "1", "--layout", "grouped") == 0
    assert sorted(f["cls"] for f in tar_samples(wds).values()) == [b"3", b"7", b"tabby"]


def test_dedup_on_a_column_that_does_not_exist_is_refused(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "t.csv").write_text("id,name\n1,a\n2,b\n3,c\n")
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--dedup-on", "idd") == 2
    err = capsys.readouterr().err
    assert "--dedup-on 'idd'" in err and "id, name" in err and "--schema" in err
    assert not (out / ".dataprep").exists()
    assert shard_cli(raw, out, "--workers", "1", "--dedup-on", "id", "--overwrite") == 0
    assert read_manifest(out).totals.samples_kept == 3


def test_nulls_are_never_duplicates_of_each_other(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "t.csv").write_text("id,name\n1,a\n,b\n,c\n1,d\nnan,e\nnan,f\n")
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--dedup-on", "id", "--required", "name",
                     "--schema", '{"id": "double", "name": "string"}') == 0
    names = sorted(pq.read_table(out / read_manifest(out).shards[0].name).column("name").to_pylist())
    assert names == ["a", "b", "c", "e"]  # d repeats 1, f repeats NaN; the two nulls stay
    assert {(json.loads(x)["row"], json.loads(x)["reason"]) for x in (out / "rejects.jsonl").read_text().splitlines()} \
        == {(4, "duplicate"), (6, "duplicate")}


def test_tsv_files_are_tables(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "t.tsv").write_text("id\tname\n1\ta b\n2\tc, d\n")
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--layout", "table") == 0
    table = pq.read_table(out / read_manifest(out).shards[0].name)
    assert table.column("name").to_pylist() == ["a b", "c, d"] and table.column("id").to_pylist() == [1, 2]
    manifest = read_manifest(out)
    assert manifest.layout == "table" and manifest.layout_reason and manifest.version == MANIFEST_VERSION
    auto = tmp_path / "auto"
    assert shard_cli(raw, auto, "--workers", "1", "--json") == 0
    assert read_manifest(auto).layout == "table" and read_manifest(auto).layout_reason


def test_a_run_that_keeps_nothing_fails_unless_allowed(tmp_path, capsys):
    raw = tmp_path / "raw"
    (raw / "cat").mkdir(parents=True)
    (raw / "cat" / "a.jpg").write_bytes(b"")
    (raw / "cat" / "b.jpg").write_bytes(b"\xff\xd8 broken")
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1") == 1
    err = capsys.readouterr().err
    assert "no sample was kept" in err and "empty_file 1" in err and "--allow-empty" in err
    assert not (out / "manifest.json").exists()
    assert shard_cli(raw, out, "--workers", "1", "--allow-empty") == 0  # resumes at the end, nothing redone
    assert read_manifest(out).totals.rejected == 2


def test_no_input_of_the_chosen_layout_fails(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "notes.md").write_text("no table here")
    assert shard_cli(raw, tmp_path / "out", "--workers", "1", "--layout", "table") != 0
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_identity_packer_has_no_carry():
    packer = IdentityPacker()
    assert packer.state_dict() == {} and packer.finish() == []
    with pytest.raises(ValueError, match="no state"):
        packer.load_state_dict({"tokens": [1, 2]})


def test_default_shard_size_is_one_unit_everywhere(tmp_path):
    from dataprep.cli import build_parser, config_from_args
    from dataprep.config import DEFAULT_SHARD_BYTES, ShardConfig
    from dataprep.writers.base import DEFAULT_MAX_SHARD_BYTES

    args = build_parser().parse_args(["shard", os.fspath(tmp_path), os.fspath(tmp_path / "out")])
    from_cli = config_from_args(args).max_shard_bytes
    assert from_cli == DEFAULT_SHARD_BYTES == DEFAULT_MAX_SHARD_BYTES == ShardConfig(tmp_path, tmp_path).max_shard_bytes
    assert from_cli == 256 * 2**20
    assert "default 256MiB" in build_parser()._subparsers._group_actions[0].choices["shard"].format_help()


@pytest.mark.parametrize("output_format", ["wds", "parquet"])
def test_a_class_folder_name_that_is_not_utf8_keeps_its_samples_and_its_name(tmp_path, output_format):
    raw = tmp_path / "raw"
    for c, folder in enumerate([b"caf\xe9", b"dog"]):
        directory = os.fsencode(raw) + b"/" + folder
        os.makedirs(directory)
        for i in range(2):
            _jpeg(Path(os.fsdecode(directory + b"/%d.jpg" % i)), c * 100 + i * 40)
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--format", output_format) == 0
    manifest = read_manifest(out)
    assert manifest.totals.samples_kept == 4 and manifest.totals.rejected == 0
    assert sorted(manifest.label_map) == [os.fsdecode(b"caf\xe9"), "dog"]  # the name round-trips exactly
    assert main(["verify", os.fspath(out)]) == 0
