"""Walking RAW: order, the symlink policy, every entry accounted, streaming groups."""

from __future__ import annotations

import os

from dataprep.inputs.names import first_dot_stem, last_dot_stem
from dataprep.inputs.records import Reject
from dataprep.inputs.walk import FileGroup, RawFile, group_files, walk_files
from tests.dataprep.helpers import files_at


def _summary(items):
    return [(i.rel, "file") if isinstance(i, RawFile) else (i.source, str(i.reason)) for i in items]


def test_order_is_the_order_of_path_components(tmp_path):
    """dataprep.inputs.listing merges two listings on this order: sorted names per directory, depth first."""
    raw = files_at(tmp_path, "b.jpg", "a/z.jpg", "a.b/x.jpg", "a-1.jpg", "a/b/c.jpg", "a/a.jpg")
    rels = [i.rel for i in walk_files(raw)]
    assert rels == sorted(rels, key=lambda r: [os.fsencode(p) for p in r.split("/")])
    assert rels == ["a/a.jpg", "a/b/c.jpg", "a/z.jpg", "a-1.jpg", "a.b/x.jpg", "b.jpg"]


def test_special_files_are_rejected_not_skipped(tmp_path):
    raw = files_at(tmp_path, "cat/1.jpg")
    os.mkfifo(raw / "cat" / "pipe.jpg")
    assert _summary(walk_files(raw)) == [("cat/1.jpg", "file"), ("cat/pipe.jpg", "unsupported")]


def test_links_to_directories(tmp_path):
    raw = files_at(tmp_path / "raw", "zebra/1.jpg")
    outside = files_at(tmp_path / "outside", "o/1.jpg")
    os.symlink(raw / "zebra", raw / "a_link")  # inside RAW: the real folder is walked, never the link
    os.symlink(raw, raw / "zebra" / "loop")  # a cycle
    os.symlink(outside / "o", raw / "b_out")
    os.symlink(outside / "o", raw / "c_out")  # a second path to the same outside folder
    assert _summary(walk_files(raw)) == [
        ("a_link", "duplicate"), ("b_out", "symlink_outside"), ("c_out", "symlink_outside"),
        ("zebra/1.jpg", "file"), ("zebra/loop", "duplicate"),
    ]
    assert _summary(walk_files(raw, follow_symlinks=True)) == [
        ("a_link", "duplicate"), ("b_out/1.jpg", "file"), ("c_out", "duplicate"),
        ("zebra/1.jpg", "file"), ("zebra/loop", "duplicate"),
    ]
    details = {i.source: i.detail for i in walk_files(raw, follow_symlinks=True) if isinstance(i, Reject)}
    assert "zebra" in details["a_link"] and "b_out" in details["c_out"]


def test_groups_survive_subdirectories_sorted_between_their_files(tmp_path):
    # 'x.d' (a directory) sorts between x.jpg and x.txt: the two still form one group.
    raw = files_at(tmp_path, "x.jpg", "x.d/y.jpg", "x.txt", "x.seg.png", "w.jpg")
    groups = [g for g in group_files(walk_files(raw), last_dot_stem) if isinstance(g, FileGroup)]
    assert sorted((g.rel_stem, [f.rel for f in g.files]) for g in groups) == [
        ("w", ["w.jpg"]), ("x", ["x.jpg", "x.txt"]), ("x.d/y", ["x.d/y.jpg"]), ("x.seg", ["x.seg.png"]),
    ]
    groups = [g for g in group_files(walk_files(raw), first_dot_stem) if isinstance(g, FileGroup)]
    assert sorted((g.rel_stem, [f.rel for f in g.files]) for g in groups) == [
        ("w", ["w.jpg"]), ("x", ["x.jpg", "x.seg.png", "x.txt"]), ("x.d/y", ["x.d/y.jpg"]),
    ]


def test_groups_are_handed_on_before_the_directory_ends(tmp_path):
    """Memory holds a few open groups, not a directory's listing."""
    raw = files_at(tmp_path, *[f"d/{i:03d}.jpg" for i in range(50)])
    walked: list[object] = []

    def counting():
        for item in walk_files(raw):
            walked.append(item)
            yield item

    held = seen = 0
    for group in group_files(counting(), last_dot_stem):
        assert isinstance(group, FileGroup)
        seen += len(group.files)
        held = max(held, len(walked) - seen)
    assert seen == 50 and held <= 1


def test_a_link_to_a_file_inside_raw_never_takes_its_targets_place(tmp_path):
    """The link sorts first (cat < dog): read through it, it would win the duplicate check and relabel the dog."""
    raw = files_at(tmp_path / "raw", "dog/000.jpg")
    (raw / "cat").mkdir()
    os.symlink("../dog/000.jpg", raw / "cat" / "alias.jpg")
    for follow in (False, True):
        assert _summary(walk_files(raw,
                                   follow_symlinks=follow)) == [("cat/alias.jpg", "duplicate"), ("dog/000.jpg", "file")]
    detail = next(i.detail for i in walk_files(raw) if isinstance(i, Reject))
    assert "dog/000.jpg" in detail
