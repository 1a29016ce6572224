"""End to end: raw trees -> `dataprep shard` -> shards, index sidecars, manifest, rejects."""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from dataprep.cli import main
from dataprep.index import read_index
from dataprep.manifest import read_manifest
from tests.samples import tar_samples

SAFE_KEY = re.compile(r"^[^./][^./]*$")


def shard_cli(*args: object) -> int:
    return main(["shard", *[os.fspath(a) if isinstance(a, Path) else str(a) for a in args]])


def rejects(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]


def test_image_folder_accounting_and_rejects(synthetic, image_tree, tmp_path):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--shard-size", "1MB", "--workers", "2") == 0
    manifest = read_manifest(out)
    totals = manifest.totals
    assert totals.inputs_seen == totals.samples_kept + totals.rejected
    samples = tar_samples(out)
    assert len(samples) == totals.samples_kept == sum(s.num_samples for s in manifest.shards)
    assert len(manifest.shards) > 1
    # every broken file the generator planted is rejected with the expected reason
    by_source = {r["source"]: r["reason"] for r in rejects(out)}
    assert len(by_source) == totals.rejected
    for rel, reason in synthetic.broken.items():
        rel_in_tree = rel.split("/", 1)[1] if rel.startswith("images/") else rel
        if reason == "duplicate":  # which of two equal files is the duplicate depends on their names
            continue
        assert by_source.get(rel_in_tree) == reason, f"{rel} expected rejected as {reason}; rejects: {by_source}"
    assert Counter(by_source.values()) == Counter(totals.rejected_by_reason)
    assert "duplicate" in totals.rejected_by_reason
    # label map sorted by class name, and every sample's cls within it
    assert list(manifest.label_map) == sorted(manifest.label_map)
    for key, fields in samples.items():
        assert SAFE_KEY.match(key), key
        assert int(fields["cls"]) in manifest.label_map.values()
        meta = json.loads(fields["json"])
        assert "__source__" in meta
        image = Image.open(io.BytesIO(fields.get("jpg") or fields["png"]))
        image.load()
        assert image.mode == "RGB"


def test_classes_are_mixed_within_shards(image_tree, tmp_path):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--samples-per-shard", "20", "--workers", "1") == 0
    first = read_manifest(out).shards[0]
    labels = {int(f["cls"]) for k, f in tar_samples(out).items()
              if k in set(read_index(out / first.index).keys())}
    assert len(labels) > 1
    sorted_out = tmp_path / "sorted"
    assert shard_cli(image_tree, sorted_out, "--samples-per-shard", "20", "--no-shuffle", "--workers", "1") == 0
    keys = read_index(sorted_out / read_manifest(sorted_out).shards[0].index).keys()
    assert keys == sorted(keys)


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


def test_rerun_is_a_no_op_and_other_command_is_refused(image_tree, tmp_path, capsys):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--workers", "1") == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert shard_cli(image_tree, out, "--workers", "1") == 0
    assert "already complete" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert shard_cli(image_tree, out, "--workers", "1", "--seed", "7") == 2
    assert "--overwrite" in capsys.readouterr().err
    assert shard_cli(image_tree, out, "--workers", "1", "--seed", "7", "--overwrite") == 0
    assert read_manifest(out).options["seed"] == 7


def test_usage_errors_exit_2(tmp_path, capsys):
    assert shard_cli(tmp_path / "missing", tmp_path / "out") == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        shard_cli(tmp_path, tmp_path / "out", "--shard-size", "lots")
    assert exc.value.code == 2
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.jpg").write_bytes(b"")
    assert shard_cli(tmp_path / "raw", tmp_path / "raw" / "out") == 2


def test_reject_budget_fails_without_manifest_and_a_rerun_with_more_budget_finishes(image_tree, tmp_path, capsys):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--workers", "1", "--max-reject-fraction", "0.01") == 1
    assert "max-reject-fraction" in capsys.readouterr().err
    assert not (out / "manifest.json").exists()
    stopped = (out / "rejects.jsonl").read_bytes()
    assert shard_cli(image_tree, out, "--workers", "1", "--max-reject-fraction", "0.9") == 0
    assert b"\0" not in (out / "rejects.jsonl").read_bytes()
    assert (out / "rejects.jsonl").read_bytes() == stopped
    assert len(rejects(out)) == read_manifest(out).totals.rejected
    assert main(["verify", os.fspath(out)]) == 0


