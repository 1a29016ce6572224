"""4. RAW or OUT changed under a run: between a kill and its resume, while it runs, after it finished;
a second run into an OUT in use."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tests.dataprep.helpers import (assert_accounted, assert_same_output, image_file, image_tree, interrupted_run,
                                    kill_tree, output_bytes, read_output, run_in, shards_at_least, start_cli,
                                    table_tree, verify_ok, write_text)
from tests.samples import wait_until


def _sources_in_first_shard(out: Path) -> list[str]:
    """Sources of the samples in the first completed tar shard (what a resume would keep)."""
    first = sorted(p for p in out.iterdir() if p.suffix == ".tar")[0]
    with tarfile.open(first) as tar:
        return sorted(json.loads(tar.extractfile(m).read())["__source__"] for m in tar.getmembers()
                      if m.name.endswith(".json"))


def _change_raw(raw: Path, change: str, done: str) -> str:
    """Change RAW; ``done`` is an input already written to a completed shard. Returns the path changed."""
    if change == "added":
        image_file(raw / "dog" / "new_one.png", size=(150, 100), color=(1, 2, 3), fmt="PNG")
        return "dog/new_one.png"
    if change == "new-class":
        image_file(raw / "zebra" / "z.png", size=(100, 100), color=(9, 9, 9), fmt="PNG")
        return "zebra/z.png"
    if change == "removed":
        (raw / done).unlink()
    elif change == "modified-same-size":  # rewritten in place, same size (now a corrupt PNG)
        data = bytearray((raw / done).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (raw / done).write_bytes(bytes(data))
    elif change == "modified-bigger":
        image_file(raw / done, size=(300, 200), color=(0, 0, 250), fmt="PNG")
    return done


RAW_CHANGE_KINDS = ["added", "removed", "modified-same-size", "modified-bigger", "new-class"]


@pytest.mark.slow
@pytest.mark.parametrize("change", RAW_CHANGE_KINDS)
def test_raw_changed_between_kill_and_resume(cli, tmp_path: Path, change: str) -> None:
    raw = tmp_path / "raw"
    kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = interrupted_run(tmp_path, args)
    out = run / "out"
    time.sleep(0.01)  # a later mtime
    changed = _change_raw(raw, change, _sources_in_first_shard(out)[0])
    res = run_in(cli, args, run)
    if res.rc == 0:  # replanned: must equal a fresh run over the new RAW
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        assert run_in(cli, args, fresh).rc == 0
        assert_same_output(out, fresh / "out")
    else:
        assert res.rc in (1, 2), res.text
        assert "Traceback" not in res.err, res.err
        assert "--overwrite" in res.err, res.err
        assert changed in res.err, f"the refusal does not name the changed file {changed}: {res.err}"
        assert not verify_ok(cli, out), "verify says OK on an OUT whose resume was refused"
    res = run_in(cli, (*args, "--overwrite"), run)
    assert res.rc == 0, res.text
    fresh2 = tmp_path / "fresh2"
    fresh2.mkdir()
    assert run_in(cli, (*args, "--overwrite"), fresh2).rc == 0
    assert_same_output(out, fresh2 / "out")


@pytest.mark.slow
def test_raw_restored_after_refused_resume_resumes(cli, tmp_path: Path) -> None:
    """The refusal says "Restore RAW": after undoing the change the same command resumes to the uninterrupted bytes."""
    raw = tmp_path / "raw"
    kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    ref = tmp_path / "ref"
    ref.mkdir()
    assert run_in(cli, args, ref).rc == 0
    run = interrupted_run(tmp_path, args)
    extra = image_file(raw / "dog" / "zz_new.png", color=(4, 4, 4), fmt="PNG")
    res = run_in(cli, args, run)
    # Resuming over the changed RAW would mix two versions of it: refused, naming the new file and the way out.
    assert res.rc == 2, f"a resume over a changed RAW was not refused: {res.text}"
    assert "Restore RAW" in res.err and extra.name in res.err, res.err
    extra.unlink()
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_resume_notices_a_completed_shard_that_is_gone(cli, tmp_path: Path, damage: str) -> None:
    """A completed shard of a killed run is deleted or truncated (a cleanup, a full disk) before the rerun:
    the rerun rewrites it (the uninterrupted bytes) or refuses naming it; never exit 0 with a hole."""
    raw = tmp_path / "raw"
    kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    ref = tmp_path / "ref"
    ref.mkdir()
    assert run_in(cli, args, ref).rc == 0
    run = interrupted_run(tmp_path, args)
    shard = sorted((run / "out").glob("*.tar"))[0]
    shard.unlink() if damage == "deleted" else os.truncate(shard, 512)
    res = run_in(cli, args, run)
    if res.rc == 0:
        assert_same_output(run / "out", ref / "out")
    else:
        assert shard.name in res.err and "Traceback" not in res.err, res.text
        assert not verify_ok(cli, run / "out")


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_rerun_of_finished_out_with_a_shard_gone_is_not_complete(cli, tmp_path: Path, damage: str) -> None:
    """A finished OUT loses a shard; rerunning the command must not answer "already complete" (exit 0)."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=1)
    args = ("shard", raw, out, "--workers", "1", "--samples-per-shard", "2")
    assert cli(*args).rc == 0
    shard = sorted(out.glob("*.tar"))[0]
    shard.unlink() if damage == "deleted" else os.truncate(shard, 512)
    res = cli(*args)
    if res.rc == 0:
        status = res.out.strip().splitlines()[-1]
        assert verify_ok(cli, out), f"rerun exited 0 ({status!r}) over an OUT whose {shard.name} is {damage}"
        assert_accounted(read_output(out), inputs)
    else:
        assert shard.name in res.err, res.text


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_raw_changed_while_the_run_is_running(cli, tmp_path: Path, workers: str) -> None:
    """Files deleted or rewritten under a running run (paused after its first checkpoint): the run ends with
    each input once (read before the change, or a reject), no traceback; the rerun does not call it complete."""
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", workers, "--samples-per-shard", "2", "--no-progress", "--no-shuffle")
    run = tmp_path / "run"
    run.mkdir()
    proc = start_cli(args, run)
    try:
        wait_until(shards_at_least(run / "out", 1), proc=proc)  # the writing child exists: no fork races the pause
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGSTOP)
        (raw / "dog" / "011.png").unlink()
        (raw / "dog" / "010.png").write_bytes(b"rewritten while the run was reading RAW")
        for _ in range(2):  # a second SIGCONT, in case a process was mid-fork at the first
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)
            time.sleep(0.05)
        _, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert "Traceback" not in err, err
    assert proc.returncode == 0, err
    assert_accounted(read_output(run / "out"), inputs)
    res = run_in(cli, args, run)
    assert "already complete" not in res.out, res.text
    if res.rc != 0:
        assert "--overwrite" in res.err, res.text


