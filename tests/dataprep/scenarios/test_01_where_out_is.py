"""1. ``--overwrite`` and where OUT is: RAW and OUT nested, OUT full of user files, nothing outside OUT touched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.dataprep.helpers import (assert_accounted, assert_same_output, image_tree, interrupted_run, kill_tree,
                                    output_bytes, read_output, run_in, snapshot, table_tree, text_tree, verify_ok,
                                    write_text)


def test_raw_inside_out_is_refused_even_with_overwrite(cli, tmp_path: Path) -> None:
    data = tmp_path / "data"
    image_tree(data / "raw", {"cat": 2, "dog": 2})
    before = snapshot(tmp_path)
    for extra in ((), ("--overwrite",)):
        res = cli("shard", data / "raw", data, "--workers", "1", *extra)
        assert res.rc == 2, res.text
        assert "inside" in res.err and "raw" in res.err, res.err
        assert snapshot(tmp_path) == before, "a refused run changed files"


def test_out_inside_raw_is_refused_and_raw_untouched(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    image_tree(raw, {"cat": 2, "dog": 2})
    before = snapshot(tmp_path)
    for out in (raw / "shards", raw, raw / "cat" / "out"):
        res = cli("shard", raw, out, "--workers", "1", "--overwrite")
        assert res.rc == 2, res.text
        assert "RAW" in res.err, res.err
        assert snapshot(tmp_path) == before, f"refused run with OUT={out} changed RAW"


def test_raw_and_out_nested_through_symlinks_are_refused(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    image_tree(raw, {"cat": 2, "dog": 2})
    os.symlink(raw, tmp_path / "raw_link")
    os.symlink(raw / "cat", tmp_path / "out_link")          # OUT that is, in fact, a class folder of RAW
    (tmp_path / "data").mkdir()
    os.symlink(tmp_path / "data", tmp_path / "data_link")
    os.symlink(raw, tmp_path / "data" / "raw")               # RAW reached through OUT
    before = snapshot(tmp_path)
    for args in ((tmp_path / "raw_link", raw / "shards"), (raw, tmp_path / "out_link"),
                 (tmp_path / "data_link" / "raw", tmp_path / "data"), (tmp_path / "raw_link", raw)):
        for extra in ((), ("--overwrite",)):
            res = cli("shard", *args, "--workers", "1", *extra)
            assert res.rc == 2, (args, extra, res.text)
            assert snapshot(tmp_path) == before, (args, extra)


def test_out_is_the_current_folder_of_user_files(cli, tmp_path: Path, monkeypatch) -> None:
    raw, home = tmp_path / "raw", tmp_path / "home"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    write_text(home / "thesis.tex", "years of work")
    write_text(home / "data" / "results.csv", "a,b\n")
    monkeypatch.chdir(home)
    before = snapshot(home)
    for extra in ((), ("--overwrite",)):
        res = cli("shard", raw, ".", "--workers", "1", *extra)
        after = snapshot(home)
        assert all(after.get(k) == v for k, v in before.items() if "/" in k or k == "thesis.tex"), res.text
        if res.rc == 0:
            assert_accounted(read_output(home), inputs)
        else:
            assert res.rc == 2 and "thesis.tex" in res.err, res.text


def test_overwrite_on_a_folder_of_user_files_leaves_them(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    write_text(out / "notes.txt", "my notes")
    write_text(out / "models" / "best.pt", b"\x00weights")
    write_text(out / "shard-000000.tar", b"a tar the user made by hand")
    before = snapshot(out)
    res = cli("shard", raw, out, "--workers", "1", "--overwrite")
    after = snapshot(out)
    assert all(after.get(k) == v for k, v in before.items()), \
        f"--overwrite removed or changed user files: {sorted(k for k, v in before.items() if after.get(k) != v)}"
    if res.rc == 0:
        assert_accounted(read_output(out), inputs)
    else:
        assert res.rc == 2, res.text
        assert any(n in res.err for n in ("notes.txt", "best.pt", "models", "shard-000000.tar")), res.err


def test_overwrite_after_finished_run_with_user_files_added(cli, tmp_path: Path) -> None:
    """The user documents a finished OUT, then reruns with --overwrite: their files survive (refused or kept)."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=1)
    assert cli("shard", raw, out, "--workers", "1", "--samples-per-shard", "1").rc == 0
    first = output_bytes(out)
    write_text(out / "README.md", "what these shards are")
    write_text(out / "extra" / "split.txt", "train")
    res = cli("shard", raw, out, "--workers", "1", "--overwrite", "--samples-per-shard", "4")
    assert (out / "README.md").read_text() == "what these shards are"
    assert (out / "extra" / "split.txt").read_text() == "train"
    if res.rc == 0:
        output = read_output(out)
        assert len(output.manifest["shards"]) == 2
        assert_accounted(output, inputs)
    else:
        assert res.rc == 2 and "README.md" in res.err, res.text
        assert output_bytes(out) == {**first, "README.md": b"what these shards are", "extra/split.txt": b"train"}
        assert verify_ok(cli, out)


