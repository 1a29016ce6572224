"""OUT is dataprep's only where dataprep wrote it: --overwrite never removes anything else (issue 12, item 1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dataprep.cli import main
from dataprep.formats.manifest import read_manifest
from tests.dataprep.helpers import REPO, files_of, image_file, shard_cli
from tests.samples import wait_until


def _small_tree(raw: Path, n: int = 4) -> Path:
    for i in range(n):
        image_file(raw / f"c{i % 2}" / f"{i}.jpg", (40, 40), (i * 40, 90, 200 - i * 30), quality=-1)
    return raw


def test_raw_inside_out_is_a_usage_error_and_nothing_is_removed(tmp_path, capsys):
    data = tmp_path / "data"
    raw = _small_tree(data / "raw")
    before = files_of(data)
    assert shard_cli(raw, data, "--workers", "1", "--overwrite") == 2
    assert "RAW" in capsys.readouterr().err
    assert files_of(data) == before
    assert shard_cli(raw, raw, "--workers", "1", "--overwrite") == 2  # the same folder
    assert files_of(data) == before


def test_overwrite_refuses_a_folder_dataprep_did_not_write(tmp_path, capsys):
    raw = _small_tree(tmp_path / "raw")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    (out / "sub").mkdir()
    (out / "sub" / "x.bin").write_bytes(b"123")
    before = files_of(out)
    assert shard_cli(raw, out, "--workers", "1", "--overwrite") == 2
    err = capsys.readouterr().err
    assert "notes.txt" in err and "did not write" in err
    assert files_of(out) == before


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
    expected = ({s.name for s in manifest.shards} | {s.index for s in manifest.shards}
                | {"manifest.json", "rejects.jsonl"})
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
    before = files_of(adopted)
    assert shard_cli(raw, adopted, "--workers", "1", "--overwrite") == 2
    assert "adopted" in capsys.readouterr().err
    assert files_of(adopted) == before


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


@pytest.mark.parametrize(("change", "expected"), [
    (("--shard-size", "3KiB"), "--shard-size 256.0 MiB before, --shard-size 3.0 KiB now"),
    (("--samples-per-shard", "1"), "without --samples-per-shard before, --samples-per-shard 1 now"),
    (("--resize-short", "32"), "without --resize-short before, --resize-short 32 now"),
    (("--no-shuffle",), "without --no-shuffle before, with --no-shuffle now"),
    (("--seed", "7"), "--seed 0 before, --seed 7 now"),
    (("--format", "parquet"), "--format auto before, --format parquet now"),
])
@pytest.mark.parametrize("state", ["finished", "interrupted"])
def test_a_refusal_names_the_options_as_the_user_typed_them(tmp_path, capsys, change, expected, state):
    """Rerunning into OUT with another option names the flag and both values (not internal field names)."""
    raw, out = _small_tree(tmp_path / "raw"), tmp_path / "out"
    stop = ("--max-reject-fraction", "0", "--min-side", "50") if state == "interrupted" else ()  # every input rejected
    assert shard_cli(raw, out, "--workers", "1", *stop) == (1 if stop else 0)
    capsys.readouterr()
    assert shard_cli(raw, out, "--workers", "1", *stop, *change) == 2
    err = capsys.readouterr().err
    assert expected in err and "--overwrite" in err, err
    assert "max_shard_bytes" not in err and "image" not in err, err


def test_a_second_run_into_an_out_in_use_is_refused_at_once(tmp_path, capsys):
    """While a run holds OUT (here a process paused inside it: SIGSTOP), a second run exits 2 naming its pid,
    touches nothing, and once the first is gone the same command works. "At once": it returns while the
    holder is still stopped, so it never waited for the lock (a liveness check, not a bound on time)."""
    import signal
    import subprocess
    import sys
    import threading

    raw, out = _small_tree(tmp_path / "raw"), tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
                               "from dataprep.plan.outdir import OutputLock\n"
                               "with OutputLock(Path(sys.argv[1])):\n    print('locked', flush=True)\n"
                               "    time.sleep(60)\n",
                               os.fspath(out)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        holder.send_signal(signal.SIGSTOP)
        codes: list[int] = []
        second = threading.Thread(target=lambda: codes.append(shard_cli(raw, out, "--workers", "1")))
        second.start()
        assert wait_until(lambda: not second.is_alive(), timeout_s=120), "the second run waits for the lock"
        state = Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state == "T", state  # the holder is still stopped: the lock was never released
        assert codes == [2]
        err = capsys.readouterr().err
        assert f"in use by another dataprep run (pid {holder.pid})" in err, err
        assert list(out.iterdir()) == []
    finally:
        holder.kill()
        holder.wait()
    assert shard_cli(raw, out, "--workers", "1") == 0


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
@pytest.mark.parametrize("state", ["finished", "interrupted"])
def test_a_recorded_shard_that_is_gone_is_named_never_already_complete(tmp_path, capsys, damage, state):
    """A shard that a finished (or stopped) run recorded is deleted or truncated: the rerun refuses naming it,
    instead of "already complete" (or resuming around the hole); --overwrite shards again."""
    raw, out = _small_tree(tmp_path / "raw", 6), tmp_path / "out"
    (raw / "c0" / "broken.jpg").write_bytes(b"not a jpeg")
    args = ["--workers", "1", "--samples-per-shard", "2"]
    stop = ["--max-reject-fraction", "0"] if state == "interrupted" else []
    assert shard_cli(raw, out, *args, *stop) == (1 if stop else 0)
    shard = sorted(out.glob("*.tar"))[0]
    shard.unlink() if damage == "deleted" else os.truncate(shard, 512)
    capsys.readouterr()
    assert shard_cli(raw, out, *args, *stop) == 2
    err = capsys.readouterr().err
    assert shard.name in err and "--overwrite" in err
    assert ("is missing" if damage == "deleted" else "has 512 bytes") in err
    assert shard_cli(raw, out, *args, "--overwrite") == 0
    assert main(["verify", os.fspath(out)]) == 0


def test_overwrite_interrupted_while_removing_can_be_rerun(tmp_path, monkeypatch):
    """--overwrite stopped just after the old manifest is removed: what is left is still recognised as
    dataprep's, and the rerun finishes (it is never "files dataprep did not write")."""
    raw, out = _small_tree(tmp_path / "raw", 8), tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--samples-per-shard", "1") == 0
    real_unlink = Path.unlink

    def unlink_then_stop_after_manifest(self, missing_ok=False):
        real_unlink(self, missing_ok=missing_ok)
        if self.name == "manifest.json":
            raise KeyboardInterrupt  # as a kill right after the manifest is gone

    monkeypatch.setattr(Path, "unlink", unlink_then_stop_after_manifest)
    assert shard_cli(raw, out, "--workers", "1", "--samples-per-shard", "3", "--overwrite") == 130
    monkeypatch.setattr(Path, "unlink", real_unlink)
    assert shard_cli(raw, out, "--workers", "1", "--samples-per-shard", "3", "--overwrite") == 0
    assert main(["verify", os.fspath(out)]) == 0
    assert read_manifest(out).totals.samples_kept == 8


