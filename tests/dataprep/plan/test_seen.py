"""SeenSet: exact set semantics against a dict model, crash and resume semantics, damaged
stores refused by path, and memory that does not grow with the number of digests."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataprep.errors import FormatError, UsageError
from dataprep.plan.seen import SEEN_MANIFEST_NAME, SeenLimits, SeenSet

ROOT = Path(__file__).resolve().parents[3]
# fsync costs milliseconds on a disk and nothing on tmpfs; a SIGKILL (unlike a power cut)
# keeps the page cache, so these semantics are the same on both.
FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
# Tiny limits: a run every 3 digests, merges of 2, fence blocks of 2 records, a Bloom
# filter of 64 bits (mostly "maybe"): every path of the store runs within a few calls.
TINY = SeenLimits(bloom_bits_log2=6, memtable_rows=3, block_rows=2, merge_fanout=2, merge_rows=4)


@pytest.fixture
def fast_path():
    """A fresh folder path on tmpfs where there is one (see FAST_TMP)."""
    with tempfile.TemporaryDirectory(dir=FAST_TMP) as tmp:
        yield Path(tmp)


def digest(i: int, size: int = 16) -> bytes:
    return hashlib.blake2b(i.to_bytes(8, "little"), digest_size=size).digest()


# Digests that share their first 8 bytes (the fence key) in groups, plus the extremes.
POOL = [bytes([g]) * 8 + digest(i)[:8] for g in (0, 7, 255) for i in range(6)] + [digest(i) for i in range(12)]
POOL += [bytes(16), b"\xff" * 16]

OPS = st.lists(st.one_of(
    st.tuples(st.just("first"), st.sampled_from(POOL), st.integers(0, 3)),
    st.tuples(st.just("commit")),
    st.tuples(st.just("truncate"), st.integers(0, 8)),  # how far back from the next position
    st.tuples(st.just("reopen")),
    st.tuples(st.just("resume"), st.integers(0, 8)),
), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, limits=st.sampled_from([TINY, SeenLimits(bloom_bits_log2=12, memtable_rows=1000)]))
def test_behaves_like_a_dict_through_commits_truncates_and_reopens(ops, limits):
    """first/commit/truncate/reopen agree with a dict model: reopening restores the last
    commit exactly, truncate forgets positions >= its argument, positions restart after it."""
    with tempfile.TemporaryDirectory(dir=FAST_TMP) as tmp:
        path = Path(tmp) / "seen"
        model: dict[bytes, int] = {}
        committed: dict[bytes, int] = {}
        position = 0
        store = SeenSet.open(path, limits=limits)
        try:
            for op in ops:
                if op[0] == "first":
                    _, d, step = op
                    position += step
                    expected = model.get(d)
                    assert store.first(d, position) == expected
                    model.setdefault(d, position)
                elif op[0] == "commit":
                    store.commit()
                    committed = dict(model)
                elif op[0] in ("truncate", "resume"):
                    if op[0] == "resume":  # a crash, then a resume from a checkpoint
                        store.close()
                        store = SeenSet.open(path, limits=limits)
                        model = dict(committed)
                    cut = max(0, position + 1 - op[1])
                    store.truncate(cut)
                    model = {d: p for d, p in model.items() if p < cut}
                    position = cut
                else:
                    store.close()
                    store = SeenSet.open(path, limits=limits)
                    model = dict(committed)
                assert len(store) == len(model)
            for d in POOL:  # every answer
                assert store.first(d, 10_000) == model.get(d)
                model.setdefault(d, 10_000)
        finally:
            store.close()


@pytest.mark.parametrize("limits", [TINY, SeenLimits()], ids=["tiny", "default"])
def test_truncate_forgets_its_position_and_keeps_the_one_before(tmp_path, limits):
    with SeenSet.open(tmp_path / "seen", limits=limits) as store:
        for i in range(10):
            store.first(digest(i), i)
        store.truncate(5)
        assert len(store) == 5
        assert store.first(digest(5), 5) is None and store.first(digest(4), 6) == 4


def test_truncate_is_idempotent_and_durable_only_after_commit(tmp_path):
    path = tmp_path / "seen"
    with SeenSet.open(path, limits=TINY) as store:
        for i in range(20):
            assert store.first(digest(i), i) is None
        store.commit()
        store.truncate(8)
        store.truncate(8)
        assert len(store) == 8
        store.truncate(100)
        assert len(store) == 8
    with SeenSet.open(path, limits=TINY) as store:  # the truncate was never committed
        assert len(store) == 20 and store.first(digest(15), 99) == 15
        store.truncate(8)
        store.commit()
    with SeenSet.open(path, limits=TINY) as store:
        store.truncate(8)  # the resume after a crash right after that commit: a no-op
        assert len(store) == 8
        assert [store.first(digest(i), 50 + i) for i in range(10)] == list(range(8)) + [None, None]


def _run_files(path: Path) -> tuple[set[str], set[str]]:
    """(run files on disk, run files the manifest names)."""
    named = {run["file"] for run in json.loads((path / SEEN_MANIFEST_NAME).read_text())["runs"]}
    return {name for name in os.listdir(path) if name.startswith("run-")}, named


def test_answers_the_first_position_across_many_runs_and_keeps_only_named_files(tmp_path):
    """Enough digests for many flushes and merges: every repeat reports its first position,
    and after each commit the folder holds exactly the runs the manifest names."""
    path = tmp_path / "seen"
    with SeenSet.open(path, limits=SeenLimits(memtable_rows=50, block_rows=4, merge_rows=64)) as store:
        for i in range(2000):
            assert store.first(digest(i % 1500), i) == (None if i < 1500 else i % 1500)
            if i % 300 == 299:
                store.commit()
                on_disk, named = _run_files(path)
                assert on_disk == named and named
        assert len(store) == 1500


def test_mark_is_that_of_the_last_commit(tmp_path):
    path = tmp_path / "seen"
    with SeenSet.open(path) as store:
        assert store.mark is None
        store.first(digest(1), 0)
        store.commit(mark=7)
        store.first(digest(2), 8)
        assert store.mark == 7
    with SeenSet.open(path) as store:
        assert store.mark == 7 and len(store) == 1
        store.commit()
    with SeenSet.open(path) as store:
        assert store.mark is None


def test_refuses_a_second_open_of_the_same_store(tmp_path):
    with SeenSet.open(tmp_path / "seen"):
        with pytest.raises(UsageError, match="already open"):
            SeenSet.open(tmp_path / "seen")


def test_refuses_digests_of_another_size_or_type(tmp_path):
    with SeenSet.open(tmp_path / "seen") as store:
        store.first(digest(1), 0)
        store.commit()
    with SeenSet.open(tmp_path / "seen") as store:
        with pytest.raises(ValueError, match=r"20 bytes .*seen.* of 16-byte digests"):
            store.first(digest(2, size=20), 1)
        with pytest.raises(TypeError, match="digest must be bytes"):
            store.first(digest(2).hex(), 1)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="position must be an int >= 0"):
            store.first(digest(2), -1)


def _damage(path: Path, how: str) -> Path:
    """Damage a committed store in one way; return the file the error must name."""
    manifest = path / SEEN_MANIFEST_NAME
    document = json.loads(manifest.read_text())
    run = path / document["runs"][0]["file"]
    if how == "not json":
        manifest.write_bytes(b"\x00garbage")
    elif how == "other format":
        manifest.write_text(json.dumps({"format": "something.else", "version": 1}))
    elif how == "newer version":
        manifest.write_text(json.dumps({**document, "version": 99}))
    elif how == "bad mark":
        manifest.write_text(json.dumps({**document, "mark": "seven"}))
    elif how == "manifest lacks runs":
        manifest.write_text(json.dumps({k: v for k, v in document.items() if k != "runs"}))
    elif how == "run truncated":
        run.write_bytes(run.read_bytes()[:-5])
        return run
    elif how == "run header":
        run.write_bytes(b"NOTOURS!" + run.read_bytes()[8:])
        return run
    elif how == "run missing":
        run.unlink()
        return run
    return manifest


@pytest.mark.parametrize("how", ["not json", "other format", "newer version", "bad mark", "manifest lacks runs",
                                 "run truncated", "run header", "run missing"])
def test_a_damaged_store_is_refused_naming_the_file(tmp_path, how):
    path = tmp_path / "seen"
    with SeenSet.open(path) as store:
        for i in range(10):
            store.first(digest(i), i)
        store.commit()
    culprit = _damage(path, how)
    with pytest.raises(FormatError) as caught:
        SeenSet.open(path)
    assert str(culprit) in str(caught.value) and "hint" in str(caught.value)
    with SeenSet.open(tmp_path / "other") as store:  # the refused open released its lock
        assert len(store) == 0


def test_a_folder_or_file_that_is_not_a_store_is_refused(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("{}")
    with pytest.raises(FormatError, match=r"data: not a seen-set store .*train\.jsonl"):
        SeenSet.open(tmp_path / "data")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FormatError, match="found a file"):
        SeenSet.open(tmp_path / "file")
    assert (tmp_path / "data" / "train.jsonl").read_text() == "{}"


_CHILD = textwrap.dedent("""
    import hashlib, sys
    from dataprep.plan.seen import SeenLimits, SeenSet
    def digest(i):
        return hashlib.blake2b(i.to_bytes(8, "little"), digest_size=16).digest()
    limits = SeenLimits(bloom_bits_log2=10, memtable_rows=7, block_rows=3, merge_fanout=2, merge_rows=5)
    path, batch, commits, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "pause"
    store = SeenSet.open(path, limits=limits)
    for c in range(commits):
        for i in range(c * batch, (c + 1) * batch):
            store.first(digest(i), i)
        if c == 2:
            store.truncate(batch + 1)  # drops committed digests: only the next commit makes it durable
            for i in range(batch + 1, 3 * batch):
                store.first(digest(i), i)
        store.commit()
        print(c, flush=True)
    for i in range(commits * batch, (commits + 5) * batch):  # flushed and merged, never committed
        store.first(digest(i), i)
    print("uncommitted", flush=True)
    if pause:
        sys.stdin.read()
