from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from dataprep.inputs.names import field_problem
from dataprep.errors import UsageError
from dataprep.inputs.records import RawRecord, Reject
from dataprep.inputs.sources import KeyAssigner, Layout, detect_layout, media_records, safe_key, walk_files
from dataprep.inputs.names import IMAGE_EXTENSIONS
from tests.dataprep.helpers import image_file
from tests.dataprep.strategies import make_tree, raw_trees

SAFE = re.compile(r"^[^./][^./]*$")


@pytest.mark.parametrize("stem", ["a/0001", "../x", ".hidden/y", "a.b.c/d.e", "sp ace/ü", "x" * 300, "bad\udcffname",
                                  ""])
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


def test_key_assigner_never_repeats_a_key_even_for_the_same_stem():
    keys = KeyAssigner()
    assigned = [keys.assign("cat/a.jpg") for _ in range(4)]
    assert len(set(assigned)) == 4
    assert all(SAFE.match(k) for k in assigned)


def test_detect_layouts(tmp_path):
    image_file(tmp_path / "folder" / "cat" / "1.jpg", (8, 8), (0, 0, 0), fmt="PNG")
    assert detect_layout(tmp_path / "folder") is Layout.IMAGE_FOLDER
    image_file(tmp_path / "grouped" / "a" / "b" / "1.jpg", (8, 8), (0, 0, 0), fmt="PNG")
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


def _records(raw, layout, **kw):
    items = list(media_records(raw, layout, **kw))
    return [r for r in items if isinstance(r, RawRecord)], {r.source: r for r in items if isinstance(r, Reject)}


def test_image_folder_groups_sidecars_and_splits_twin_images(tmp_path):
    image_file(tmp_path / "cat" / "1.jpg", (8, 8), (0, 0, 0), fmt="PNG")
    (tmp_path / "cat" / "1.txt").write_text("a cat")
    image_file(tmp_path / "cat" / "2.jpg", (8, 8), (0, 0, 0), fmt="PNG")
    image_file(tmp_path / "cat" / "2.png", (8, 8), (0, 0, 0), fmt="PNG")
    records, rejects = _records(tmp_path, Layout.IMAGE_FOLDER)
    assert [sorted(r.files) for r in records] == [["jpg", "txt"], ["jpg"], ["png"]]
    assert {r.label for r in records} == {"cat"}
    assert len({r.key for r in records}) == 3
    assert not rejects


def test_case_variants_of_one_name_are_three_samples_in_image_folder(tmp_path):
    """Issue 12 item 5: a.JPG, a.Jpg, a.jpg were 2 inputs seen and one lost."""
    for name in ("a.JPG", "a.Jpg", "a.jpg"):
        image_file(tmp_path / "cat" / name, (8, 8), (0, 0, 0), fmt="PNG")
    records, rejects = _records(tmp_path, Layout.IMAGE_FOLDER)
    assert not rejects
    assert sorted(r.source for r in records) == ["cat/a.JPG", "cat/a.Jpg", "cat/a.jpg"]
    names = ("a.JPG", "a.Jpg", "a.jpg")
    assert sorted(r.files["jpg"] for r in records) == sorted(os.fspath(tmp_path / "cat" / n) for n in names)
    assert len({r.key for r in records}) == 3


def test_case_variants_in_grouped_layout_are_rejected_by_name(tmp_path):
    for name in ("a.JPG", "a.Jpg", "a.jpg", "a.txt", "a.TXT"):
        image_file(tmp_path / "x" / "y" / name, (8, 8), (0, 0, 0), fmt="PNG")
    records, rejects = _records(tmp_path, Layout.GROUPED)
    assert [(r.source, sorted(r.files)) for r in records] == [("x/y/a.JPG", ["jpg", "txt"])]
    assert records[0].files["txt"] == os.fspath(tmp_path / "x" / "y" / "a.TXT")  # first in byte order
    assert sorted(rejects) == ["x/y/a.Jpg", "x/y/a.jpg", "x/y/a.txt"]
    assert {r.reason for r in rejects.values()} == {"unsupported"}
    assert "x/y/a.JPG" in rejects["x/y/a.jpg"].detail and "x/y/a.TXT" in rejects["x/y/a.txt"].detail


