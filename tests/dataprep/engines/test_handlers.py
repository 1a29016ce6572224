"""The layouts seen from the CLI: image folders, grouped files, tables and text, each accounted input by input;
odd inputs end as rejects with a reason, never as a traceback that leaves OUT stuck (issue 12, items 4, 8, 10)."""

from __future__ import annotations

import io
import json
import os
import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from dataprep.cli import main
from dataprep.formats.tar.index import read_index
from dataprep.engines.handlers import IdentityPacker
from dataprep.formats.manifest import MANIFEST_VERSION, read_manifest
from tests.dataprep.helpers import image_file, read_rejects, reasons_by_source, shard_cli
from tests.samples import tar_samples


@pytest.mark.parametrize("output_format", ["wds", "parquet"])
def test_sidecars_a_shard_cannot_hold_are_rejects_and_the_run_finishes(tmp_path, output_format):
    raw = tmp_path / "raw"
    (raw / "cat").mkdir(parents=True)
    for i, name in enumerate("abcd"):
        image_file(raw / "cat" / f"{name}.jpg", (40, 40), (i * 60, 100, 200), quality=-1)
    (raw / "cat" / "a").write_text("sidecar without extension")
    (raw / "cat" / "b._meta").write_text("field starting with _")
    bad_ext = os.fsencode(raw / "cat") + b"/c.\xff\xfe"
    with open(bad_ext, "wb") as f:
        f.write(b"extension that is not UTF-8")
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--layout", "image-folder", "--format", output_format) == 0
    found = reasons_by_source(out)
    totals = read_manifest(out).totals
    assert totals.inputs_seen == totals.samples_kept + totals.rejected
    assert sorted(found.values()) == ["unsupported"] * 3, found
    assert any(s.startswith("cat/c.") for s in found)  # rejects.jsonl is UTF-8 whatever the names' bytes
    assert main(["verify", os.fspath(out)]) == 0


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


@pytest.mark.parametrize("output_format", ["wds", "parquet"])
def test_a_class_folder_name_that_is_not_utf8_keeps_its_samples_and_its_name(tmp_path, output_format):
    raw = tmp_path / "raw"
    for c, folder in enumerate([b"caf\xe9", b"dog"]):
        directory = os.fsencode(raw) + b"/" + folder
        os.makedirs(directory)
        for i in range(2):
            path = Path(os.fsdecode(directory + b"/%d.jpg" % i))
            image_file(path, (40, 40), (c * 100 + i * 40, 100, 200), quality=-1)
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--format", output_format) == 0
    manifest = read_manifest(out)
    assert manifest.totals.samples_kept == 4 and manifest.totals.rejected == 0
    assert sorted(manifest.label_map) == [os.fsdecode(b"caf\xe9"), "dog"]  # the name round-trips exactly
    assert main(["verify", os.fspath(out)]) == 0



SAFE_KEY = re.compile(r"^[^./][^./]*$")


def test_image_folder_accounting_and_rejects(synthetic, image_tree, tmp_path):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--shard-size", "1MB", "--workers", "2") == 0
    manifest = read_manifest(out)
    totals = manifest.totals
    assert totals.inputs_seen == totals.samples_kept + totals.rejected
    samples = tar_samples(out)
    assert len(samples) == totals.samples_kept == sum(s.num_samples for s in manifest.shards)
    assert len(manifest.shards) > 1
    # every broken file the generator planted is rejected with the expected reason
    by_source = {r["source"]: r["reason"] for r in read_rejects(out)}
    assert len(by_source) == totals.rejected
    for rel, reason in synthetic.broken.items():
        rel_in_tree = rel.split("/", 1)[1] if rel.startswith("images/") else rel
        if reason == "duplicate":  # which of two equal files is the duplicate depends on their names
            continue
        assert by_source.get(rel_in_tree) == reason, f"{rel} expected rejected as {reason}; rejects: {by_source}"
    assert Counter(by_source.values()) == Counter(totals.rejected_by_reason)
    assert "duplicate" in totals.rejected_by_reason
    # label map sorted by class name, and every sample's cls within it
    assert list(manifest.label_map) == sorted(manifest.label_map)
    for key, fields in samples.items():
        assert SAFE_KEY.match(key), key
        assert int(fields["cls"]) in manifest.label_map.values()
        meta = json.loads(fields["json"])
        assert "__source__" in meta
        image = Image.open(io.BytesIO(fields.get("jpg") or fields["png"]))
        image.load()
        assert image.mode == "RGB"


def test_classes_are_mixed_within_shards(image_tree, tmp_path):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--samples-per-shard", "20", "--workers", "1") == 0
    first = read_manifest(out).shards[0]
    labels = {int(f["cls"]) for k, f in tar_samples(out).items()
              if k in set(read_index(out / first.index).keys())}
    assert len(labels) > 1
    sorted_out = tmp_path / "sorted"
    assert shard_cli(image_tree, sorted_out, "--samples-per-shard", "20", "--no-shuffle", "--workers", "1") == 0
    keys = read_index(sorted_out / read_manifest(sorted_out).shards[0].index).keys()
    assert keys == sorted(keys)


