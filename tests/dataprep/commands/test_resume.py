"""Resume = skip to a place in the saved plan: one harness for every layout, every stopping point.

A run is stopped (an exception no code catches, raised where a kill could land: right
after the n-th checkpoint, or between publishing the rejects and writing the manifest),
rerun with the same command, and compared with an uninterrupted run: the same files,
byte for byte. RAW changed in between is refused, naming what changed (issue 12, items 2, 3).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dataprep.commands import run_output as output, shard
from dataprep.engines import run_modes
from dataprep.cli import main
from dataprep.formats.manifest import read_manifest
from tests.dataprep.helpers import REPO, STATE_DIR, assert_same_output, image_file, shard_cli


class _Killed(BaseException):
    """Stands for a kill: nothing catches it, so OUT is left as the stopped process left it."""


def _same_output(a: Path, b: Path) -> None:
    """The same files, byte for byte (the manifest but for its command line), no state folder, no NUL byte."""
    assert not (a / STATE_DIR).exists() and not (b / STATE_DIR).exists()
    assert_same_output(b, a, drop_manifest_keys=("command",))
    assert b"\0" not in ((b / "rejects.jsonl").read_bytes() if (b / "rejects.jsonl").exists() else b"")


def _stop_after_checkpoint(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Stop right after the n-th checkpoint is saved (the plan's first, then the write loop's)."""
    real = shard.save_checkpoint
    calls = {"n": 0}

    def save_then_stop(store: object, checkpoint: object) -> None:
        real(store, checkpoint)
        calls["n"] += 1
        if calls["n"] == n:
            raise _Killed

    monkeypatch.setattr(shard, "save_checkpoint", save_then_stop)
    monkeypatch.setattr(run_modes, "save_checkpoint", save_then_stop)


def _stop_before_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(*args: object) -> None:
        raise _Killed

    monkeypatch.setattr(shard, "publish_manifest", stop)


def test_kill_after_the_manifest_leaves_a_finished_output(tmp_path, monkeypatch, capsys):
    raw = _images(tmp_path / "raw", 6)
    out, clean = tmp_path / "out", tmp_path / "clean"
    with monkeypatch.context() as patch:
        patch.setattr(output.LocalOutput, "finish", lambda self: (_ for _ in ()).throw(_Killed()))
        with pytest.raises(_Killed):
            shard_cli(raw, out, "--workers", "1")
    assert (out / ".dataprep").exists()
    assert shard_cli(raw, out, "--workers", "1") == 0
    assert "already complete" in capsys.readouterr().out and not (out / ".dataprep").exists()
    assert shard_cli(raw, clean, "--workers", "1") == 0
    _same_output(clean, out)


def _images(root: Path, n: int = 24) -> Path:
    for i in range(n):
        folder = root / f"class_{i % 3}"
        image_file(folder / f"{i:03d}.jpg", (48, 40), (i * 9 % 256, 255 - i * 7 % 256, i * 31 % 256), quality=-1)
    (root / "class_0" / "broken.jpg").write_bytes(b"\xff\xd8 not really")
    return root


