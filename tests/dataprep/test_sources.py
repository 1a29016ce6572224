from __future__ import annotations

import os
import re

import pytest
from PIL import Image

from dataprep.errors import UsageError
from dataprep.records import RawRecord, Reject
from dataprep.sources import KeyAssigner, Layout, detect_layout, media_records, safe_key

SAFE = re.compile(r"^[^./][^./]*$")


@pytest.mark.parametrize("stem", ["a/0001", "../x", ".hidden/y", "a.b.c/d.e", "sp ace/ü", "x" * 300, "bad\udcffname", ""])
def test_safe_key_is_webdataset_safe(stem):
    key = safe_key(stem)
    assert SAFE.match(key), key
    assert len(key.encode("utf-8", "surrogateescape")) <= 96
    assert ".." not in key and "/" not in key


def test_key_assigner_resolves_collisions_deterministically():
    a, b = KeyAssigner(), KeyAssigner()
    keys_a = [a.assign(s) for s in ("x/y_z", "x_y/z", "x__y_z")]
    keys_b = [b.assign(s) for s in ("x/y_z", "x_y/z", "x__y_z")]
    assert keys_a == keys_b
    assert len(set(keys_a)) == 3


def _touch_image(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8)).save(path)


def test_detect_layouts(tmp_path):
    _touch_image(tmp_path / "folder" / "cat" / "1.jpg")
    assert detect_layout(tmp_path / "folder") is Layout.IMAGE_FOLDER
    _touch_image(tmp_path / "grouped" / "a" / "b" / "1.jpg")
    assert detect_layout(tmp_path / "grouped") is Layout.GROUPED
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "t.csv").write_text("a\n1\n")
    (tmp_path / "tables" / "u.jsonl").write_text('{"a": 1}\n')
    assert detect_layout(tmp_path / "tables") is Layout.TABLE
    assert detect_layout(tmp_path / "tables" / "t.csv") is Layout.TABLE
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.txt").write_text("hello")
    assert detect_layout(tmp_path / "text") is Layout.TEXT
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no files"):
        detect_layout(tmp_path / "empty")


def test_image_folder_groups_sidecars_and_splits_twin_images(tmp_path):
    _touch_image(tmp_path / "cat" / "1.jpg")
    (tmp_path / "cat" / "1.txt").write_text("a cat")
    _touch_image(tmp_path / "cat" / "2.jpg")
    _touch_image(tmp_path / "cat" / "2.png")
    records = [r for r in media_records(tmp_path, Layout.IMAGE_FOLDER) if isinstance(r, RawRecord)]
    assert [sorted(r.files) for r in records] == [["jpg", "txt"], ["jpg"], ["png"]]
    assert {r.label for r in records} == {"cat"}
    assert len({r.key for r in records}) == 3


def test_symlink_leaving_raw_is_a_reject(tmp_path):
    raw = tmp_path / "raw" / "cat"
    _touch_image(tmp_path / "elsewhere.jpg")
    raw.mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere.jpg", raw / "x.jpg")
    items = list(media_records(tmp_path / "raw", Layout.IMAGE_FOLDER))
    assert isinstance(items[0], Reject) and items[0].reason == "symlink_outside"
    items = list(media_records(tmp_path / "raw", Layout.IMAGE_FOLDER, follow_symlinks=True))
    assert isinstance(items[0], RawRecord)
