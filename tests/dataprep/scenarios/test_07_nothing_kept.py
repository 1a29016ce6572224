"""7. Nothing kept: a run fails unless ``--allow-empty``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dataprep.helpers import (MANIFEST, assert_accounted, finished_out, image_tree, read_output, read_rejects,
                                    verify_ok, write_text)


def test_every_input_rejected_fails_unless_allowed(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    for i in range(3):
        write_text(raw / "cat" / f"{i}.jpg", b"garbage" * (i + 1))
        write_text(raw / "dog" / f"{i}.jpg", b"rubbish" * (i + 1))
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 1, res.text
    assert "--allow-empty" in res.err, res.err
    assert not (out / MANIFEST).exists()
    assert not verify_ok(cli, out)
    assert len(read_rejects(out)) == 6
    res = cli("shard", raw, out, "--workers", "1", "--allow-empty")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.samples == []
    assert_accounted(output, [f"{c}/{i}.jpg" for c in ("cat", "dog") for i in range(3)])


def test_every_row_rejected_fails(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "t.csv", "id,name\nx,a\ny,b\n")
    res = cli("shard", raw, out, "--workers", "1", "--schema", '{"id": "int64", "name": "string"}')
    assert res.rc == 1, res.text
    assert not (out / MANIFEST).exists()


@pytest.mark.parametrize("layout", ["table", "text", "grouped"])
def test_no_input_of_the_chosen_layout_fails(cli, tmp_path: Path, layout: str) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 2}) if layout != "grouped" else write_text(raw / "t.csv", "a\n1\n")
    res = cli("shard", raw, out, "--workers", "1", "--layout", layout)
    assert res.rc != 0, res.text
    assert "Traceback" not in res.err and res.err.strip(), res.text
    assert not (out / MANIFEST).exists() or not verify_ok(cli, out)


def test_a_dataprep_output_as_raw_is_refused(cli, tmp_path: Path) -> None:
    """Resharding an existing output (`dataprep shard shards/ shards2/ --shard-size 1GiB`) must not turn its
    rejects.jsonl into a one-file table dataset, reject the shards as strays and exit 0."""
    old = finished_out(cli, tmp_path)
    new = tmp_path / "new"
    res = cli("shard", old, new, "--workers", "1")
    assert res.rc != 0, f"exit 0 over a RAW that is a dataprep output: {res.text}"
    assert "manifest.json" in res.err or ".tar" in res.err, res.err
    swapped = cli("shard", old, tmp_path / "raw", "--workers", "1")   # arguments swapped: RAW given as OUT
    assert swapped.rc == 2, swapped.text


def test_empty_raw_fails(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc != 0, res.text
    assert str(raw) in res.err, res.err
    assert not (out / MANIFEST).exists()


def test_raw_with_only_stray_files_fails_unless_allow_empty(cli, tmp_path: Path) -> None:
    """`--allow-empty`: "succeed even when no sample is kept (every input rejected, or none found)"."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "README.md", "nothing here yet")
    res = cli("shard", raw, out, "--workers", "1", "--layout", "image-folder")
    assert res.rc != 0, res.text
    assert not (out / MANIFEST).exists()
    res = cli("shard", raw, out, "--workers", "1", "--layout", "image-folder", "--allow-empty")
    assert res.rc == 0, res.text
    assert_accounted(read_output(out), ["README.md"])