def test_resize_short_and_parquet_images(image_tree, tmp_path):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--workers", "1", "--resize-short", "64", "--format", "parquet") == 0
    manifest = read_manifest(out)
    table = pq.read_table(out / manifest.shards[0].name)
    assert {"__key__", "jpg", "cls", "json"} <= set(table.column_names)
    for data in table.column("jpg").to_pylist()[:10]:
        if data is not None:
            assert min(Image.open(io.BytesIO(data)).size) == 64


def test_symlinks_and_odd_names(image_tree, tmp_path):
    outside = tmp_path / "outside.jpg"
    src = next(image_tree.glob("*/*.jpg"))
    outside.write_bytes(src.read_bytes()[:-10] + b"\x00" * 9 + b"\xd9")  # distinct bytes, still a JPEG
    cls_dir = next(p for p in image_tree.iterdir() if p.is_dir())
    (cls_dir / "link.jpg").symlink_to(outside)
    odd = os.fsencode(cls_dir) + b"/odd \xff name.jpg"
    Image.new("RGB", (64, 48), (10, 200, 30)).save(odd.decode("utf-8", "surrogateescape"), "JPEG")
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--workers", "1") == 0
    reasons = {r["source"]: r["reason"] for r in rejects(out)}
    assert reasons[f"{cls_dir.name}/link.jpg"] == "symlink_outside"
    sources = {json.loads(f["json"])["__source__"] for f in tar_samples(out).values()}
    assert any("odd" in s and "name.jpg" in s for s in sources)
    followed = tmp_path / "followed"
    assert shard_cli(image_tree, followed, "--workers", "1", "--follow-symlinks") == 0
    assert "symlink_outside" not in read_manifest(followed).totals.rejected_by_reason


def test_grouped_layout(tmp_path):
    raw = tmp_path / "raw" / "a"
    raw.mkdir(parents=True)
    for i in range(3):
        Image.new("RGB", (40, 40), (i * 50, 0, 0)).save(raw / f"{i:04d}.jpg")
        (raw / f"{i:04d}.txt").write_text(f"caption {i}")
        (raw / f"{i:04d}.json").write_text(json.dumps({"id": i}))
    (raw / "0009.txt").write_text("orphan caption")
    out = tmp_path / "out"
    assert shard_cli(tmp_path / "raw", out, "--workers", "1", "--layout", "grouped") == 0
    samples = tar_samples(out)
    assert len(samples) == 3
    for fields in samples.values():
        assert set(fields) == {"jpg", "txt", "json"}
        assert json.loads(fields["json"])["id"] in (0, 1, 2)
    assert [r["reason"] for r in rejects(out)] == ["no_media"]


def test_tables_to_parquet(synthetic, tmp_path):
    out = tmp_path / "out"
    assert shard_cli(synthetic.root / "tables", out, "--workers", "2") == 0
    manifest = read_manifest(out)
    assert manifest.format == "parquet" and manifest.layout == "table"
    table = pq.read_table(out / manifest.shards[0].name)
    assert table.schema.names == [f["name"] for f in manifest.schema]
    assert manifest.totals.samples_kept == sum(pq.read_metadata(out / s.name).num_rows for s in manifest.shards)
    assert manifest.totals.inputs_seen == manifest.totals.samples_kept + manifest.totals.rejected

    def expected(with_duplicates: bool) -> dict[tuple[str, int], str]:
        # the generator counts file lines (CSV header = line 1); rejects count data rows
        return {(f, line - 1 if f.endswith(".csv") else line): reason
                for (f, line), reason in synthetic.table_rejects.items() if with_duplicates or reason != "duplicate"}

    assert {(r["source"], r["row"]): r["reason"] for r in rejects(out)} == expected(False)
    deduped = tmp_path / "dedup"
    assert shard_cli(synthetic.root / "tables", deduped, "--workers", "1", "--dedup-on", "id") == 0
    assert {(r["source"], r["row"]): r["reason"] for r in rejects(deduped)} == expected(True)


def test_text_lines(synthetic, tmp_path):
    out = tmp_path / "out"
    assert shard_cli(synthetic.root / "text", out, "--workers", "1", "--text-unit", "line") == 0
    manifest = read_manifest(out)
    texts = [t for s in manifest.shards for t in pq.read_table(out / s.name).column("text").to_pylist()]
    assert len(texts) == len(set(texts)) == manifest.totals.samples_kept
    reasons = manifest.totals.rejected_by_reason
    assert reasons.get("empty_text", 0) >= 1 and reasons.get("duplicate", 0) >= 1


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
    deadline = time.monotonic() + 10
    while _processes_in(cwd) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _processes_in(cwd), "worker processes outlived their killed parent"


