"""``--engine local`` in one writing process: media on threads in a supervised child (crashes, kills, interrupts,
full disks, memory); the output does not depend on ``--workers``. A plan of one range (``ONE_RANGE``) is written
this way whatever ``--workers`` says; writer processes are ``test_writers.py``'s."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dataprep.cli import main
from dataprep.formats.manifest import read_manifest
from tests.dataprep.helpers import REPO, crash_on, default_sigint, read_rejects, shard_cli
from tests.samples import tar_samples, wait_until

ONE_RANGE = ("--range-size", "1GiB")  # the whole plan in one range: one writing process


def test_output_does_not_depend_on_workers(image_tree, tmp_path):
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        assert shard_cli(image_tree, out, "--shard-size", "1MB", "--workers", workers) == 0
        outs.append(out)
    names = sorted(p.name for p in outs[0].iterdir())
    assert names == sorted(p.name for p in outs[1].iterdir())
    for name in names:
        if name != "manifest.json":  # its command line differs
            assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


def _processes_in(cwd: Path) -> list[int]:
    """Pids of live processes whose working directory is ``cwd``."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == cwd:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _run_killed(cmd: list[str], cwd: Path, out: Path) -> None:
    """Start `dataprep shard`, kill -9 it once a shard is complete; its workers must die too."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = out / ".dataprep" / "checkpoint.json"
    try:
        while proc.poll() is None:
            if checkpoint.exists() and json.loads(checkpoint.read_text() or "{}").get("next_shard", 0) >= 2:
                proc.kill()
                break
    finally:
        proc.wait()
    wait_until(lambda: not _processes_in(cwd))  # fails the test if worker processes outlive their killed parent


def test_resume_after_kill_is_byte_identical(image_tree, tmp_path):
    args = ["../images", "out", "--shard-size", "300KB", "--workers", "2", *ONE_RANGE]
    cmd = [sys.executable, "-m", "dataprep.cli", "shard", *args]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    subprocess.run(cmd, cwd=tmp_path / "a", check=True, capture_output=True)
    _run_killed(cmd, tmp_path / "b", tmp_path / "b" / "out")
    assert not (tmp_path / "b" / "out" / "manifest.json").exists(), "run finished before the kill; make the data larger"
    subprocess.run(cmd, cwd=tmp_path / "b", check=True, capture_output=True)
    a, b = tmp_path / "a" / "out", tmp_path / "b" / "out"
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_input_that_crashes_its_worker_is_rejected_and_the_run_goes_on(image_tree, tmp_path, monkeypatch, caplog):
    from dataprep.engines import write_loop

    victim = sorted(image_tree.glob("*/*.jpg"))[7].relative_to(image_tree).as_posix()
    crash_on(monkeypatch, victim, 11)
    crashed = tmp_path / "crashed"
    with caplog.at_level(logging.WARNING, logger="dataprep.engines.supervisor"):
        assert shard_cli(image_tree, crashed, "--workers", "2", "--shard-size", "300KB", *ONE_RANGE) == 0
    logged = f"{victim}: cleaning it alone killed the worker process (exit status 11); rejected (worker_crash)"
    assert logged in caplog.text
    monkeypatch.setattr(write_loop, "clean_item", write_loop.CLEAN_ITEM)
    clean = tmp_path / "clean"
    assert shard_cli(image_tree, clean, "--workers", "2", "--shard-size", "300KB", *ONE_RANGE) == 0
    reasons = {r["source"]: r for r in read_rejects(crashed)}
    assert reasons[victim]["reason"] == "worker_crash" and "exit status 11" in reasons[victim]["detail"]
    a, b = read_manifest(crashed).totals, read_manifest(clean).totals
    assert a.inputs_seen == b.inputs_seen and a.samples_kept == b.samples_kept - 1
    assert set(tar_samples(clean)) - set(tar_samples(crashed)) == {k for k, f in tar_samples(clean).items()
                                                                   if json.loads(f["json"])["__source__"] == victim}


def test_crash_that_does_not_recur_alone_fails_the_run_and_a_rerun_resumes(image_tree, tmp_path, monkeypatch, capsys):
    victim = sorted(image_tree.glob("*/*.jpg"))[7].relative_to(image_tree).as_posix()
    crash_on(monkeypatch, victim, 9, once_marker=tmp_path / "crashed-once")  # cleaning it again alone works
    out, clean = tmp_path / "out", tmp_path / "clean"
    args = ("--workers", "2", "--shard-size", "300KB", *ONE_RANGE)
    assert shard_cli(image_tree, out, *args) == 1
    err = capsys.readouterr().err
    assert "died (exit status 9)" in err and "none of which crashes when cleaned alone" in err and victim in err
    assert not (out / "manifest.json").exists()
    assert shard_cli(image_tree, out, *args) == 0
    assert shard_cli(image_tree, clean, *args) == 0
    names = sorted(p.name for p in clean.iterdir())
    assert names == sorted(p.name for p in out.iterdir())
    assert all((clean / n).read_bytes() == (out / n).read_bytes() for n in names if n != "manifest.json")
    assert read_manifest(out).shards == read_manifest(clean).shards


def test_interrupt_stops_the_child_and_a_rerun_resumes(image_tree, tmp_path):
    """SIGINT to the parent alone (as from `kill -INT`): it stops its child, exits 130, leaves no process."""
    cmd = [sys.executable, "-m", "dataprep.cli", "shard", "../images", "out", "--shard-size", "300KB", "--workers", "2",
           *ONE_RANGE]
    (tmp_path / "run").mkdir()
    proc = subprocess.Popen(cmd, cwd=tmp_path / "run", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=default_sigint)
    checkpoint = tmp_path / "run" / "out" / ".dataprep" / "checkpoint.json"
    while proc.poll() is None:
        if checkpoint.exists() and json.loads(checkpoint.read_text() or "{}").get("next_shard", 0) >= 2:
            proc.send_signal(signal.SIGINT)
            break
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and b"interrupted" in err, err
    assert not _processes_in(tmp_path / "run"), "the child outlived its interrupted parent"
    assert not (tmp_path / "run" / "out" / "manifest.json").exists()
    subprocess.run(cmd, cwd=tmp_path / "run", check=True, capture_output=True)
    assert main(["verify", os.fspath(tmp_path / "run" / "out")]) == 0


def test_disk_full_in_the_writing_child_fails_cleanly_and_a_rerun_resumes(image_tree, tmp_path, monkeypatch, capsys):
    from dataprep.formats.tar import writer as tar

    real_put = tar._OpenShard.put

    def put_until_full(self, chunk):
        if self.name.endswith("000003.tar"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_put(self, chunk)

    monkeypatch.setattr(tar._OpenShard, "put", put_until_full)
    out = tmp_path / "out"
    args = ("--workers", "2", "--shard-size", "300KB", *ONE_RANGE)
    assert shard_cli(image_tree, out, *args) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and ".shard-00000-000003.tar.tmp" in err, err
    assert "while writing sample" in err, err
    assert not (out / "manifest.json").exists() and not (out / ".shard-00000-000003.tar.tmp").exists()
    assert (out / "shard-00000-000002.tar").exists()  # completed shards stay
    monkeypatch.setattr(tar._OpenShard, "put", real_put)
    assert shard_cli(image_tree, out, *args) == 0
    assert main(["verify", os.fspath(out)]) == 0


# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork+exec (a child of pytest reports pytest's
# peak), and RUSAGE_CHILDREN of the forked writing child starts from its parent's. The writing
# child reads its own VmHWM when its write loop ends (``WriteLoop.execute``, which runs in the child).
_PEAK_RSS_SCRIPT = """
import sys
from dataprep.engines import write_loop