@pytest.mark.parametrize("stricter", [(), ("--max-reject-fraction", "0")], ids=["no-allow-empty", "reject-budget"])
def test_a_finished_output_answers_a_stricter_rerun_like_a_fresh_run(tmp_path, capsys, stricter):
    """The budgets (--allow-empty, --max-reject-fraction) are not options of the output: a finished OUT
    that a fresh run with them would fail is not "already complete" for that rerun (exit 1)."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    (raw / "cat").mkdir(parents=True)
    for i in range(3):
        (raw / "cat" / f"{i}.jpg").write_bytes(b"garbage" * (i + 1))
    if stricter:
        _small_tree(raw, 4)
    first = ("--allow-empty",) if not stricter else ()
    assert shard_cli(raw, out, "--workers", "1", *first) == 0
    capsys.readouterr()
    assert shard_cli(raw, out, "--workers", "1", *stricter) == 1
    err = capsys.readouterr().err
    assert ("--allow-empty" if not stricter else "--max-reject-fraction") in err, err
    assert shard_cli(raw, out, "--workers", "1", *first) == 0  # the same command as before: still complete
    assert main(["verify", os.fspath(out)]) == 0


@pytest.mark.parametrize("damaged", ["plan.json", "checkpoint.json"])
def test_overwrite_recovers_from_damaged_state(tmp_path, capsys, damaged):
    """A stopped run's plan or checkpoint is damaged: the rerun names the file and --overwrite, and
    --overwrite (which the message offers) then works instead of failing on the same file."""
    raw, out = _small_tree(tmp_path / "raw", 6), tmp_path / "out"
    (raw / "c0" / "broken.jpg").write_bytes(b"not a jpeg")
    args = ["--workers", "1", "--samples-per-shard", "2"]
    assert shard_cli(raw, out, *args, "--max-reject-fraction", "0") == 1
    (out / ".dataprep" / damaged).write_text("{not json")
    capsys.readouterr()
    assert shard_cli(raw, out, *args) == 1
    err = capsys.readouterr().err
    assert damaged in err and "--overwrite" in err, err
    assert shard_cli(raw, out, *args, "--overwrite") == 0
    assert main(["verify", os.fspath(out)]) == 0
    assert read_manifest(out).totals.samples_kept == 6


def test_a_dataprep_output_given_as_raw_is_refused(tmp_path, capsys):
    """Resharding an output (or RAW and OUT swapped) would make rejects.jsonl a table dataset: refused."""
    raw, out = _small_tree(tmp_path / "raw"), tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1") == 0
    capsys.readouterr()
    assert shard_cli(out, tmp_path / "again", "--workers", "1") == 2
    assert "holds manifest.json: it is a dataprep output" in capsys.readouterr().err
    assert not (tmp_path / "again").exists()
    assert shard_cli(out, raw, "--workers", "1") == 2  # swapped


@pytest.mark.parametrize(("layout", "option"), [("image-folder", ("--dedup-on", "url")),
                                                 ("text", ("--schema", '{"id": "int64"}'))])
def test_table_options_over_a_raw_of_another_layout_are_refused(tmp_path, capsys, layout, option):
    raw, out = tmp_path / "raw", tmp_path / "out"
    if layout == "image-folder":
        _small_tree(raw)
    else:
        raw.mkdir()
        (raw / "a.txt").write_text("hello\n")
    assert shard_cli(raw, out, "--workers", "1", *option) == 2
    err = capsys.readouterr().err
    assert f"{option[0]} applies to tables" in err and layout in err, err


@pytest.mark.parametrize("link", ["to-out", "to-parent-of-raw-and-out"])
def test_follow_symlinks_never_takes_out_as_input(tmp_path, capsys, link):
    """A link in RAW leading to OUT (or to a folder holding it), walked with --follow-symlinks: dataprep's
    own state and shards are not inputs, and the rerun of the finished command is "already complete"."""
    raw, out = _small_tree(tmp_path / "raw"), tmp_path / "out"
    if link == "to-out":
        os.symlink(out, raw / "c0" / "shards")
    else:
        os.symlink(tmp_path, raw / "everything")
    args = ["--workers", "1", "--follow-symlinks", "--layout", "image-folder", "--json"]
    assert shard_cli(raw, out, *args) == 0
    first = capsys.readouterr().out
    totals = read_manifest(out).totals
    # `everything` leads to a folder holding RAW: the walk rejects that link (a loop) and never reads RAW twice
    assert (totals.samples_kept, totals.inputs_seen) == (4, 4 if link == "to-out" else 5), first
    rejects = (out / "rejects.jsonl").read_text()
    assert "shards/" not in rejects and "everything/out" not in rejects and ".dataprep" not in rejects, rejects
    assert shard_cli(raw, out, *args) == 0
    assert '"already_complete": true' in capsys.readouterr().out
