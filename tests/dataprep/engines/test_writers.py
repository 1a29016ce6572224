"""``--engine local`` on writer processes (issue 27): the plan's ranges written in parallel, the same bytes for any
``--workers``, a kill -9 anywhere then a resume, Ctrl-C, a writer killed or crashing, the summary's split,
one progress line, any start method. Driven through the CLI; a run is made of several ranges with a small
``--range-size`` (the default, ``auto``, puts a RAW of a few MiB in one range). The same bytes as
``--engine ray``: ``test_ray.py``, which compares Ray's runs with these."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.dataprep.helpers import (MANIFEST, REPO, STATE_DIR, assert_accounted, assert_same_output, crash_on,
                                    default_sigint, kill_when, numbered_images, read_output, read_rejects, run_in,
                                    start_cli, table_tree, text_tree)
from tests.samples import wait_until

Make = Callable[[Path], list]


def _images(raw: Path) -> list:
    numbered_images(raw, 40, classes=3)
    (raw / "c0" / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    (raw / "c1" / "copy.jpg").write_bytes((raw / "c2" / "002.jpg").read_bytes())  # a duplicate, found by the plan
    return [p.relative_to(raw).as_posix() for p in raw.rglob("*.jpg")]


def _table(raw: Path) -> list:
    return table_tree(raw, rows=2000)


def _text(raw: Path) -> list:
    return text_tree(raw, lines=2000)


KINDS: dict[str, tuple[Make, tuple[str, ...]]] = {
    "images": (_images, ("--range-size", "4KiB", "--samples-per-shard", "3")),
    "table": (_table, ("--dedup-on", "url", "--required", "id", "--range-size", "6KiB", "--samples-per-shard", "90")),
    "text": (_text, ("--text-unit", "line", "--range-size", "3KiB", "--samples-per-shard", "90")),
    "tokens-bpe": (_text, ("--text-unit", "line", "--range-size", "3KiB", "--samples-per-shard", "90",
                           "--tokenizer", "BPE")),
    "tokens-bytes": (_text, ("--text-unit", "line", "--range-size", "3KiB", "--samples-per-shard", "90",
                             "--tokenizer", "bytes")),
}


def _case(kind: str, raw: Path, bpe_path: Path) -> tuple[list, tuple[str, ...]]:
    """The raw inputs of ``kind`` made under ``raw`` (what a run must account for), and its options."""
    make, options = KINDS[kind]
    return make(raw), tuple(os.fspath(bpe_path) if o == "BPE" else o for o in options)


def _ranges(out: Path) -> int:
    return len({s["name"].split("-")[1] for s in json.loads((out / MANIFEST).read_text())["shards"]})


@pytest.fixture
def bpe_or_none(request: pytest.FixtureRequest) -> Path:
    """The BPE tokenizer.json for the token kinds (tokenizers installed), else a path never read."""
    if "tokens-bpe" in request.node.name:
        return request.getfixturevalue("bpe_path")
    return Path("unused")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_same_bytes_for_1_2_and_3_writers(cli, tmp_path, kind, bpe_or_none):
    """Every file of OUT the same bytes (the manifest too, but for its command line) whatever --workers says;
    duplicates across ranges (first in plan order wins) are found as one process finds them."""
    inputs, options = _case(kind, tmp_path / "raw", bpe_or_none)
    outs = {}
    for workers in (1, 2, 3):
        outs[workers] = tmp_path / f"w{workers}"
        res = cli("shard", tmp_path / "raw", outs[workers], *options, "--workers", workers, "--no-progress")
        assert res.rc == 0, res.text
    assert _ranges(outs[1]) >= 4
    for workers in (2, 3):
        assert_same_output(outs[workers], outs[1], drop_manifest_keys=("command",))
    output = read_output(outs[3]) if not kind.startswith("tokens") else None
    if output is not None:
        assert_accounted(output, inputs)
    duplicates = [r for r in read_rejects(outs[3]) if r["reason"] == "duplicate"]
    assert duplicates or kind == "images"


def test_the_summary_says_how_the_cores_are_shared(cli, tmp_path):
    _images(tmp_path / "raw")
    res = cli("shard", tmp_path / "raw", tmp_path / "out", *KINDS["images"][1], "--workers", "2", "--json")
    assert res.rc == 0, res.text
    split = json.loads(res.out)["workers"]
    assert split["writers"] == 2 and split["threads_per_writer"] == 1 and "one process per core" in split["why"]
    _text(tmp_path / "text")
    res = cli("shard", tmp_path / "text", tmp_path / "out-text", *KINDS["text"][1], "--workers", "3")
    assert res.rc == 0 and "3 writer processes, cleaning inline" in res.out, res.text
    res = cli("shard", tmp_path / "text", tmp_path / "out-one", "--text-unit", "line", "--workers", "3")
    assert res.rc == 0 and "1 process, cleaning inline" in res.out and "one range" in res.out, res.text


def test_one_progress_line_for_every_writer(tmp_path):
    from dataprep.cli import build_parser, config_from_args
    from dataprep.commands.shard import shard
    from dataprep.engines.progress import ProgressLine

    _images(tmp_path / "raw")
    args = build_parser().parse_args(["shard", os.fspath(tmp_path / "raw"), os.fspath(tmp_path / "out"),
                                      *KINDS["images"][1], "--workers", "2"])
    stream = io.StringIO()
    summary = shard(config_from_args(args), argv=("dataprep",), progress=ProgressLine(None, stream=stream,
                                                                                      enabled=True))
    ranges = _ranges(tmp_path / "out")
    line = stream.getvalue().split("\r")[-1]
    assert stream.getvalue().count("\n") == 1, stream.getvalue()  # one line, redrawn in place
    assert f"ranges {ranges}/{ranges}" in line and f"{summary.totals.inputs_seen} inputs" in line, line
    assert "samples/s" in line and "MB/s" in line and f"rejects {summary.totals.rejected}" in line, line


# ----------------------------------------------------------------------------- kills, Ctrl-C, dead writers


def _files_at_least(out: Path, n: int) -> Callable[[], bool]:
    """Ready once OUT holds ``n`` files of the run (shards, sidecars, the state folder's range files)."""
    def ready() -> bool:
        try:
            return len(list(out.iterdir())) + len(list((out / STATE_DIR / "ranges").iterdir())) >= n
        except FileNotFoundError:
            return False
    return ready


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["images", "table", "text", "tokens-bpe", "tokens-bytes"])
def test_kill9_at_random_points_then_resume_is_byte_identical(cli, tmp_path, kind, bpe_or_none):
    """SIGKILL to the whole run (parent and writers: a power cut) at points drawn at random (seeded), twice in a
    row, then a rerun: the bytes of an uninterrupted run, every input accounted for once."""
    inputs, options = _case(kind, tmp_path / "raw", bpe_or_none)
    args = ("shard", "../raw", "out", *options, "--workers", "2", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    files = len(list((ref / "out").iterdir())) + 2 * _ranges(ref / "out")
    rng = random.Random(f"kill9-{kind}")
    for point in sorted(rng.sample(range(1, files), 2)):
        kill_when(args, run, _files_at_least(run / "out", point))
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    if not kind.startswith("tokens"):
        assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
@pytest.mark.parametrize("resume_workers", ["1", "3"])
def test_killed_with_two_writers_resumes_with_another_number(cli, tmp_path, resume_workers):
    """--workers does not shape the output: a run killed on 2 writers resumes on 1 (in one process) or 3."""
    inputs, options = _case("table", tmp_path / "raw", Path("unused"))
    args = ("shard", "../raw", "out", *options, "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, (*args, "--workers", "1"), ref).rc == 0
    assert kill_when((*args, "--workers", "2"), run, lambda: any((run / "out").glob("shard-*")))
    res = run_in(cli, (*args, "--workers", resume_workers), run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out", drop_manifest_keys=("command",))
    assert_accounted(read_output(run / "out"), inputs)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _photos_with_reference(cli, tmp_path: Path) -> tuple[tuple[str, ...], Path, Path]:
    """Photos sharded on 2 writers into ``ref/out`` uninterrupted: (the command's args, ref, the folder to run in)."""
    _images(tmp_path / "raw")
    args = ("shard", "../raw", "out", *KINDS["images"][1], "--workers", "2", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    return args, ref, run


@pytest.mark.slow
def test_ctrl_c_stops_every_writer_and_leaves_a_resumable_state(cli, tmp_path):
    args, ref, run = _photos_with_reference(cli, tmp_path)
    proc = start_cli(args, run)
    try:
        assert wait_until(lambda: len(list((run / "out").glob("shard-*"))) >= 3, proc=proc)
        writers = _children(proc.pid)
        assert len(writers) == 2, writers
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "rerun the same command to resume" in err, err
        assert "Traceback" not in err, err
        assert wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in writers), timeout_s=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (run / "out" / MANIFEST).exists()
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")


@pytest.mark.slow
def test_a_writer_killed_once_is_retried_and_the_output_is_the_same(cli, tmp_path):
    """SIGKILL one writer process (as the OOM killer might) while it writes: its range runs again, from its last
    complete shard, and the run ends as an uninterrupted one."""
    args, ref, run = _photos_with_reference(cli, tmp_path)
    proc = start_cli(args, run)
    try:
        assert wait_until(lambda: len(list((run / "out").glob("shard-*"))) >= 2, proc=proc)
        os.kill(sorted(_children(proc.pid))[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 0, err
    assert "died (killed by signal 9); running it again" in err, err
    assert_same_output(run / "out", ref / "out")


def _die_writing_range_1(env: object, job: object, send: object) -> object:
    """local_tasks.run_job, except that writing range 1 kills its process every time (exit status 9)."""
    from dataprep.engines import local_tasks

    if isinstance(job, local_tasks.WriteJob) and job.place.range == 1:
        os._exit(9)
    return local_tasks.RUN_JOB(env, job, send)


def test_a_writer_that_always_dies_fails_the_run_naming_its_range(cli, tmp_path, monkeypatch):
    from dataprep.engines import local_tasks

    inputs, options = _case("text", tmp_path / "raw", Path("unused"))
    monkeypatch.setattr(local_tasks, "RUN_JOB", local_tasks.run_job, raising=False)
    monkeypatch.setattr(local_tasks, "run_job", _die_writing_range_1)  # writers are forked: they inherit it
    out = tmp_path / "out"
    res = cli("shard", tmp_path / "raw", out, *options, "--workers", "2")
    assert res.rc == 1, res.text
    assert "the writer process of range 1 (its input a.txt" in res.err and "died 2 times (exit status 9)" in res.err
    assert "rerun the same command to resume" in res.err and not (out / MANIFEST).exists()
    monkeypatch.setattr(local_tasks, "run_job", local_tasks.RUN_JOB)
    assert cli("shard", tmp_path / "raw", out, *options, "--workers", "2").rc == 0
    assert cli("shard", tmp_path / "raw", tmp_path / "ref", *options, "--workers", "1").rc == 0
    assert_same_output(out, tmp_path / "ref", drop_manifest_keys=("command",))
    assert_accounted(read_output(out), inputs)


def test_a_decoder_crash_in_a_writer_is_a_worker_crash_reject(cli, tmp_path, monkeypatch):
    """An input whose cleaning kills its process (a crashing decoder) is cleaned again alone: a worker_crash
    reject, the range goes on from its last complete shard, and OUT is the same bytes on 2 or 3 writers."""
    _images(tmp_path / "raw")
    victim = "c1/010.jpg"
    crash_on(monkeypatch, victim, 11)
    options = (*KINDS["images"][1], "--no-progress")
    res = cli("shard", tmp_path / "raw", tmp_path / "two", *options, "--workers", "2")
    assert res.rc == 0, res.text
    rejects = {r["source"]: r for r in read_rejects(tmp_path / "two")}
    assert rejects[victim]["reason"] == "worker_crash" and "exit status 11" in rejects[victim]["detail"]
    res = cli("shard", tmp_path / "raw", tmp_path / "three", *options, "--workers", "3")
    assert res.rc == 0, res.text
    assert_same_output(tmp_path / "three", tmp_path / "two", drop_manifest_keys=("command",))


# ----------------------------------------------------------------------------- start methods, memory

_WITH_START_METHOD = """
import multiprocessing, sys
multiprocessing.set_start_method(sys.argv[1], force=True)
from dataprep.cli import main
sys.exit(main(["shard", *sys.argv[2:]]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
@pytest.mark.parametrize("kind", ["images", "tokens-bpe"])
def test_writers_started_by_forkserver_or_spawn_write_the_same_bytes(cli, tmp_path, method, kind, bpe_or_none):
    _, options = _case(kind, tmp_path / "raw", bpe_or_none)
    assert cli("shard", tmp_path / "raw", tmp_path / "ref", *options, "--workers", "1").rc == 0
    done = subprocess.run([sys.executable, "-c", _WITH_START_METHOD, method, os.fspath(tmp_path / "raw"),
                           os.fspath(tmp_path / "out"), *options, "--workers", "2", "--no-progress"],
                          capture_output=True, text=True, cwd=REPO, timeout=300, preexec_fn=default_sigint)
    assert done.returncode == 0, done.stderr
    assert "2 writer processes" in done.stdout, done.stdout
    assert_same_output(tmp_path / "out", tmp_path / "ref", drop_manifest_keys=("command",))


# VmHWM of each writer (read by the writer itself when a job ends) and of the parent, as test_memory.py reads it.
_PEAK_RSS_SCRIPT = """
import os, sys
from dataprep.engines import local_tasks

def vm_hwm_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

real = local_tasks.run_job
def run_job(env, job, send):
    try:
        return real(env, job, send)
    finally:
        with open(os.path.join(sys.argv[3], f"writer-{os.getpid()}"), "w") as f:
            f.write(str(vm_hwm_kib()))
local_tasks.run_job = run_job

from dataprep.cli import main
status = main(["shard", sys.argv[1], sys.argv[2], "--workers", "2", "--no-progress", *sys.argv[4:]])
print(status, max(int(open(os.path.join(sys.argv[3], n)).read()) for n in os.listdir(sys.argv[3])), vm_hwm_kib())
"""


def _peak_rss_kib(raw: Path, out: Path, *options: str) -> tuple[int, int]:
    """Peak RSS (KiB, VmHWM) of the largest writer process and of the ``dataprep shard`` process."""
    peaks = out.with_name(out.name + "-peaks")
    peaks.mkdir()
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}  # a repeatable peak (test_memory.py says why)
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS_SCRIPT, os.fspath(raw), os.fspath(out), os.fspath(peaks),
                           *options], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert done.returncode == 0 and done.stdout, done.stderr
    status, writer, parent = map(int, done.stdout.splitlines()[-1].split())
    assert status == 0, done.stderr
    return writer, parent


def _lines(root: Path, count: int) -> Path:
    root.mkdir(parents=True)
    with open(root / "corpus.txt", "w") as f:
        for i in range(count):
            f.write(f"line {i} {i * 7919 % 100003}\n")
    return root


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS (VmHWM) from Linux /proc")
def test_peak_memory_of_each_writer_does_not_grow_with_the_data(tmp_path):
    """4x the lines (4x the records through every writer, spilled and grouped) must not raise the peak RSS of a
    writer or of the parent by more than a few MiB: memory is bounded per writer, by its range."""
    options = ("--text-unit", "line", "--range-size", "1MiB", "--shard-size", "4MiB")
    small = _peak_rss_kib(_lines(tmp_path / "small", 100_000), tmp_path / "out-small", *options)
    large = _peak_rss_kib(_lines(tmp_path / "large", 400_000), tmp_path / "out-large", *options)
    for name, a, b in (("largest writer", small[0], large[0]), ("parent", small[1], large[1])):
        assert (b - a) * 1024 < 12 * 2**20, f"peak RSS of the {name} grew from {a} to {b} KiB"


def test_a_run_of_writers_leaves_no_process_behind(cli, tmp_path):
    _images(tmp_path / "raw")
    before = set(_children(os.getpid()))
    assert cli("shard", tmp_path / "raw", tmp_path / "out", *KINDS["images"][1], "--workers", "3").rc == 0
    time.sleep(0.05)
    assert set(_children(os.getpid())) <= before
