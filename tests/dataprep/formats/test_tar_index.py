from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest

from dataprep.errors import FormatError
from dataprep.formats.tar.index import ShardIndex, index_tar, read_index, split_member_name, write_index


def _tar(path, members):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_split_member_name_follows_webdataset():
    assert split_member_name("dir/a_0001.seg.png") == ("dir/a_0001", "seg.png")
    assert split_member_name("k.jpg") == ("k", "jpg")
    assert split_member_name("noext") == ("noext", "")


def test_index_points_at_field_bytes_and_round_trips(tmp_path):
    members = [("a.jpg", b"A" * 1000), ("a.cls", b"1"), ("b.jpg", b"B" * 10), ("c.txt", b"only text"),
               ("x" * 150 + ".cls", b"2")]
    _tar(tmp_path / "s.tar", members)
    index = index_tar(tmp_path / "s.tar")
    data = (tmp_path / "s.tar").read_bytes()
    assert index.keys() == ["a", "b", "c", "x" * 150]
    for key, (field,
              payload) in [("a", ("jpg", b"A" * 1000)), ("c", ("txt", b"only text")), ("x" * 150, ("cls", b"2"))]:
        off, size = index.sample_fields(index.keys().index(key))[field]
        assert data[off : off + size] == payload
    write_index(tmp_path / "s.tar.idx", index)
    again = read_index(tmp_path / "s.tar.idx")
    assert again.keys() == index.keys() and again.fields == index.fields
    for name in ("sample_offset", "sample_size", "field_offset", "field_size"):
        assert np.array_equal(getattr(again, name), getattr(index, name))


def test_corrupt_index_is_reported(tmp_path):
    _tar(tmp_path / "s.tar", [("a.jpg", b"x")])
    blob = index_tar(tmp_path / "s.tar").to_bytes()
    with pytest.raises(FormatError, match="truncated"):
        ShardIndex.from_bytes(blob[:-3], where="s.tar.idx")
    with pytest.raises(FormatError, match="bad magic"):
        ShardIndex.from_bytes(b"garbage" + blob, where="s.tar.idx")
    with pytest.raises(FormatError, match="cannot read"):
        read_index(tmp_path / "missing.idx")


def test_ungrouped_tar_is_refused(tmp_path):
    _tar(tmp_path / "s.tar", [("a.jpg", b"1"), ("b.jpg", b"2"), ("a.cls", b"3")])
    with pytest.raises(FormatError, match="not grouped by key"):
        index_tar(tmp_path / "s.tar")
