"""A stale attempt at a range (a task of a killed driver still running) never changes the restarted run's output.

Ray is replaced by an executor that runs the range tasks in this process, one after the
other, so that the interleaving of a stale attempt and the live one is set by events,
not by timing: the stale attempt is a thread that runs the same task function.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dataprep.engines.ray_engine
from dataprep.cli import main
from dataprep.engines.range_tasks import ATTEMPTS_DIR, write_range
from dataprep.output.store import LocalStore
from dataprep.formats.parquet import writer as parquet
from tests.dataprep.helpers import STATE_DIR, assert_same_output

pytest.importorskip("ray")  # --engine ray checks that Ray is installed before it runs

OPTIONS = ["--text-unit", "line", "--range-size", "300B", "--samples-per-shard", "9", "--row-group-size", "1B"]
WAIT_S = 20.0


class _Killed(Exception):
    """Raised in the stale attempt to end it, as the kill of its worker would."""


class InlineExecutor:
    """Runs the tasks here, in order; ``before_first_range(fn, task)`` runs before the first range is written."""

    def __init__(self, before_first_range: Callable[[Callable[[Any], Any], Any], None] | None = None,
                 after_ranges: Callable[[], None] | None = None) -> None:
        self.before_first_range = before_first_range
        self.after_ranges = after_ranges

    def __call__(self, address: str | None) -> InlineExecutor:
        return self

    def __enter__(self) -> InlineExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def check_shared(self, store: object) -> None:
        pass

    def map_unordered(self, fn: Callable[[Any], Any], tasks: list[Any]) -> Iterator[Any]:
        for k, task in enumerate(tasks):
            if k == 0 and fn is write_range and self.before_first_range is not None:
                self.before_first_range(fn, task)
            yield fn(task)
        if fn is write_range and self.after_ranges is not None:
            self.after_ranges()


def _text(root: Path) -> Path:
    root.mkdir(parents=True)
    lines = [f"line {i % 37}" if i % 5 else f"unique {i}" for i in range(120)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    return root


def _shard(raw: Path, out: Path, *extra: str) -> int:
    return main(["shard", str(raw), str(out), *OPTIONS, *extra])


def _assert_same_output(a: Path, b: Path) -> None:
    """Every file of OUT the same bytes (no state folder left); the manifest too, but for its command line."""
    assert not (a / STATE_DIR).exists() and not (b / STATE_DIR).exists()
    assert_same_output(b, a, drop_manifest_keys=("command",))


def test_a_stale_attempt_renaming_its_shard_mid_run_changes_nothing(tmp_path, monkeypatch):
    """The stale attempt of range 0 renames its first shard while the live attempt writes that same shard.

    Before attempts had folders of their own, both wrote ``.shard-00000-000000.parquet.tmp``:
    the stale rename published the live attempt's half-written file, whose own rename then failed.
    """
    raw = _text(tmp_path / "raw")
    local, out = tmp_path / "local", tmp_path / "out"
    assert _shard(raw, local) == 0

    stale_ready, go_stale, stale_renamed, end = (threading.Event() for _ in range(4))
    errors: list[BaseException] = []
    real_commit, real_write = parquet.commit_tmp, parquet.ParquetShardWriter.write

    def commit(tmp: Path, final: Path) -> None:
        if threading.current_thread().name != "stale":
            real_commit(tmp, final)
            return
        stale_ready.set()  # its first shard is complete under its temporary name
        assert go_stale.wait(WAIT_S)
        real_commit(tmp, final)
        stale_renamed.set()
        assert end.wait(WAIT_S)
        raise _Killed

    def write(self: parquet.ParquetShardWriter, record: Any) -> Any:
        closed = real_write(self, record)
        shard = self._open
        if threading.current_thread().name != "stale" and stale_ready.is_set() and not go_stale.is_set() \
                and shard is not None and shard.fileobj is not None:
            shard.fileobj.flush()  # the live attempt's first shard is half written under its temporary name
            go_stale.set()
            assert stale_renamed.wait(WAIT_S)
        return closed

    def stale(fn: Callable[[Any], Any], task: Any) -> None:
        try:
            fn(task)
        except _Killed:
            pass
        except BaseException as err:  # noqa: BLE001 (reported by the test)
            errors.append(err)

    threads: list[threading.Thread] = []

    def start_stale(fn: Callable[[Any], Any], task: Any) -> None:
        thread = threading.Thread(target=stale, args=(fn, task), name="stale", daemon=True)
        thread.start()
        threads.append(thread)
        assert stale_ready.wait(WAIT_S)

    monkeypatch.setattr(parquet, "commit_tmp", commit)
    monkeypatch.setattr(parquet.ParquetShardWriter, "write", write)
    monkeypatch.setattr(dataprep.engines.ray_engine, "RayExecutor", InlineExecutor(start_stale))
    try:
        code = _shard(raw, out, "--engine", "ray")
    finally:
        end.set()
        for thread in threads:
            thread.join(WAIT_S)
    assert go_stale.is_set() and stale_renamed.is_set(), "the stale attempt never renamed its shard"
    assert not errors
    assert code == 0
    _assert_same_output(local, out)


def test_leftovers_of_a_stale_attempt_are_removed_on_resume_never_published(tmp_path, monkeypatch):
    """A driver killed after its first range; a stale attempt left a folder of garbage shards and rejects."""
    raw = _text(tmp_path / "raw")
    local, out = tmp_path / "local", tmp_path / "out"
    assert _shard(raw, local) == 0

    class DriverKilled(Exception):
        pass

    class KilledAfterOneRange(InlineExecutor):
        def map_unordered(self, fn: Callable[[Any], Any], tasks: list[Any]) -> Iterator[Any]:
            for task in tasks:
                result = fn(task)
                if fn is write_range:
                    # the stale attempt at the next range, written by a task the killed driver started
                    folder = out / ATTEMPTS_DIR / f"{task.index + 1:05d}-stale"
                    folder.mkdir(parents=True)
                    (folder / f"shard-{task.index + 1:05d}-000000.parquet").write_bytes(b"garbage")
                    (folder / "rejects.jsonl").write_text('{"garbage": 1}\n')
                    yield result
                    raise DriverKilled
                yield result

    monkeypatch.setattr(dataprep.engines.ray_engine, "RayExecutor", KilledAfterOneRange())
    with pytest.raises(DriverKilled):
        _shard(raw, out, "--engine", "ray")
    assert any((out / ATTEMPTS_DIR).iterdir())
    # a writer's unique temporary name left in OUT itself is dataprep's: removed, not refused as foreign
    (out / f".shard-00001-000000.parquet.{'ab' * 16}.tmp").write_bytes(b"half")

    seen: list[list[str]] = []

    def look() -> None:
        seen.append(sorted(p.name for p in (out / ATTEMPTS_DIR).iterdir()))

    monkeypatch.setattr(dataprep.engines.ray_engine, "RayExecutor", InlineExecutor(after_ranges=look))
    assert _shard(raw, out, "--engine", "ray") == 0
    assert seen == [[]]  # removed before the ranges ran; every attempt published was moved out
    _assert_same_output(local, out)


def test_a_second_attempt_at_any_task_writes_only_into_its_own_folder(tmp_path, monkeypatch):
    """An extra attempt (a stale task) at each task of each pass changes nothing but its own folder."""
    raw = _text(tmp_path / "raw")
    local, out = tmp_path / "local", tmp_path / "out"
    assert _shard(raw, local) == 0
    passes: list[str] = []

    def outside_attempts() -> dict[Path, bytes]:
        return {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and ATTEMPTS_DIR not in str(p)}

    class StaleTwins(InlineExecutor):
        def map_unordered(self, fn: Callable[[Any], Any], tasks: list[Any]) -> Iterator[Any]:
            passes.append(fn.__name__)
            for task in tasks:
                before = outside_attempts()
                first, stale = fn(task), fn(task)
                assert first.attempt != stale.attempt
                assert outside_attempts() == before
                own = sorted(p.name for p in (out / stale.attempt).iterdir())
                assert own == sorted(p.name for p in (out / first.attempt).iterdir())
                assert own
                yield first

    monkeypatch.setattr(dataprep.engines.ray_engine, "RayExecutor", StaleTwins())
    assert _shard(raw, out, "--engine", "ray") == 0
    assert passes == ["range_digests", "group_partition", "write_range"]
    _assert_same_output(local, out)


def test_two_writers_of_one_store_name_at_once_each_publish_a_whole_file(tmp_path):
    """A stale task and its rerun writing the same digests file: neither writes into the other's file."""
    store = LocalStore(tmp_path)
    with store.writer(".dataprep/ranges/digests-00000-00.bin") as stale:
        stale.write(b"s" * 10)
        with store.writer(".dataprep/ranges/digests-00000-00.bin") as live:
            live.write(b"l" * 5)
        assert store.read_bytes(".dataprep/ranges/digests-00000-00.bin") == b"l" * 5
        stale.write(b"s" * 10)
    assert store.read_bytes(".dataprep/ranges/digests-00000-00.bin") == b"s" * 20
    assert sorted(p.name for p in (tmp_path / ".dataprep" / "ranges").iterdir()) == ["digests-00000-00.bin"]
