"""3. SIGKILL and other signals, then resume: byte-identical output; damaged state is refused."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import pytest

from dataprep.formats.manifest import MANIFEST_VERSION
from tests.dataprep.helpers import (KILL_POINTS, LATE_KILL_POINTS, MANIFEST, STATE_DIR, assert_accounted,
                                    assert_same_output, finished_out, grouped_tree, interrupted_run, kill_tree,
                                    kill_when, read_output, run_in, shards_at_least, start_cli, table_tree, text_tree,
                                    verify_ok)
from tests.samples import wait_until


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_kill9_then_resume_is_byte_identical(cli, tmp_path: Path, point: str, workers: str) -> None:
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", workers, "--samples-per-shard", "3", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    killed = kill_when(args, run, KILL_POINTS[point](run / "out"))
    out = run / "out"
    interrupted = killed and not (out / MANIFEST).exists()
    if point not in LATE_KILL_POINTS:
        assert interrupted, f"the run ended before the kill at {point}"
    if interrupted:
        assert not verify_ok(cli, out), "verify says OK on an interrupted run"
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)
    assert verify_ok(cli, run / "out")


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("point", ["checkpoint", "fourth-shard"])
def test_kill9_with_many_ranges_resumes_byte_identical(cli, tmp_path: Path, point: str, workers: str) -> None:
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", workers, "--samples-per-shard", "2", "--range-size", "3KiB",
            "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    ranges = {s["name"].split("-")[1] for s in json.loads((ref / "out" / MANIFEST).read_text())["shards"]}
    assert len(ranges) > 2, ranges
    assert kill_when(args, run, KILL_POINTS[point](run / "out"))
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["images-parquet", "grouped-wds", "grouped-parquet"])
@pytest.mark.parametrize("point", ["first-shard", "fourth-shard", "rejects-published"])
def test_kill9_other_layouts_and_formats_resume_byte_identical(cli, tmp_path: Path, kind: str, point: str) -> None:
    raw = tmp_path / "raw"
    if kind.startswith("images"):
        inputs = kill_tree(raw)
        extra: tuple[str, ...] = ()
    else:
        inputs = grouped_tree(raw)
        extra = ("--layout", "grouped")
    extra += ("--format", kind.split("-")[1])
    args = ("shard", "../raw", "out", "--workers", "2", "--samples-per-shard", "3", "--no-progress", *extra)
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    killed = kill_when(args, run, KILL_POINTS[point](run / "out"))
    if point != "rejects-published":
        assert killed and not (run / "out" / MANIFEST).exists(), f"the run ended before the kill at {point}"
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)


STATE_DAMAGE = {
    "checkpoint-truncated": (lambda out: os.truncate(out / STATE_DIR / "checkpoint.json", 10), "checkpoint.json"),
    "checkpoint-deleted": (lambda out: (out / STATE_DIR / "checkpoint.json").unlink(), "checkpoint.json"),
    "plan-garbage": (lambda out: (out / STATE_DIR / "plan.json").write_text("{not json"), "plan.json"),
    "state-folder-deleted": (lambda out: __import__("shutil").rmtree(out / STATE_DIR), "shard-"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(STATE_DAMAGE))
def test_damaged_state_of_a_killed_run(cli, tmp_path: Path, damage: str) -> None:
    """The state folder of a killed run is damaged (a disk, a user): the rerun names the file and the way
    out, or recovers to the right bytes; --overwrite always recovers. Never a traceback."""
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = interrupted_run(tmp_path, args)
    breaker, named = STATE_DAMAGE[damage]
    breaker(run / "out")
    res = run_in(cli, args, run)
    ref = tmp_path / "ref"
    ref.mkdir()
    assert run_in(cli, args, ref).rc == 0
    if res.rc == 0:
        assert_same_output(run / "out", ref / "out")
    else:
        assert res.rc in (1, 2) and named in res.err, res.text
        assert not verify_ok(cli, run / "out")
        if damage != "state-folder-deleted":  # without any state, dataprep cannot know the shards are its own
            assert "--overwrite" in res.err, res.err
            res = run_in(cli, (*args, "--overwrite"), run)
            assert res.rc == 0, res.text
            assert_same_output(run / "out", ref / "out", drop_manifest_keys=("command",))
    if res.rc == 0:
        assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong-version"])
def test_damaged_manifest_of_a_finished_out(cli, tmp_path: Path, damage: str) -> None:
    out = finished_out(cli, tmp_path)
    text = (out / MANIFEST).read_text()
    if damage == "truncated":
        (out / MANIFEST).write_text(text[: len(text) // 2])
    elif damage == "garbage":
        (out / MANIFEST).write_bytes(b"\x00" * 100)
    else:
        assert f'"version": {MANIFEST_VERSION}' in text
        (out / MANIFEST).write_text(text.replace(f'"version": {MANIFEST_VERSION}', '"version": 99', 1))
    for args in (("verify", out), ("info", out), ("shard", tmp_path / "raw", out, "--workers", "1",
                                                    "--samples-per-shard", "2")):
        res = cli(*args)
        assert res.rc != 0, (args[0], res.text)
        assert MANIFEST in res.err, (args[0], res.err)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm-parent", "sigkill-parent-rerun-at-once"])
def test_interrupted_by_a_signal_then_rerun(cli, tmp_path: Path, how: str) -> None:
    """Ctrl-C (SIGINT to the foreground group) ends with the resume hint and exit 130; SIGTERM or SIGKILL to the
    parent alone (a scheduler) also stops the writing child; a rerun at once ends byte-identical."""
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "2", "--samples-per-shard", "2", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    proc = start_cli(args, run)
    try:
        wait_until(shards_at_least(run / "out", 3), proc=proc)
        assert proc.poll() is None, "the run ended before the signal"
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGTERM if how == "sigterm-parent" else signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        if how == "ctrl-c":
            assert proc.returncode == 130 and "rerun" in err, (proc.returncode, err)
            assert "Traceback" not in err, err
        res = run_in(cli, args, run)  # at once: a child still alive would race with this run
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
def test_kill9_twice_then_resume_is_byte_identical(tmp_path: Path, cli) -> None:
    raw = tmp_path / "raw"
    kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "2", "--samples-per-shard", "2", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    assert kill_when(args, run, shards_at_least(run / "out", 2))
    kill_when(args, run, shards_at_least(run / "out", 6))
    assert run_in(cli, args, run).rc == 0
    assert_same_output(run / "out", ref / "out")


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("kind", ["table-dedup", "text-lines", "table-dedup-ranges", "text-lines-ranges"])
@pytest.mark.parametrize("point", ["first-shard", "fourth-shard", "rejects-published"])
def test_kill9_tables_and_text_resume_byte_identical(cli, tmp_path: Path, kind: str, point: str, workers: str) -> None:
    """Duplicates found before the kill stay rejected once, those after are found again: same bytes."""
    raw = tmp_path / "raw"
    if kind.startswith("table-dedup"):
        inputs = table_tree(raw)
        extra: tuple[str, ...] = ("--dedup-on", "url", "--required", "id")
    else:
        inputs = text_tree(raw)
        extra = ("--text-unit", "line")
    if kind.endswith("ranges"):  # line-based files in several parts, several ranges: duplicates across them
        extra += ("--range-size", "8KiB")
    args = ("shard", "../raw", "out", "--workers", workers, "--samples-per-shard", "200", "--no-progress", *extra)
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    killed = kill_when(args, run, KILL_POINTS[point](run / "out"))
    if point != "rejects-published":
        assert killed and not (run / "out" / MANIFEST).exists(), f"the run ended before the kill at {point}"
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    output = read_output(run / "out")
    assert_accounted(output, inputs)
    assert output.manifest["totals"]["rejected_by_reason"].get("duplicate", 0) > 100


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["images", "table-dedup"])
def test_killed_run_leaves_nothing_in_tmpdir(tmp_path: Path, kind: str) -> None:
    """Spills and temporary files live in OUT: a run killed with SIGKILL leaves nothing in $TMPDIR."""
    raw, tmpdir, run = tmp_path / "raw", tmp_path / "tmpdir", tmp_path / "run"
    tmpdir.mkdir(), run.mkdir()
    extra: tuple[str, ...] = ("--samples-per-shard", "3")
    if kind == "images":
        kill_tree(raw)
    else:
        table_tree(raw)
        extra = ("--dedup-on", "url", "--required", "id", "--samples-per-shard", "200")
    args = ("shard", "../raw", "out", "--workers", "2", "--no-progress", *extra)
    for point in ("fourth-shard", "never"):
        ready = KILL_POINTS[point](run / "out") if point != "never" else (lambda: False)
        kill_when(args, run, ready, env={"TMPDIR": str(tmpdir)})
        left = sorted(p.name for p in tmpdir.iterdir())
        assert not left, f"left in $TMPDIR after a run ({point}): {left}"


@pytest.mark.slow
def test_resume_with_other_workers_is_byte_identical(cli, tmp_path: Path) -> None:
    """--workers does not shape the output: a run killed with 2 workers resumes with 1 to the same bytes."""
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    args = ("shard", "../raw", "out", "--samples-per-shard", "2", "--no-progress")
    ref = tmp_path / "ref"
    ref.mkdir()
    assert run_in(cli, (*args, "--workers", "2"), ref).rc == 0
    run = interrupted_run(tmp_path, (*args, "--workers", "2"))
    res = run_in(cli, (*args, "--workers", "1"), run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out", drop_manifest_keys=("command",))
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
def test_kill9_during_an_overwrite_run(cli, tmp_path: Path) -> None:
    """Finished with one option, rerun with another and --overwrite, killed mid-way: rerunning the new command
    ends with exactly its output (nothing of the first run left)."""
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    old = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "3", "--no-progress")
    new = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress", "--overwrite")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, new, ref).rc == 0
    assert run_in(cli, old, run).rc == 0
    assert kill_when(new, run, KILL_POINTS["checkpoint"](run / "out"))
    for rerun in (new[:-1], new):  # without --overwrite (resume) or with it (start again)
        res = run_in(cli, rerun, run)
        if res.rc == 0:
            break
        assert res.rc == 2 and "--overwrite" in res.err, res.text
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out", drop_manifest_keys=("command",))
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
@pytest.mark.parametrize("gone", ["a-shard", "the-index-of-a-shard", "the-manifest"])
def test_kill9_while_overwrite_removes_the_old_output(cli, tmp_path: Path, gone: str) -> None:
    """--overwrite over a finished OUT is killed while it removes the old files (as soon as one of them is
    gone): rerunning the same command must finish, not call the remaining shards "files dataprep did not
    write" and refuse even with --overwrite (the user could only delete them by hand)."""
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    old = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "1", "--no-progress")
    new = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "5", "--no-progress", "--overwrite")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, new, ref).rc == 0
    assert run_in(cli, old, run).rc == 0
    names = sorted(p.name for p in (run / "out").iterdir())
    watched = {"a-shard": [n for n in names if n.endswith(".tar")][5],
               "the-index-of-a-shard": [n for n in names if n.endswith(".idx")][5], "the-manifest": MANIFEST}[gone]
    kill_when(new, run, lambda: not (run / "out" / watched).exists())
    res = run_in(cli, new, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
@pytest.mark.parametrize("point", LATE_KILL_POINTS)
def test_killed_at_the_end_then_overwrite_with_other_options(cli, tmp_path: Path, point: str) -> None:
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    old = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    new = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "5", "--no-progress", "--overwrite")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, new, ref).rc == 0
    kill_when(old, run, KILL_POINTS[point](run / "out"))
    res = run_in(cli, new, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)