""")


def _spawn(path: Path, batch: int, commits: int, pause: bool) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(path), str(batch), str(commits),
                             "pause" if pause else "run"], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def _assert_state_is_commit(path: Path, batch: int, commits: int) -> None:
    """The store holds exactly the digests of the first ``commits`` commits, at their positions,
    and no run file that its manifest does not name."""
    with SeenSet.open(path) as store:
        assert len(store) == commits * batch
        answers = [store.first(digest(i), 10**6 + i) for i in range((commits + 5) * batch)]
    assert answers == list(range(commits * batch)) + [None] * (5 * batch)
    on_disk, named = _run_files(path)
    assert on_disk == named


def test_sigkill_after_uncommitted_work_reopens_at_the_last_commit(fast_path):
    """Killed after flushing and merging uncommitted runs (and after a truncate that was
    committed): exactly the last commit is seen, and the uncommitted runs' files are removed."""
    path = fast_path / "seen"
    child = _spawn(path, batch=40, commits=4, pause=True)
    try:
        lines = [child.stdout.readline().strip() for _ in range(5)]
        assert lines == ["0", "1", "2", "3", "uncommitted"]
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    on_disk, named = _run_files(path)
    assert on_disk > named  # uncommitted runs left by the kill
    _assert_state_is_commit(path, batch=40, commits=4)


