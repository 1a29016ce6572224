"""`dataprep shard --engine ray`: same bytes as --engine local, on a real local Ray cluster (no mocks).

One cluster of two nodes (two raylets on this machine, 1 CPU each) serves the module and is
shut down at its end. Its workers run a
setup hook that, when ``crash.json`` exists in the module's folder, makes cleaning the
named input kill its process, as a crashing decoder would (the local runs get the same
through ``monkeypatch``, since they fork this process).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dataprep.errors import FormatError
from dataprep.formats.manifest import read_manifest
from dataprep.plan.checkpoint import Checkpoint, load_checkpoint
from tests.dataprep.helpers import (REPO, STATE_DIR, assert_accounted, assert_same_output, crash_on, kill_when,
                                    numbered_images, read_output, read_rejects, shard_cli, table_tree)
from tests.samples import wait_until

ray = pytest.importorskip("ray")

CRASH_ENV = "SHARDFEED_TEST_RAY_CRASH_FILE"


def _crashing_clean_item(ctx, item):
    """clean_item, except that the input named in the crash file kills its process (exit status 11)."""
    from dataprep.engines import write_loop
    from dataprep.inputs.records import RawRecord

    crash = Path(os.environ.get(CRASH_ENV, "/nonexistent"))
    if isinstance(item, RawRecord) and crash.exists() and item.source == json.loads(crash.read_text())["source"]:
        os._exit(11)
    return write_loop.CLEAN_ITEM(ctx, item)


def _install_crash_hook() -> None:
    """Ray worker setup hook: route cleaning through ``_crashing_clean_item``."""
    from dataprep.engines import write_loop

    write_loop.CLEAN_ITEM = write_loop.clean_item
    write_loop.clean_item = _crashing_clean_item


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A Ray cluster of two nodes (two raylets on this machine, 1 CPU each) for this module, this
    process its driver: yields (its address, the crash file path). Shut down at the module's end."""
    from ray import cloudpickle
    from ray.cluster_utils import Cluster

    crash = tmp_path_factory.mktemp("ray") / "crash.json"
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        nodes.add_node(num_cpus=1)
        runtime_env = {"env_vars": {CRASH_ENV: os.fspath(crash)}, "worker_process_setup_hook": _install_crash_hook}
        ray.init(address=nodes.address, logging_level="WARNING", log_to_driver=False, runtime_env=runtime_env)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        yield nodes.address, crash
    finally:
        ray.shutdown()
        nodes.shutdown()