def test_resume_after_kill_is_byte_identical(image_tree, tmp_path):
    args = ["../images", "out", "--shard-size", "300KB", "--workers", "2"]
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


def test_verify_and_info_cli(image_tree, tmp_path, capsys):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--workers", "1", "--shard-size", "1MB") == 0
    assert main(["verify", os.fspath(out)]) == 0
    assert main(["info", os.fspath(out), "--json"]) == 0
    capsys.readouterr()
    shard = out / read_manifest(out).shards[1].name
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert main(["verify", os.fspath(out)]) == 1
    assert shard.name in capsys.readouterr().out


def test_bad_label_unreadable_and_unsupported_inputs(tmp_path):
    raw = tmp_path / "raw"
    (raw / "cat").mkdir(parents=True)
    Image.new("RGB", (40, 40), (200, 10, 10)).save(raw / "cat" / "a.jpg")
    Image.new("RGB", (40, 40), (10, 200, 10)).save(raw / "loose.jpg")  # no class folder
    (raw / "cat" / "gone.jpg").symlink_to(raw / "cat" / "missing.jpg")  # dangling, inside RAW
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1", "--layout", "image-folder") == 0
    reasons = {r["source"]: r["reason"] for r in rejects(out)}
    assert reasons == {"loose.jpg": "bad_label", "cat/gone.jpg": "unreadable"}
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "t.csv").write_text("id,name\n1,a\n2,b\n")
    (tables / "README.md").write_text("about these tables")
    out = tmp_path / "tables-out"
    assert shard_cli(tables, out, "--workers", "1", "--layout", "table") == 0
    assert [(r["source"], r["reason"]) for r in rejects(out)] == [("README.md", "unsupported")]
    assert read_manifest(out).totals.samples_kept == 2


def _plan_peak_bytes(raw: Path, spill: Path, dirs: int, per_dir: int) -> int:
    import tracemalloc

    from dataprep.config import ShardConfig
    from dataprep.plan import make_plan
    from dataprep.sources import Layout

    for c in range(dirs):
        (raw / f"c{c:03d}").mkdir(parents=True, exist_ok=True)
        for i in range(per_dir):
            (raw / f"c{c:03d}" / f"{i:04d}.jpg").write_bytes(b"%d/%d" % (c, i) * (1 + i % 7))  # distinct bytes
    spill.mkdir(exist_ok=True)
    tracemalloc.start()
    plan = make_plan(ShardConfig(raw=raw, out=raw.parent / "out"), Layout.IMAGE_FOLDER, "test", spill)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(plan) == dirs * per_dir
    return peak


def test_plan_memory_per_input_is_small(tmp_path):
    """Planned inputs are spilled to disk: memory grows by ~100 bytes per input (numpy
    offsets/sizes/order and the set of keys), not by a RawRecord (~525 bytes) each."""
    _plan_peak_bytes(tmp_path / "warm", tmp_path / "spill0", 1, 5)  # lazy imports out of the way
    small = _plan_peak_bytes(tmp_path / "small", tmp_path / "spill1", 20, 50)
    large = _plan_peak_bytes(tmp_path / "large", tmp_path / "spill2", 80, 50)
    per_input = (large - small) / 3000
    assert per_input < 250, per_input


def _crash_on_marked_input(ctx, item):
    """clean_item, except that the marked raw input kills its process, as a crashing decoder
    would (with a marker file set: only the first time, as the OOM killer might)."""
    from dataprep import pipeline
    from dataprep.records import RawRecord

    if isinstance(item, RawRecord) and item.source == os.environ["SHARDFEED_TEST_CRASH_ON"]:
        marker = os.environ.get("SHARDFEED_TEST_CRASHED_ONCE")
        if marker is None or not Path(marker).exists():
            if marker is not None:
                Path(marker).touch()
            os._exit(int(os.environ["SHARDFEED_TEST_CRASH_STATUS"]))
    return pipeline.CLEAN_ITEM(ctx, item)


def _crash_on(monkeypatch, victim: str, status: int, once_marker: Path | None = None) -> None:
    from dataprep import pipeline

    monkeypatch.setenv("SHARDFEED_TEST_CRASH_ON", victim)
    monkeypatch.setenv("SHARDFEED_TEST_CRASH_STATUS", str(status))
    if once_marker is not None:
        monkeypatch.setenv("SHARDFEED_TEST_CRASHED_ONCE", os.fspath(once_marker))
    monkeypatch.setattr(pipeline, "CLEAN_ITEM", pipeline.clean_item, raising=False)
    monkeypatch.setattr(pipeline, "clean_item", _crash_on_marked_input)