@pytest.mark.parametrize("after_commits", [1, 4, 9])
def test_sigkill_mid_run_leaves_a_whole_commit(fast_path, after_commits):
    """Killed while adding and committing (perhaps inside a commit): the store is one whole
    commit, the last one the child reported or the one it was inside."""
    path = fast_path / "seen"
    child = _spawn(path, batch=300, commits=100, pause=False)
    try:
        for _ in range(after_commits):
            assert child.stdout.readline().strip().isdigit()
    finally:
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
    done = after_commits + sum(line.isdigit() for line in out.split())
    assert done < 100, "the child finished before the kill: make it longer"
    with SeenSet.open(path) as store:
        commits = len(store) // 300
    assert commits in (done, done + 1)
    _assert_state_is_commit(path, batch=300, commits=commits)


_MEMORY_CHILD = textwrap.dedent("""
    import hashlib, sys
    from dataprep.plan.seen import SeenSet
    kind, path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    def peak_bytes():
        # VmHWM: the peak of this program's own memory; ru_maxrss would start at the
        # parent's (Linux keeps the pre-exec peak of the forked copy of pytest).
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    before = peak_bytes()
    store = SeenSet.open(path) if kind == "SeenSet" else set()
    for i in range(count):
        d = hashlib.blake2b(i.to_bytes(8, "little"), digest_size=16).digest()
        if kind == "SeenSet":
            store.first(d, i)
            if i % 200_000 == 199_999:
                store.commit()
        elif d not in store:  # what the pipeline did before SeenSet
            store.add(d)
    print(peak_bytes() - before)
""")
GROWTH_BOUND_BYTES = 96 << 20  # SeenSet: ~55 MiB (32 of them the Bloom filter); a set of 2M digests: ~200 MiB


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS from Linux /proc")
@pytest.mark.parametrize("kind", ["SeenSet", "set"])
def test_peak_memory_for_two_million_digests_is_bounded(tmp_path, kind):
    """Peak RSS growth for 2M distinct digests stays under a bound that the in-memory set the
    pipeline used before exceeds (so the bound can fail)."""
    out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, kind, str(tmp_path / "seen"), "2000000"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    growth = int(out)
    if kind == "SeenSet":
        assert growth < GROWTH_BOUND_BYTES, f"peak RSS grew by {growth / 2**20:.0f} MiB"
    else:
        assert growth > GROWTH_BOUND_BYTES, f"a plain set grew by {growth / 2**20:.0f} MiB: the bound proves nothing"


def test_a_closed_store_refuses_use_instead_of_wiping_itself(tmp_path):
    path = tmp_path / "seen"
    store = SeenSet.open(path)
    store.first(digest(1), 0)
    store.commit()
    store.close()
    store.close()
    for use in (lambda: store.first(digest(2), 1), store.commit, lambda: store.truncate(0)):
        with pytest.raises(UsageError, match="after close"):
            use()
    with SeenSet.open(path) as again:
        assert again.first(digest(1), 5) == 0


@pytest.mark.parametrize("field, value", [("merge_fanout", 1), ("bloom_bits_log2", 40), ("memtable_rows", 0),
                                          ("block_rows", 2.5)])
def test_limits_are_validated_once_naming_the_field(field, value):
    with pytest.raises(UsageError, match=rf"SeenLimits\.{field} must be an int in \[.*\] \(got {value!r}\)"):
        SeenLimits(**{field: value})
