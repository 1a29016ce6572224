"""OUT is dataprep's only where dataprep wrote it: --overwrite never removes anything else (issue 12, item 1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from dataprep.cli import main
from dataprep.manifest import read_manifest


def shard_cli(*args: object) -> int:
    return main(["shard", *[os.fspath(a) if isinstance(a, Path) else str(a) for a in args]])


def _small_tree(raw: Path, n: int = 4) -> Path:
    for i in range(n):
        (raw / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40, 40), (i * 40, 90, 200 - i * 30)).save(raw / f"c{i % 2}" / f"{i}.jpg")
    return raw


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_raw_inside_out_is_a_usage_error_and_nothing_is_removed(tmp_path, capsys):
    data = tmp_path / "data"
    raw = _small_tree(data / "raw")
    before = _files(data)
    assert shard_cli(raw, data, "--workers", "1", "--overwrite") == 2
    assert "RAW" in capsys.readouterr().err
    assert _files(data) == before
    assert shard_cli(raw, raw, "--workers", "1", "--overwrite") == 2  # the same folder
    assert _files(data) == before


def test_overwrite_refuses_a_folder_dataprep_did_not_write(tmp_path, capsys):
    raw = _small_tree(tmp_path / "raw")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    (out / "sub").mkdir()
    (out / "sub" / "x.bin").write_bytes(b"123")
    before = _files(out)
    assert shard_cli(raw, out, "--workers", "1", "--overwrite") == 2
    err = capsys.readouterr().err
    assert "notes.txt" in err and "did not write" in err
    assert _files(out) == before


def test_overwrite_removes_only_what_dataprep_wrote(tmp_path, capsys):
    raw = _small_tree(tmp_path / "raw")
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--samples-per-shard", "1") == 0
    (out / "keep-me.txt").write_text("a user's file dropped into OUT later")
    assert shard_cli(raw, out, "--workers", "1", "--samples-per-shard", "2", "--overwrite") == 2
    assert "keep-me.txt" in capsys.readouterr().err
    assert (out / "keep-me.txt").exists() and len(read_manifest(out).shards) == 4  # nothing was removed
    (out / "keep-me.txt").unlink()
    assert shard_cli(raw, out, "--workers", "1", "--samples-per-shard", "2", "--overwrite") == 0
    manifest = read_manifest(out)
    assert len(manifest.shards) == 2
    expected = {s.name for s in manifest.shards} | {s.index for s in manifest.shards} | {"manifest.json", "rejects.jsonl"}
    assert {p.name for p in out.iterdir()} == expected


def test_overwrite_refuses_adopted_shards(tmp_path, capsys):
    raw = _small_tree(tmp_path / "raw")
    made = tmp_path / "made"
    assert shard_cli(raw, made, "--workers", "1") == 0
    adopted = tmp_path / "adopted"
    adopted.mkdir()
    for shard in read_manifest(made).shards:
        (adopted / shard.name).write_bytes((made / shard.name).read_bytes())
    assert main(["index", os.fspath(adopted)]) == 0
    before = _files(adopted)
    assert shard_cli(raw, adopted, "--workers", "1", "--overwrite") == 2
    assert "adopted" in capsys.readouterr().err
    assert _files(adopted) == before


@pytest.mark.parametrize("stray", ["README", ".hidden"])
def test_resume_never_removes_a_file_it_did_not_write(tmp_path, stray, capsys):
    """A file dropped into OUT during a run is not dataprep's: the rerun refuses instead of removing it."""
    raw = _small_tree(tmp_path / "raw")
    out = tmp_path / "out"
    (out / ".dataprep").mkdir(parents=True)  # as if a run had been killed while planning
    (out / stray).write_text("mine")
    assert shard_cli(raw, out, "--workers", "1") == 2
    assert stray in capsys.readouterr().err
    assert (out / stray).read_text() == "mine"