def test_input_that_crashes_its_worker_is_rejected_and_the_run_goes_on(image_tree, tmp_path, monkeypatch, caplog):
    from dataprep import pipeline

    victim = sorted(image_tree.glob("*/*.jpg"))[7].relative_to(image_tree).as_posix()
    _crash_on(monkeypatch, victim, 11)
    crashed = tmp_path / "crashed"
    with caplog.at_level(logging.WARNING, logger="dataprep.pipeline"):
        assert shard_cli(image_tree, crashed, "--workers", "2", "--shard-size", "300KB") == 0
    assert f"{victim}: cleaning it alone killed the worker process (exit status 11); rejected (worker_crash)" in caplog.text
    monkeypatch.setattr(pipeline, "clean_item", pipeline.CLEAN_ITEM)
    clean = tmp_path / "clean"
    assert shard_cli(image_tree, clean, "--workers", "2", "--shard-size", "300KB") == 0
    reasons = {r["source"]: r for r in rejects(crashed)}
    assert reasons[victim]["reason"] == "worker_crash" and "exit status 11" in reasons[victim]["detail"]
    a, b = read_manifest(crashed).totals, read_manifest(clean).totals
    assert a.inputs_seen == b.inputs_seen and a.samples_kept == b.samples_kept - 1
    assert set(tar_samples(clean)) - set(tar_samples(crashed)) == {k for k, f in tar_samples(clean).items()
                                                                   if json.loads(f["json"])["__source__"] == victim}


def test_crash_that_does_not_recur_alone_fails_the_run_and_a_rerun_resumes(image_tree, tmp_path, monkeypatch, capsys):
    victim = sorted(image_tree.glob("*/*.jpg"))[7].relative_to(image_tree).as_posix()
    _crash_on(monkeypatch, victim, 9, once_marker=tmp_path / "crashed-once")  # cleaning it again alone works
    out, clean = tmp_path / "out", tmp_path / "clean"
    args = ("--workers", "2", "--shard-size", "300KB")
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
    cmd = [sys.executable, "-m", "dataprep.cli", "shard", "../images", "out", "--shard-size", "300KB", "--workers", "2"]
    (tmp_path / "run").mkdir()
    proc = subprocess.Popen(cmd, cwd=tmp_path / "run", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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
    from dataprep.writers import tar

    real_put = tar._OpenShard.put

    def put_until_full(self, chunk):
        if self.name.endswith("000003.tar"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_put(self, chunk)

    monkeypatch.setattr(tar._OpenShard, "put", put_until_full)
    out = tmp_path / "out"
    args = ("--workers", "2", "--shard-size", "300KB")
    assert shard_cli(image_tree, out, *args) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and ".shard-00000-000003.tar.tmp" in err and "while writing sample" in err, err
    assert not (out / "manifest.json").exists() and not (out / ".shard-00000-000003.tar.tmp").exists()
    assert (out / "shard-00000-000002.tar").exists()  # completed shards stay
    monkeypatch.setattr(tar._OpenShard, "put", real_put)
    assert shard_cli(image_tree, out, *args) == 0
    assert main(["verify", os.fspath(out)]) == 0


# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork+exec (a child of pytest reports pytest's
# peak), and RUSAGE_CHILDREN of the forked writing child starts from its parent's. The writing
# child reads its own VmHWM when its write loop ends (``_Run.execute``, which runs in the child).
_PEAK_RSS_SCRIPT = """
import sys
from dataprep import pipeline

def vm_hwm_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

real_execute = pipeline._Run.execute
def execute(self):
    try:
        return real_execute(self)
    finally:
        with open(sys.argv[3], "w") as f:
            f.write(str(vm_hwm_kib()))
pipeline._Run.execute = execute

from dataprep.cli import main
status = main(["shard", sys.argv[1], sys.argv[2], "--workers", "2", "--shard-size", "8MB", "--no-progress"])
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
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS_SCRIPT, os.fspath(raw), os.fspath(out), os.fspath(peak_file)],
                          capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2])
    status, child, own = map(int, done.stdout.splitlines()[-1].split())
    assert status == 0, done.stderr
    return child, own


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS (VmHWM) from Linux /proc")
def test_peak_memory_does_not_grow_with_the_dataset(image_tree, tmp_path):
    """4x the inputs (4x the bytes through the cleaning threads and the write loop) must not
    raise the peak RSS of the writing child or of the parent by more than a few MiB.

    Can fail: with every cleaned sample kept in a list in the writing child (``_Run._consume``
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
