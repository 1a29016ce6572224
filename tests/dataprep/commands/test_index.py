from __future__ import annotations

import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from dataprep.commands.index import adopt
from dataprep.errors import FormatError, OutputExistsError, UsageError
from dataprep.formats.tar.index import read_index
from dataprep.formats.manifest import FORMAT_WDS, Manifest, Totals, read_manifest, sha256_file, write_manifest
from dataprep.commands.verify import verify

wds = pytest.importorskip("webdataset")


def write_wds_shard(path: Path, start: int, count: int) -> None:
    with wds.TarWriter(str(path)) as sink:
        for i in range(start, start + count):
            sink.write({"__key__": f"img{i:04d}", "jpg": bytes([i % 256]) * (300 + i), "cls": i % 3})


def write_tarfile(path: Path, names: list[str]) -> None:
    with tarfile.open(path, "w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 3
            tar.addfile(info, BytesIO(b"abc"))


def test_webdataset_shards_get_indexes_and_a_manifest_that_verifies(tmp_path: Path) -> None:
    write_wds_shard(tmp_path / "b-1.tar", 5, 4)
    write_wds_shard(tmp_path / "b-0.tar", 0, 5)
    hashes = {p.name: sha256_file(p) for p in tmp_path.iterdir()}
    manifest = adopt(tmp_path, command=("dataprep", "index", str(tmp_path)))
    assert [s.name for s in manifest.shards] == ["b-0.tar", "b-1.tar"]
    assert [s.num_samples for s in manifest.shards] == [5, 4]
    assert manifest.shards[0].fields == ("cls", "jpg")
    assert manifest.totals == Totals(9, 9, 0, {})
    assert (manifest.format, manifest.layout, manifest.rejects,
            manifest.label_map) == (FORMAT_WDS, "adopted", None, None)
    assert read_manifest(tmp_path) == manifest
    assert {p.name: sha256_file(p) for p in tmp_path.glob("*.tar")} == hashes  # tars untouched
    assert read_index(tmp_path / "b-1.tar.idx").keys() == ["img0005", "img0006", "img0007", "img0008"]
    report = verify(tmp_path)
    assert report.ok, report.problems
    assert report.samples == 9


def test_adopting_twice_is_idempotent(tmp_path: Path) -> None:
    write_wds_shard(tmp_path / "a.tar", 0, 3)
    first = adopt(tmp_path)
    assert adopt(tmp_path) == first


def test_pattern_selects_shards(tmp_path: Path) -> None:
    write_wds_shard(tmp_path / "train-0.tar", 0, 2)
    write_wds_shard(tmp_path / "val-0.tar", 2, 2)
    manifest = adopt(tmp_path, pattern="train-*.tar")
    assert [s.name for s in manifest.shards] == ["train-0.tar"]
    assert not (tmp_path / "val-0.tar.idx").exists()


def test_tar_not_grouped_by_key_is_refused_naming_the_file(tmp_path: Path) -> None:
    write_wds_shard(tmp_path / "a.tar", 0, 2)
    write_tarfile(tmp_path / "b.tar", ["k1.jpg", "k2.jpg", "k1.cls"])
    with pytest.raises(FormatError, match=r"b\.tar: key 'k1' reappears"):
        adopt(tmp_path)
    assert not (tmp_path / "manifest.json").exists()


def test_file_that_is_not_a_tar_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.tar").write_bytes(b"not a tar at all" * 100)
    with pytest.raises(FormatError, match=r"x\.tar"):
        adopt(tmp_path)


def test_nothing_to_adopt_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no files match"):
        adopt(tmp_path)
    with pytest.raises(UsageError, match="no '/'"):
        adopt(tmp_path, pattern="sub/*.tar")


def test_existing_manifest_of_another_layout_is_not_overwritten(tmp_path: Path) -> None:
    write_wds_shard(tmp_path / "a.tar", 0, 2)
    write_manifest(tmp_path, Manifest(FORMAT_WDS, "image-folder", (), Totals()))
    with pytest.raises(OutputExistsError, match="layout 'image-folder'"):
        adopt(tmp_path)
    assert read_manifest(tmp_path).layout == "image-folder"


def test_an_unfinished_shard_run_is_not_adopted(tmp_path: Path, capsys) -> None:
    """`dataprep index` over an OUT that `dataprep shard` has not finished (here stopped by its reject
    budget, shards written, no manifest) refuses, writes nothing, and the shard run still finishes."""
    from dataprep.cli import main
    from tests.dataprep.helpers import image_file

    raw, out = tmp_path / "raw", tmp_path / "out"
    for i in range(6):
        image_file(raw / f"c{i % 2}" / f"{i}.jpg", (40, 40), (i * 40, 90, 20), quality=-1)
    (raw / "c0" / "broken.jpg").write_bytes(b"not a jpeg")
    shard = ["shard", str(raw), str(out), "--workers", "1", "--samples-per-shard", "2"]
    assert main([*shard, "--max-reject-fraction", "0"]) == 1
    assert list(out.glob("*.tar")) and (out / ".dataprep").is_dir()
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["index", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unfinished `dataprep shard` run" in err and "rerunning the same `dataprep shard` command" in err, err
    assert sorted(p.name for p in out.iterdir()) == before
    assert main(shard) == 0
    assert verify(out).ok