def _images(root: Path, n: int) -> Path:
    numbered_images(root, n, classes=3)
    (root / "c0" / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    (root / "c1" / "copy.jpg").write_bytes((root / "c2" / "002.jpg").read_bytes())  # a duplicate
    return root


def _text_with_repeats(root: Path) -> Path:
    """Lines that repeat lines of earlier ranges, and of the same range."""
    root.mkdir(parents=True)
    lines = [f"line {i % 37}" if i % 5 else f"unique {i}" for i in range(120)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    (root / "b.txt").write_text("\n".join(reversed(lines[:40])) + "\n")
    return root


def _table_with_repeats(root: Path) -> Path:
    root.mkdir(parents=True)
    with open(root / "t.jsonl", "w") as f:
        for i in range(150):
            f.write(json.dumps({"id": i % 41 if i % 3 else 1000 + i, "text": f"row {i}"}) + "\n")
    return root


def _assert_same_output(local: Path, on_ray: Path) -> None:
    """Every file of OUT the same bytes; the manifest too, but for the command line that made it."""
    assert not (on_ray / STATE_DIR).exists() and (on_ray / "rejects.jsonl").exists()
    commands = [json.loads((out / "manifest.json").read_bytes())["command"] for out in (local, on_ray)]
    assert commands[0] != commands[1]
    assert_same_output(on_ray, local, drop_manifest_keys=("command",))


CASES = {
    "text": (_text_with_repeats, ["--text-unit", "line", "--range-size", "300B", "--samples-per-shard", "9"]),
    "table": (_table_with_repeats, ["--dedup-on", "id", "--range-size", "1KiB", "--samples-per-shard", "16"]),
}


@pytest.mark.parametrize("case", ["text", "table"])
def test_ray_writes_the_bytes_of_a_local_run_and_dedups_across_ranges(cluster, tmp_path, case):
    """Duplicates (first in plan order wins) are found across ranges that run in any order."""
    make, options = CASES[case]
    raw = make(tmp_path / "raw")
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    assert shard_cli(raw, local, *options, "--workers", "2") == 0
    assert shard_cli(raw, on_ray, *options, "--engine", "ray") == 0
    _assert_same_output(local, on_ray)
    shards = read_manifest(on_ray).shards
    assert len({s.name.split("-")[1] for s in shards}) >= 4  # several ranges
    dups = [json.loads(line) for line in (on_ray / "rejects.jsonl").read_text().splitlines()]
    dups = [r for r in dups if r["reason"] == "duplicate"]
    assert len(dups) == (99 if case == "text" else 59)


TOKEN_CASES = {
    "text": (_text_with_repeats, ["--text-unit", "line", "--range-size", "300B", "--samples-per-shard", "9"]),
    "table": (_table_with_repeats, ["--range-size", "1KiB", "--samples-per-shard", "16"]),
}


@pytest.mark.parametrize("tokenizer", ["bpe", "bytes"])
@pytest.mark.parametrize("case", ["text", "table"])
def test_ray_token_shards_are_the_bytes_of_a_local_run(cluster, tmp_path, bpe_path, case, tokenizer):
    """Each task gets the driver's tokenizer pickled and tokenizes on one thread: the bytes of a local run on
    two writer processes, and Megatron reads them."""
    from tests.dataprep.token_samples import megatron_documents

    pytest.importorskip("megatron.core.datasets.indexed_dataset")
    make, options = TOKEN_CASES[case]
    raw = make(tmp_path / "raw")
    options = [*options, "--tokenizer", os.fspath(bpe_path) if tokenizer == "bpe" else "bytes"]
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    assert shard_cli(raw, local, *options, "--workers", "2") == 0
    assert shard_cli(raw, on_ray, *options, "--engine", "ray") == 0
    _assert_same_output(local, on_ray)
    manifest = read_manifest(on_ray)
    assert manifest.format == "tokens" and len({s.name.split("-")[1] for s in manifest.shards}) >= 4
    assert len(megatron_documents(on_ray)) == manifest.totals.samples_kept > 0
    dups = [r for r in read_rejects(on_ray) if r["reason"] == "duplicate"]
    assert len(dups) == (99 if case == "text" else 0)


@pytest.mark.slow
def test_ray_images_match_local_and_report_progress(cluster, tmp_path):
    from dataprep.cli import build_parser, config_from_args
    from dataprep.engines.progress import ProgressLine
    from dataprep.commands.shard import shard

    raw = _images(tmp_path / "raw", 36)
    options = ["--range-size", "3KiB", "--samples-per-shard", "3"]
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    assert shard_cli(raw, local, *options, "--workers", "2") == 0
    stream = io.StringIO()
    args = build_parser().parse_args(["shard", os.fspath(raw), os.fspath(on_ray), *options, "--engine", "ray"])
    progress = ProgressLine(None, stream=stream, enabled=True)
    summary = shard(config_from_args(args), argv=("dataprep",), progress=progress)
    ranges = len({s.name.split("-")[1] for s in read_manifest(on_ray).shards})
    assert ranges >= 4 and summary.totals.samples_kept == 36
    line = stream.getvalue().split("\r")[-1]
    assert f"ranges {ranges}/{ranges}" in line and "samples 36" in line and "rejects 2" in line
    _assert_same_output(local, on_ray)


def test_without_ray_the_engine_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    raw = _text_with_repeats(tmp_path / "raw")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert shard_cli(raw, tmp_path / "out", "--engine", "ray") == 2
    assert "pip install 'shardfeed[ray]'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_address_without_ray_engine_is_a_usage_error(tmp_path, capsys):
    raw = _text_with_repeats(tmp_path / "raw")
    assert shard_cli(raw, tmp_path / "out", "--address", "auto") == 2
    assert "--engine ray" in capsys.readouterr().err


def _task_processes(name: str) -> dict[int, int]:
    """pid -> parent pid of the processes titled ``ray::name`` (a Ray worker running task ``name``,
    and the child it forks to clean and write, which inherits the title)."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if cmdline.startswith(f"ray::{name}".encode()):
            found[int(pid)] = ppid
    return found


def _kill_first(name: str, which: str, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the first Ray worker running task ``name`` (``which`` = "worker"), or the writing
    child such a worker forked (``which`` = "writer")."""
    while not stop.is_set() and not killed:
        found = _task_processes(name)
        victims = [pid for pid, ppid in found.items() if (ppid in found) == (which == "writer")]
        if victims:
            os.kill(victims[0], signal.SIGKILL)
            killed.append(victims[0])
            return
        time.sleep(0.002)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["worker", "writer"])
def test_a_killed_ray_worker_is_retried_and_the_output_is_the_same(cluster, tmp_path, which):
    """SIGKILL a Ray worker process while it writes a range (or its forked writing child, as the
    OOM killer might): Ray runs the task again, and OUT is the bytes of a local run."""
    raw = _images(tmp_path / "raw", 24)
    options = ["--range-size", "3KiB", "--samples-per-shard", "4"]
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    assert shard_cli(raw, local, *options, "--workers", "2") == 0
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_first, args=("write_range", which, killed, stop))
    killer.start()
    try:
        assert shard_cli(raw, on_ray, *options, "--engine", "ray") == 0
    finally:
        stop.set()
        killer.join()
    assert killed, f"no {which} process of a range task was seen running"
    _assert_same_output(local, on_ray)