def _text(root: Path) -> Path:
    root.mkdir(parents=True)
    lines = [f"line {i % 37} of a document" if i % 11 else "   " for i in range(400)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    (root / "b.txt").write_text("\n".join(reversed(lines)) + "\n")
    return root


def _table(root: Path) -> Path:
    root.mkdir(parents=True)
    rows = "\n".join(f"{i % 50},name {i},{'x' if i % 13 == 0 else i * 0.5}" for i in range(300))
    (root / "t.csv").write_text("id,name,score\n" + rows + "\n")
    with open(root / "u.jsonl", "w") as f:
        for i in range(300):
            f.write(json.dumps({"id": (i * 7) % 60, "name": f"u{i}", "score": i}) + "\n")
    return root


LAYOUTS = {
    "images": (_images, ["--samples-per-shard", "5"]),
    "text": (_text, ["--text-unit", "line", "--samples-per-shard", "60", "--range-size", "6KiB"]),
    "table": (_table, ["--samples-per-shard", "70", "--dedup-on", "id", "--range-size", "4KiB"]),
}


@pytest.mark.parametrize("stop", ["checkpoint-1", "checkpoint-3", "before-manifest"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_stopped_run_resumes_to_identical_output(tmp_path, monkeypatch, layout, stop):
    make, options = LAYOUTS[layout]
    raw = make(tmp_path / "raw")
    args = ["--workers", "1", *options]
    clean = tmp_path / "clean"
    assert shard_cli(raw, clean, *args) == 0
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        if stop == "before-manifest":
            _stop_before_manifest(patch)
        else:
            _stop_after_checkpoint(patch, int(stop.rsplit("-", 1)[1]))
        with pytest.raises(_Killed):
            shard_cli(raw, out, *args)
    assert not (out / "manifest.json").exists()
    assert shard_cli(raw, out, *args) == 0
    _same_output(clean, out)
    assert main(["verify", os.fspath(out)]) == 0


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_output_does_not_depend_on_workers(tmp_path, layout):
    make, options = LAYOUTS[layout]
    raw = make(tmp_path / "raw")
    one, two = tmp_path / "one", tmp_path / "two"
    assert shard_cli(raw, one, "--workers", "1", *options) == 0
    assert shard_cli(raw, two, "--workers", "2", *options) == 0
    _same_output(one, two)


@pytest.mark.parametrize("change", ["add", "remove", "modify"])
def test_resume_after_raw_changed_is_refused_naming_the_change(tmp_path, monkeypatch, capsys, change):
    raw = _images(tmp_path / "raw")
    out = tmp_path / "out"
    args = ["--workers", "1", "--samples-per-shard", "5"]
    with monkeypatch.context() as patch:
        _stop_after_checkpoint(patch, 2)
        with pytest.raises(_Killed):
            shard_cli(raw, out, *args)
    victim = raw / "class_1" / "004.jpg"
    if change == "add":
        image_file(raw / "class_1" / "new.jpg", (50, 50), (1, 2, 3), quality=-1)
        named = "added class_1/new.jpg"
    elif change == "remove":
        victim.unlink()
        named = "removed class_1/004.jpg"
    else:
        image_file(victim, (60, 60), (1, 2, 3), quality=-1)
        named = "changed class_1/004.jpg"
    capsys.readouterr()
    assert shard_cli(raw, out, *args) == 2
    err = capsys.readouterr().err
    assert named in err and "--overwrite" in err, err
    assert shard_cli(raw, out, *args, "--overwrite") == 0  # replanned from zero
    clean = tmp_path / "clean"
    assert shard_cli(raw, clean, *args) == 0
    _same_output(clean, out)


def test_finished_output_of_a_changed_raw_is_not_called_complete(tmp_path, capsys):
    raw = _images(tmp_path / "raw", 6)
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1") == 0
    image_file(raw / "class_1" / "new.jpg", (50, 50), (1, 2, 3), quality=-1)
    capsys.readouterr()
    assert shard_cli(raw, out, "--workers", "1") == 2
    assert "changed" in capsys.readouterr().err


def test_rerun_with_a_higher_reject_fraction_finishes_with_clean_rejects(tmp_path, capsys):
    raw = _images(tmp_path / "raw", 12)
    for i in range(3):
        (raw / "class_2" / f"empty{i}.jpg").write_bytes(b"")
    out, clean = tmp_path / "out", tmp_path / "clean"
    assert shard_cli(raw, out, "--workers", "1", "--max-reject-fraction", "0.05") == 1
    assert "max-reject-fraction" in capsys.readouterr().err
    assert not (out / "manifest.json").exists()
    assert len((out / "rejects.jsonl").read_text().splitlines()) == 4  # readable while the run is stopped
    assert shard_cli(raw, out, "--workers", "1", "--max-reject-fraction", "0.5") == 0
    assert shard_cli(raw, clean, "--workers", "1", "--max-reject-fraction", "0.5") == 0
    _same_output(clean, out)
    reasons = sorted(json.loads(line)["reason"] for line in (out / "rejects.jsonl").read_text().splitlines())
    assert reasons == ["empty_file"] * 3 + ["not_an_image"] and read_manifest(out).totals.rejected == 4


_KILL_BEFORE_MANIFEST = """
import os, signal, sys
from dataprep.commands import shard
from dataprep.cli import main
shard.publish_manifest = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
sys.exit(main(["shard", *sys.argv[1:]]))
"""


def test_kill_9_between_publishing_rejects_and_the_manifest(tmp_path):
    raw = _images(tmp_path / "raw", 12)
    out, clean = tmp_path / "out", tmp_path / "clean"
    args = [os.fspath(raw), os.fspath(out), "--workers", "2", "--samples-per-shard", "4"]
    cwd = REPO
    done = subprocess.run([sys.executable, "-c", _KILL_BEFORE_MANIFEST, *args], cwd=cwd, capture_output=True)
    assert done.returncode == -9, done.stderr
    assert (out / "rejects.jsonl").exists() and not (out / "manifest.json").exists()
    assert shard_cli(*args) == 0
    assert shard_cli(raw, clean, *args[2:]) == 0
    _same_output(clean, out)


_KILL_AT_CHECKPOINT = """
import os, signal, sys
from dataprep.commands import run_output as output, shard
from dataprep.engines import local_writers, run_modes
from dataprep.cli import main
real, calls = shard.save_checkpoint, []
def save_then_die(store, checkpoint):
    real(store, checkpoint)
    calls.append(1)
    if len(calls) == int(os.environ["KILL_AT"]):
        os.killpg(0, signal.SIGKILL)  # the run's whole group (its writer processes too), as a power cut
shard.save_checkpoint = run_modes.save_checkpoint = local_writers.save_checkpoint = save_then_die
sys.exit(main(["shard", *sys.argv[1:]]))
"""


@pytest.mark.parametrize("layout", ["text", "table"])
def test_kill_9_with_worker_processes_resumes_to_identical_output(tmp_path, layout):
    """A real SIGKILL after the 3rd checkpoint, with 2 writer processes: they die too, and a rerun matches."""
    make, options = LAYOUTS[layout]
    raw = make(tmp_path / "raw")
    out, clean = tmp_path / "out", tmp_path / "clean"
    args = [os.fspath(raw), os.fspath(out), "--workers", "2", *options]
    cwd = REPO
    done = subprocess.run([sys.executable, "-c", _KILL_AT_CHECKPOINT, *args], cwd=cwd, capture_output=True,
                          env={**os.environ, "KILL_AT": "3"}, timeout=60, start_new_session=True)
    assert done.returncode == -9, done.stderr
    assert not (out / "manifest.json").exists()
    assert shard_cli(*args) == 0
    assert shard_cli(raw, clean, *args[2:]) == 0
    _same_output(clean, out)