@pytest.mark.parametrize("layout", [Layout.IMAGE_FOLDER, Layout.GROUPED])
def test_odd_names_become_rejects_naming_the_file(tmp_path, layout):
    """Issue 12 item 4: these names reached the writer as fields '', '_meta', '\\udcff' and ended the run."""
    cat = tmp_path / "cat"
    image_file(cat / "a.jpg", (8, 8), (0, 0, 0), fmt="PNG")
    image_file(cat / "b.jpg", (8, 8), (0, 0, 0), fmt="PNG")
    (cat / "a").write_text("no extension")
    (cat / "b._meta").write_text("reserved field")
    with open(os.fsencode(cat) + b"/a.\xff", "wb") as f:
        f.write(b"undecodable extension")
    (cat / ".DS_Store").write_bytes(b"\0")
    image_file(cat / "a.b with spaces.jpg", (8, 8), (0, 0, 0), fmt="PNG")
    records, rejects = _records(tmp_path, layout)
    undecodable = os.fsdecode(b"cat/a.\xff")
    assert set(rejects) >= {"cat/a", "cat/b._meta", undecodable, "cat/.DS_Store"}
    assert {rejects[s].reason for s in ("cat/a", "cat/b._meta", undecodable, "cat/.DS_Store")} == {"unsupported"}
    assert "no extension" in rejects["cat/a"].detail
    assert "'_meta'" in rejects["cat/b._meta"].detail
    assert "not valid UTF-8" in rejects[undecodable].detail
    for record in records:
        assert all(field_problem(name) is None for name in record.files), record
    if layout is Layout.IMAGE_FOLDER:
        spaced = next(r for r in records if r.source == "cat/a.b with spaces.jpg")
        assert list(spaced.files) == ["jpg"] and spaced.label == "cat"


def test_stray_root_file_does_not_merge_same_stem_images(tmp_path):
    """Issue 12 item 6: a README at the root made the tree 'grouped'; photo.webp and photo.tiff became one sample."""
    image_file(tmp_path / "cat" / "photo.webp", (8, 8), (0, 0, 0), fmt="PNG")
    image_file(tmp_path / "cat" / "photo.tiff", (8, 8), (0, 0, 0), fmt="PNG")
    image_file(tmp_path / "dog" / "1.jpg", (8, 8), (0, 0, 0), fmt="PNG")
    (tmp_path / "README.md").write_text("about this dataset")
    (tmp_path / "LICENSE").write_text("CC-BY")
    layout = detect_layout(tmp_path)
    assert layout is Layout.IMAGE_FOLDER
    records, rejects = _records(tmp_path, layout)
    assert sorted(r.source for r in records) == ["cat/photo.tiff", "cat/photo.webp", "dog/1.jpg"]
    assert all(len(r.files) == 1 for r in records)
    assert {s: r.reason for s, r in rejects.items()} == {"README.md": "unsupported", "LICENSE": "unsupported"}


def test_symlink_leaving_raw_is_a_reject(tmp_path):
    raw = tmp_path / "raw" / "cat"
    image_file(tmp_path / "elsewhere.jpg", (8, 8), (0, 0, 0), fmt="PNG")
    raw.mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere.jpg", raw / "x.jpg")
    items = list(media_records(tmp_path / "raw", Layout.IMAGE_FOLDER))
    assert isinstance(items[0], Reject) and items[0].reason == "symlink_outside"
    items = list(media_records(tmp_path / "raw", Layout.IMAGE_FOLDER, follow_symlinks=True))
    assert isinstance(items[0], RawRecord)


@pytest.mark.parametrize("follow_symlinks", [False, True])
def test_a_link_to_a_class_folder_does_not_rename_the_class(tmp_path, follow_symlinks):
    """Issue 12 item 7: with --follow-symlinks, a_link -> zebra was walked first and zebra skipped as seen."""
    image_file(tmp_path / "zebra" / "z1.jpg", (8, 8), (0, 0, 0), fmt="PNG")
    image_file(tmp_path / "zebra" / "z2.jpg", (8, 8), (0, 0, 0), fmt="PNG")
    os.symlink("zebra", tmp_path / "a_link")
    records, rejects = _records(tmp_path, Layout.IMAGE_FOLDER, follow_symlinks=follow_symlinks)
    assert sorted((r.source, r.label) for r in records) == [("zebra/z1.jpg", "zebra"), ("zebra/z2.jpg", "zebra")]
    assert list(rejects) == ["a_link"]
    assert rejects["a_link"].reason == "duplicate" and "zebra" in rejects["a_link"].detail


def _account(raw: Path, layout: Layout) -> None:
    """Every file walked is in exactly one record or is exactly one reject; keys are unique and safe."""
    walked = list(walk_files(raw))
    rel_of = {f.path: f.rel for f in walked if not isinstance(f, Reject)}
    expected = Counter(f.source if isinstance(f, Reject) else f.rel for f in walked)
    found: Counter[str] = Counter()
    keys = []
    for item in media_records(raw, layout):
        if isinstance(item, Reject):
            found[item.source] += 1
            continue
        keys.append(item.key)
        found.update(rel_of[path] for path in item.files.values())
        assert item.files, item
        assert all(field_problem(name) is None for name in item.files), item
        if layout is Layout.IMAGE_FOLDER:
            assert sum(name in IMAGE_EXTENSIONS for name in item.files) == 1, item
    assert found == expected
    assert len(keys) == len(set(keys))
    assert all(SAFE.match(k) for k in keys)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=raw_trees)
def test_every_file_walked_is_one_record_or_one_reject(entries):
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp)
        make_tree(raw, entries)
        for layout in (Layout.IMAGE_FOLDER, Layout.GROUPED):
            _account(raw, layout)