@pytest.mark.slow
def test_a_decoder_crash_in_a_ray_task_is_a_worker_crash_reject(cluster, tmp_path, monkeypatch):
    _, crash = cluster
    raw = _images(tmp_path / "raw", 18)
    victim = "c1/004.jpg"
    options = ["--range-size", "3KiB", "--samples-per-shard", "4"]
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    crash_on(monkeypatch, victim, 11)
    assert shard_cli(raw, local, *options, "--workers", "2") == 0
    crash.write_text(json.dumps({"source": victim}))
    try:
        assert shard_cli(raw, on_ray, *options, "--engine", "ray") == 0
    finally:
        crash.unlink()
    rejects = {r["source"]: r for r in read_rejects(on_ray)}
    assert rejects[victim]["reason"] == "worker_crash" and "exit status 11" in rejects[victim]["detail"]
    _assert_same_output(local, on_ray)


@pytest.mark.slow
def test_a_killed_driver_resumes_from_the_ranges_completed(cluster, tmp_path):
    address, _ = cluster
    raw = _images(tmp_path / "raw", 60)
    options = ["--range-size", "1500B", "--samples-per-shard", "2"]
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    assert shard_cli(raw, local, *options, "--workers", "2") == 0
    command = [sys.executable, "-m", "dataprep.cli", "shard", os.fspath(raw), os.fspath(on_ray), *options,
               "--engine", "ray", "--address", address]
    driver = subprocess.Popen(command, cwd=REPO, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    done: tuple[int, ...] = ()

    def a_range_is_done() -> bool:  # a range at a time: seen within ~0.1 s
        checkpoint = load_checkpoint(on_ray) if (on_ray / STATE_DIR / "checkpoint.json").exists() else None
        return checkpoint is not None and bool(checkpoint.ranges_done)

    try:
        if wait_until(a_range_is_done, proc=driver):
            os.killpg(driver.pid, signal.SIGKILL)
            checkpoint = load_checkpoint(on_ray)
            done = checkpoint.ranges_done if checkpoint is not None else ()
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        stderr = driver.communicate()[1]
    assert done, f"the driver ended before a range completed: {stderr.decode()[-2000:]}"
    total = len({s.name.split("-")[1] for s in read_manifest(local).shards})
    assert len(done) < total, "every range was done before the kill"
    kept = {p.name: p.stat().st_mtime_ns for p in on_ray.glob(f"shard-{done[0]:05d}-*")}
    assert kept
    assert shard_cli(raw, on_ray, *options, "--engine", "ray") == 0
    assert {p.name: p.stat().st_mtime_ns for p in on_ray.glob(f"shard-{done[0]:05d}-*")} == kept  # not written again
    _assert_same_output(local, on_ray)


# A table of several ranges, a few shards each: a kill lands inside a range.
CROSS = ("--dedup-on", "url", "--required", "id", "--range-size", "6KiB", "--samples-per-shard", "30", "--no-progress")


def _checkpoint_holds(out: Path, test: Callable[[Checkpoint], bool]) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            checkpoint = load_checkpoint(out)
        except FormatError:  # the state folder removed as the run ends
            return False
        return checkpoint is not None and test(checkpoint)
    return ready


def _cross_reference(cli, tmp_path: Path) -> tuple[Path, list, Path]:
    """RAW (a table), its inputs, and the output of an uninterrupted run of it in one process."""
    raw, ref = tmp_path / "raw", tmp_path / "ref"
    inputs = table_tree(raw, rows=2000)
    assert cli("shard", raw, ref, *CROSS, "--workers", "1").rc == 0
    return raw, inputs, ref


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["4", "1"])
def test_a_local_run_killed_by_kill9_finishes_on_ray(cluster, cli, tmp_path, workers):
    """Killed inside a range (writer processes: ranges left open; one process: the range it was in), then finished
    with --engine ray: the ranges completed are kept, the bytes are those of an uninterrupted run."""
    raw, inputs, ref = _cross_reference(cli, tmp_path)
    out = tmp_path / "out"
    begun = _checkpoint_holds(out, lambda c: len(c.shards) >= 3 and (c.range >= 1 or bool(c.ranges_done)))
    assert kill_when(["shard", raw, out, *CROSS, "--workers", workers], tmp_path, begun), "the run ended first"
    before = load_checkpoint(out)
    assert before is not None and (before.is_started or before.open_ranges)
    kept = before.whole_ranges()
    assert kept.ranges_done
    stamps = {s.name: (out / s.name).stat().st_mtime_ns for s in kept.shards}
    assert cli("shard", raw, out, *CROSS, "--engine", "ray").rc == 0
    assert {name: (out / name).stat().st_mtime_ns for name in stamps} == stamps  # not written again
    assert_same_output(out, ref, drop_manifest_keys=("command",))
    assert_accounted(read_output(out), inputs)