@pytest.mark.slow
def test_second_run_into_an_out_in_use(cli, tmp_path: Path) -> None:
    """A run started while another one is writing the same OUT (the first is paused mid-run): either it is
    refused saying OUT is in use, or both finish; the result is the uninterrupted output either way."""
    raw = tmp_path / "raw"
    kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    first = start_cli(args, run, stdout=subprocess.DEVNULL)
    try:
        wait_until(shards_at_least(run / "out", 2), proc=first)
        os.killpg(first.pid, signal.SIGSTOP)
        assert first.poll() is None, "the first run ended before the second started"
        second = run_in(cli, args, run)
        for _ in range(2):  # a second SIGCONT, in case a process was mid-fork at the first
            os.killpg(first.pid, signal.SIGCONT)
            time.sleep(0.05)
        _, first_err = first.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    if second.rc != 0:
        assert any(w in second.err.lower() for w in ("in use", "another", "running", "lock")), second.err
        assert first.returncode == 0, first_err
    else:
        assert first.returncode == 0, f"the paused run failed after another run finished OUT: {first_err}"
    assert_same_output(run / "out", ref / "out")
    assert verify_ok(cli, run / "out")


def test_reject_budget_then_raw_fixed(cli, tmp_path: Path) -> None:
    """Stopped by --max-reject-fraction, the user deletes the broken files and reruns: refused naming them
    (with --overwrite as the way out) or the output of the fixed RAW; never the old rejects."""
    raw = tmp_path / "raw"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=3)
    base = ("--workers", "1", "--samples-per-shard", "2", "--max-reject-fraction", "0.1")
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    assert cli("shard", raw, out, *base).rc == 1
    for i in range(3):
        (raw / "cat" / f"broken_{i}.jpg").unlink()
    res = cli("shard", raw, out, *base)
    if res.rc != 0:
        assert res.rc == 2 and "broken_0.jpg" in res.err and "--overwrite" in res.err, res.text
        res = cli("shard", raw, out, *base, "--overwrite")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.rejects == []
    assert_accounted(output, [i for i in inputs if "broken" not in i])
    assert cli("shard", raw, fresh, *base).rc == 0
    assert_same_output(out, fresh, drop_manifest_keys=("command",))


def test_finished_out_of_another_raw(cli, tmp_path: Path) -> None:
    raw_a, raw_b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    image_tree(raw_a, {"cat": 3, "dog": 3})
    inputs_b = image_tree(raw_b, {"eel": 2, "fox": 2}, broken=1)
    assert cli("shard", raw_a, out, "--workers", "1", "--samples-per-shard", "1").rc == 0
    first = output_bytes(out)
    res = cli("shard", raw_b, out, "--workers", "1", "--samples-per-shard", "1")
    if res.rc != 0:
        assert res.rc == 2 and "--overwrite" in res.err, res.text
        assert output_bytes(out) == first
        res = cli("shard", raw_b, out, "--workers", "1", "--samples-per-shard", "1", "--overwrite")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert set(output.manifest["label_map"]) == {"eel", "fox"}
    assert_accounted(output, inputs_b)