def test_overwrite_leaves_no_stale_shard_of_the_previous_run(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=1)
    assert cli("shard", raw, out, "--workers", "1", "--samples-per-shard", "1").rc == 0
    res = cli("shard", raw, out, "--workers", "1", "--overwrite", "--samples-per-shard", "4")
    assert res.rc == 0, res.text
    output = read_output(out)  # also checks that every shard file in OUT is one the manifest names
    assert len(output.manifest["shards"]) == 2
    assert_accounted(output, inputs)
    assert verify_ok(cli, out)


@pytest.mark.slow
def test_overwrite_after_interrupted_run_with_other_options(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = interrupted_run(tmp_path, args)
    new = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "5", "--no-progress", "--overwrite")
    assert run_in(cli, new, run).rc == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert run_in(cli, new, fresh).rc == 0
    assert_same_output(run / "out", fresh / "out")
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
def test_overwrite_of_interrupted_run_with_another_prefix_leaves_no_old_shard(cli, tmp_path: Path) -> None:
    """Killed mid-run (a shard renamed but not yet checkpointed), then --overwrite with another --prefix:
    OUT holds only the new run's shards, none of the killed run's (they would look like part of the data)."""
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = interrupted_run(tmp_path, args)
    res = run_in(cli, (*args, "--overwrite", "--prefix", "train"), run)
    assert res.rc == 0, res.text
    output = read_output(run / "out")
    assert all(s["name"].startswith("train") for s in output.manifest["shards"])
    leftovers = sorted(p.name for p in (run / "out").iterdir() if p.name.startswith(("shard", ".shard")))
    assert not leftovers, f"files of the killed run left in OUT: {leftovers}"
    assert_accounted(output, inputs)


def test_out_is_a_file_is_refused(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    image_tree(raw, {"cat": 2, "dog": 2})
    write_text(tmp_path / "out", "a file")
    for extra in ((), ("--overwrite",)):
        res = cli("shard", raw, tmp_path / "out", "--workers", "1", *extra)
        assert res.rc == 2 and "out" in res.err, res.text
        assert (tmp_path / "out").read_text() == "a file"


@pytest.mark.parametrize("kind", ["images", "table-dedup", "text-lines"])
def test_nothing_outside_out_is_touched(cli, tmp_path: Path, kind: str) -> None:
    raw, out = tmp_path / "raw", tmp_path / "work" / "out"
    extra: tuple[str, ...] = ()
    if kind == "images":
        image_tree(raw, {"cat": 3, "dog": 3}, broken=1)
    elif kind == "table-dedup":
        table_tree(raw, rows=300)
        extra = ("--dedup-on", "url", "--required", "id")
    else:
        text_tree(raw, lines=300)
        extra = ("--text-unit", "line")
    write_text(tmp_path / "work" / "sibling.txt", "keep")
    before = snapshot(tmp_path, skip=out)
    assert cli("shard", raw, out, "--workers", "2", *extra).rc == 0
    assert cli("shard", raw, out, "--workers", "2", "--overwrite", "--seed", "3", *extra).rc == 0
    after = snapshot(tmp_path, skip=out)
    assert after == before, sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