def test_symlinks_and_odd_names(image_tree, tmp_path):
    outside = tmp_path / "outside.jpg"
    src = next(image_tree.glob("*/*.jpg"))
    outside.write_bytes(src.read_bytes()[:-10] + b"\x00" * 9 + b"\xd9")  # distinct bytes, still a JPEG
    cls_dir = next(p for p in image_tree.iterdir() if p.is_dir())
    (cls_dir / "link.jpg").symlink_to(outside)
    odd = os.fsencode(cls_dir) + b"/odd \xff name.jpg"
    image_file(Path(odd.decode("utf-8", "surrogateescape")), (64, 48), (10, 200, 30), quality=-1)
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--workers", "1") == 0
    reasons = {r["source"]: r["reason"] for r in read_rejects(out)}
    assert reasons[f"{cls_dir.name}/link.jpg"] == "symlink_outside"
    sources = {json.loads(f["json"])["__source__"] for f in tar_samples(out).values()}
    assert any("odd" in s and "name.jpg" in s for s in sources)
    followed = tmp_path / "followed"
    assert shard_cli(image_tree, followed, "--workers", "1", "--follow-symlinks") == 0
    assert "symlink_outside" not in read_manifest(followed).totals.rejected_by_reason


def test_grouped_layout(tmp_path):
    raw = tmp_path / "raw" / "a"
    raw.mkdir(parents=True)
    for i in range(3):
        image_file(raw / f"{i:04d}.jpg", (40, 40), (i * 50, 0, 0), quality=-1)
        (raw / f"{i:04d}.txt").write_text(f"caption {i}")
        (raw / f"{i:04d}.json").write_text(json.dumps({"id": i}))
    (raw / "0009.txt").write_text("orphan caption")
    out = tmp_path / "out"
    assert shard_cli(tmp_path / "raw", out, "--workers", "1", "--layout", "grouped") == 0
    samples = tar_samples(out)
    assert len(samples) == 3
    for fields in samples.values():
        assert set(fields) == {"jpg", "txt", "json"}
        assert json.loads(fields["json"])["id"] in (0, 1, 2)
    assert [r["reason"] for r in read_rejects(out)] == ["no_media"]


def test_tables_to_parquet(synthetic, tmp_path):
    out = tmp_path / "out"
    assert shard_cli(synthetic.root / "tables", out, "--workers", "2") == 0
    manifest = read_manifest(out)
    assert manifest.format == "parquet" and manifest.layout == "table"
    table = pq.read_table(out / manifest.shards[0].name)
    assert table.schema.names == [f["name"] for f in manifest.schema]
    assert manifest.totals.samples_kept == sum(pq.read_metadata(out / s.name).num_rows for s in manifest.shards)
    assert manifest.totals.inputs_seen == manifest.totals.samples_kept + manifest.totals.rejected

    def expected(with_duplicates: bool) -> dict[tuple[str, int], str]:
        # the generator counts file lines (CSV header = line 1); rejects count data rows
        return {(f, line - 1 if f.endswith(".csv") else line): reason
                for (f, line), reason in synthetic.table_rejects.items() if with_duplicates or reason != "duplicate"}

    assert {(r["source"], r["row"]): r["reason"] for r in read_rejects(out)} == expected(False)
    deduped = tmp_path / "dedup"
    assert shard_cli(synthetic.root / "tables", deduped, "--workers", "1", "--dedup-on", "id") == 0
    assert {(r["source"], r["row"]): r["reason"] for r in read_rejects(deduped)} == expected(True)


def test_text_lines(synthetic, tmp_path):
    out = tmp_path / "out"
    assert shard_cli(synthetic.root / "text", out, "--workers", "1", "--text-unit", "line") == 0
    manifest = read_manifest(out)
    texts = [t for s in manifest.shards for t in pq.read_table(out / s.name).column("text").to_pylist()]
    assert len(texts) == len(set(texts)) == manifest.totals.samples_kept
    reasons = manifest.totals.rejected_by_reason
    assert reasons.get("empty_text", 0) >= 1 and reasons.get("duplicate", 0) >= 1


def test_bad_label_unreadable_and_unsupported_inputs(tmp_path):
    raw = tmp_path / "raw"
    (raw / "cat").mkdir(parents=True)
    image_file(raw / "cat" / "a.jpg", (40, 40), (200, 10, 10), quality=-1)
    image_file(raw / "loose.jpg", (40, 40), (10, 200, 10), quality=-1)  # no class folder
    (raw / "cat" / "gone.jpg").symlink_to(raw / "cat" / "missing.jpg")  # dangling, inside RAW
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--layout", "image-folder") == 0
    reasons = {r["source"]: r["reason"] for r in read_rejects(out)}
    assert reasons == {"loose.jpg": "bad_label", "cat/gone.jpg": "unreadable"}
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "t.csv").write_text("id,name\n1,a\n2,b\n")
    (tables / "README.md").write_text("about these tables")
    out = tmp_path / "tables-out"
    assert shard_cli(tables, out, "--workers", "1", "--layout", "table") == 0
    assert [(r["source"], r["reason"]) for r in read_rejects(out)] == [("README.md", "unsupported")]
    assert read_manifest(out).totals.samples_kept == 2