@pytest.mark.slow
@pytest.mark.parametrize("change", ["added", "removed", "modified-bigger"])
def test_followed_folder_outside_raw_changed_between_kill_and_resume(cli, tmp_path: Path, change: str) -> None:
    """With --follow-symlinks the files behind a link are inputs too: a change there is a change of RAW."""
    raw, ext = tmp_path / "raw", tmp_path / "elsewhere"
    image_tree(raw, {"cat": 6, "dog": 6}, size=(160, 120), fmt="png")
    image_tree(ext / "zebra", {"z": 12}, size=(160, 120), fmt="png")
    os.symlink(ext / "zebra" / "z", raw / "zebra")
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress",
            "--follow-symlinks")
    run = interrupted_run(tmp_path, args)
    done = [src for src in _sources_in_first_shard(run / "out")]
    target = next((src for src in done if src.startswith("zebra/")), "zebra/000.png")
    if change == "added":
        image_file(ext / "zebra" / "z" / "new.png", size=(150, 100), color=(1, 2, 3), fmt="PNG")
    elif change == "removed":
        (ext / "zebra" / "z" / Path(target).name).unlink()
    else:
        image_file(ext / "zebra" / "z" / Path(target).name, size=(300, 200), color=(0, 0, 250), fmt="PNG")
    res = run_in(cli, args, run)
    if res.rc == 0:
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        assert run_in(cli, args, fresh).rc == 0
        assert_same_output(run / "out", fresh / "out")
    else:
        assert "--overwrite" in res.err and "zebra/" in res.err, res.text
        assert not verify_ok(cli, run / "out")


@pytest.mark.slow
@pytest.mark.parametrize("change", ["row-appended", "row-edited", "file-added"])
def test_table_changed_between_kill_and_resume(cli, tmp_path: Path, change: str) -> None:
    raw = tmp_path / "raw"
    table_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "200", "--no-progress",
            "--dedup-on", "url", "--required", "id")
    run = interrupted_run(tmp_path, args)
    if change == "row-appended":
        with open(raw / "a.csv", "a") as f:
            f.write("99999,u_new,1\n")
        changed = "a.csv"
    elif change == "row-edited":  # same size, other content
        data = (raw / "a.csv").read_bytes().replace(b"\n1,u", b"\n7,u", 1)
        (raw / "a.csv").write_bytes(data)
        changed = "a.csv"
    else:
        write_text(raw / "0_first.jsonl", '{"id": 1, "url": "u1", "v": 1}\n')
        changed = "0_first.jsonl"
    res = run_in(cli, args, run)
    if res.rc == 0:
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        assert run_in(cli, args, fresh).rc == 0
        assert_same_output(run / "out", fresh / "out")
    else:
        assert changed in res.err and "--overwrite" in res.err, res.text
        assert not verify_ok(cli, run / "out")


def test_schema_file_edited_after_a_finished_run(cli, tmp_path: Path) -> None:
    """`--schema @s.json` is the same argument, but the file now says otherwise: not "already complete"."""
    raw, out, schema = tmp_path / "raw", tmp_path / "out", tmp_path / "s.json"
    write_text(raw / "t.csv", "id,v\n1,2\n2,x\n3,4\n")
    schema.write_text('{"id": "int64", "v": "int64"}')
    args = ("shard", raw, out, "--workers", "1", "--schema", f"@{schema}")
    assert cli(*args).rc == 0
    assert len(read_output(out).rejects) == 1
    schema.write_text('{"id": "int64", "v": "string"}')
    res = cli(*args)
    if res.rc == 0:
        output = read_output(out)
        assert output.rejects == [] and len(output.samples) == 3
    else:
        assert res.rc == 2 and "--overwrite" in res.err and "schema" in res.err, res.text


@pytest.mark.parametrize("change", RAW_CHANGE_KINDS)
def test_raw_changed_after_a_finished_run(cli, tmp_path: Path, change: str) -> None:
    """Rerunning a finished command over a changed RAW never answers 'already complete' with the old output."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    kill_tree(raw)
    args = ("shard", raw, out, "--workers", "1", "--samples-per-shard", "4")
    assert cli(*args).rc == 0
    old = output_bytes(out)
    time.sleep(0.01)
    _change_raw(raw, change, read_output(out).samples[0][0])
    res = cli(*args)
    if res.rc == 0:
        fresh = tmp_path / "fresh"
        assert cli("shard", raw, fresh, *args[3:]).rc == 0
        assert_same_output(out, fresh, drop_manifest_keys=("command", "options"))
    else:
        assert res.rc in (1, 2) and "--overwrite" in res.err, res.err
        assert output_bytes(out) == old
