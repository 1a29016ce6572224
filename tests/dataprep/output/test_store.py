"""``LocalStore``, the output store of a run on a shared folder: atomic writes, appends made durable, moves."""

from __future__ import annotations

import pytest

from dataprep.output.store import LocalStore, leaf


def test_writes_are_atomic_and_leave_no_temporary_file(tmp_path):
    store = LocalStore(tmp_path)
    store.write_bytes("a/b.json", b"one")
    with pytest.raises(RuntimeError), store.writer("a/b.json") as f:
        f.write(b"half")
        raise RuntimeError("the writer stops half way")
    assert store.read_bytes("a/b.json") == b"one"
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b.json"]
    assert store.exists("a/b.json") and not store.exists("a/c.json")


def test_appender_appends_or_starts_afresh_and_sync_makes_it_durable(tmp_path):
    store = LocalStore(tmp_path)
    with store.appender("r.jsonl", fresh=True) as f:
        f.write(b"1\n")
        store.sync(f)
    with store.appender("r.jsonl", fresh=False) as f:
        f.write(b"2\n")
    assert store.read_bytes("r.jsonl") == b"1\n2\n"
    with store.appender("r.jsonl", fresh=True) as f:
        f.write(b"3\n")
    assert store.read_bytes("r.jsonl") == b"3\n"


def test_move_renames_within_out_and_publish_of_written_files_changes_nothing(tmp_path):
    store = LocalStore(tmp_path)
    store.write_bytes("attempt/x.tar", b"x")
    store.write_bytes("attempt/x.tar.idx", b"i")
    store.move([("attempt/x.tar", "x.tar"), ("attempt/x.tar.idx", "x.tar.idx")])
    assert store.read_bytes("x.tar") == b"x" and store.read_bytes("x.tar.idx") == b"i"
    assert list((tmp_path / "attempt").iterdir()) == []
    store.publish(["x.tar", "x.tar.idx"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attempt", "x.tar", "x.tar.idx"]
    assert leaf("a/b/c.tar") == "c.tar" and store.local_path() == tmp_path and store.describe() == str(tmp_path)