def vm_hwm_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

real_execute = write_loop.WriteLoop.execute
def execute(self):
    try:
        return real_execute(self)
    finally:
        with open(sys.argv[3], "w") as f:
            f.write(str(vm_hwm_kib()))
write_loop.WriteLoop.execute = execute

from dataprep.cli import main
status = main(["shard", sys.argv[1], sys.argv[2], "--workers", "2", "--shard-size", "8MB", "--no-progress",
               "--range-size", "1GiB"])
with open(sys.argv[3]) as f:
    child = int(f.read())
print(status, child, vm_hwm_kib())
"""


def _unique_copies(jpeg: bytes, root: Path, count: int) -> None:
    """``count`` distinct JPEGs (a numbered comment segment after SOI) in 4 class folders."""
    for i in range(count):
        comment = f"copy {i}".encode()
        data = jpeg[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + jpeg[2:]
        folder = root / f"class_{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"img_{i:05d}.jpg").write_bytes(data)


def _peak_rss_kib(raw: Path, out: Path) -> tuple[int, int]:
    """Peak RSS (KiB, VmHWM) of the forked writing child and of the ``dataprep shard`` process."""
    peak_file = out.with_name(out.name + ".child-peak")
    command = [sys.executable, "-c", _PEAK_RSS_SCRIPT, os.fspath(raw), os.fspath(out), os.fspath(peak_file)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO)
    status, child, own = map(int, done.stdout.splitlines()[-1].split())
    assert status == 0, done.stderr
    return child, own


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS (VmHWM) from Linux /proc")
def test_peak_memory_does_not_grow_with_the_dataset(image_tree, tmp_path):
    """4x the inputs (4x the bytes through the cleaning threads and the write loop) must not
    raise the peak RSS of the writing child or of the parent by more than a few MiB.

    Can fail: with every cleaned sample kept in a list in the writing child (``WriteLoop._consume``
    appending to a global, tried by hand) the child's peak grew by far more than the bound."""
    jpegs = sorted(image_tree.glob("*/*.jpg"), key=lambda p: p.stat().st_size)
    jpeg = jpegs[len(jpegs) // 2].read_bytes()  # a typical photo: ~100 KB, 500x375
    _unique_copies(jpeg, tmp_path / "small", 200)
    _unique_copies(jpeg, tmp_path / "large", 800)
    small = _peak_rss_kib(tmp_path / "small", tmp_path / "out-small")
    large = _peak_rss_kib(tmp_path / "large", tmp_path / "out-large")
    extra_bytes = 600 * len(jpeg)
    assert extra_bytes > 20 * 2**20, "make the inputs larger: the test would not see data being kept"
    for name, a, b in (("writing child", small[0], large[0]), ("parent", small[1], large[1])):
        assert (b - a) * 1024 < 12 * 2**20, f"peak RSS of the {name} grew from {a} to {b} KiB"