@pytest.mark.slow
def test_a_ray_run_killed_by_kill9_finishes_on_writer_processes(cluster, cli, tmp_path):
    address, _ = cluster
    raw, inputs, ref = _cross_reference(cli, tmp_path)
    out = tmp_path / "out"
    a_range_is_done = _checkpoint_holds(out, lambda c: bool(c.ranges_done))
    assert kill_when(["shard", raw, out, *CROSS, "--engine", "ray", "--address", address], tmp_path,
                     a_range_is_done), "the run ended first"
    assert cli("shard", raw, out, *CROSS, "--workers", "4").rc == 0
    assert_same_output(out, ref, drop_manifest_keys=("command",))
    assert_accounted(read_output(out), inputs)


def test_a_node_that_cannot_see_out_is_refused(cluster, tmp_path):
    """The nodes look at one folder, the driver writes another: as if OUT were not shared."""
    from dataprep.errors import UsageError
    from dataprep.engines.ray_engine import RayExecutor
    from dataprep.output.store import LocalStore

    class Diverging(LocalStore):
        def describe(self) -> str:
            return os.fspath(tmp_path / "what-the-nodes-see")

    with RayExecutor(None) as executor:
        executor.check_shared(LocalStore(tmp_path / "shared"))  # a shared OUT passes
        with pytest.raises(UsageError, match=r"cannot see OUT .*what-the-nodes-see.*probe file"):
            executor.check_shared(Diverging(tmp_path / "driver-only"))


def test_an_address_where_nothing_answers_is_refused_before_ray_connects(tmp_path, capsys):
    """Refused by the engine's own check, one connect() to the port (refused at once by a closed port), not
    by ``ray.init``, which waits minutes for a cluster: the message is the check's."""
    import socket

    raw = _text_with_repeats(tmp_path / "raw")
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert shard_cli(raw, tmp_path / "out", "--engine", "ray", "--address", f"127.0.0.1:{port}") == 2
    err = capsys.readouterr().err
    assert f"nothing answers at 127.0.0.1:{port}" in err, err
    assert f"127.0.0.1:{port}" in err and "ray start --head" in err, err
    assert not (tmp_path / "out").exists()


def test_a_driver_stopped_while_finding_duplicates_resumes_to_the_same_bytes(cluster, tmp_path, monkeypatch):
    """Stopped after both duplicate passes but before recording them (one partition's grouping then lost, and
    a range's digests): the rerun does what is missing again and writes the bytes of a local run."""
    from dataprep.engines import range_tasks as ranges
    from dataprep.output.store import LocalStore

    make, options = CASES["text"]
    raw = make(tmp_path / "raw")
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    assert shard_cli(raw, local, *options, "--workers", "1") == 0
    real_write = LocalStore.write_bytes

    def stop_at_dups_done(self, name, data):
        if name == ranges.DUPS_DONE:
            raise KeyboardInterrupt
        real_write(self, name, data)

    monkeypatch.setattr(LocalStore, "write_bytes", stop_at_dups_done)
    assert shard_cli(raw, on_ray, *options, "--engine", "ray") == 130
    monkeypatch.setattr(LocalStore, "write_bytes", real_write)
    state = on_ray / ".dataprep" / "ranges"
    assert len(list(state.glob("digests-*"))) >= 4 and not list(on_ray.glob("*.parquet"))
    assert len(list(state.glob("dups-*.npy"))) == ranges.DIGEST_PARTITIONS
    (state / "dups-03.npy").unlink()  # a partition not grouped when the driver stopped
    (state / "digests-00001.bin").unlink()  # a range's digests not written either
    assert shard_cli(raw, on_ray, *options, "--engine", "ray") == 0
    _assert_same_output(local, on_ray)
