"""Layout detection: stray files tolerated, ambiguous trees refused with the --layout to pass, single files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from dataprep.errors import UsageError
from dataprep.inputs.sources import Layout, LayoutChoice, choose_layout, detect_layout
from tests.dataprep.helpers import files_at
from tests.dataprep.strategies import make_tree, raw_trees


def test_image_folder_with_stray_files_says_what_is_rejected(tmp_path):
    raw = files_at(tmp_path, "cat/1.jpg", "cat/2.JPG", "cat/2.txt", "dog/1.png", "bird/1.webp",
                 "README.md", "LICENSE", ".DS_Store", "cat/.DS_Store", "dog/Thumbs.db", data=b"x")
    choice = choose_layout(raw, None)
    assert choice == LayoutChoice(Layout.IMAGE_FOLDER, choice.reason)
    assert choice.reason.startswith("image-folder: 3 class folders with 4 images; 5 stray files (")
    assert "README.md" in choice.reason and "will be rejected" in choice.reason
    assert detect_layout(raw) is Layout.IMAGE_FOLDER


def test_labels_csv_at_the_root_of_an_image_folder_is_a_stray(tmp_path):
    raw = files_at(tmp_path, "cat/1.jpg", "cat/2.jpg", "dog/1.jpg", "labels.csv", data=b"x")
    choice = choose_layout(raw, None)
    assert choice.layout is Layout.IMAGE_FOLDER and "labels.csv" in choice.reason


def test_grouped_when_images_are_not_one_folder_deep(tmp_path):
    raw = files_at(tmp_path, "a/b/0001.jpg", "a/b/0001.json", "a/b/0001.seg.png", "README", data=b"x")
    choice = choose_layout(raw, None)
    assert choice.layout is Layout.GROUPED
    assert "first dot" in choice.reason and "README" in choice.reason
    flat = files_at(tmp_path / "flat", "0001.jpg", "0001.cls", "0002.jpg", data=b"x")
    assert choose_layout(flat, None).layout is Layout.GROUPED


def test_tables_and_text(tmp_path):
    tables = files_at(tmp_path / "tables", "a.csv", "b.TSV", "c.jsonl", "README.md", "LICENSE", data=b"x")
    choice = choose_layout(tables, None)
    assert choice.layout is Layout.TABLE
    assert choice.reason == ("table: 3 table files (.csv, .jsonl, .tsv); 2 stray files (LICENSE, README.md) "
                             "will be rejected")
    text = files_at(tmp_path / "text", "a.txt", "b.md", "sub/c.TXT", data=b"x")
    assert choose_layout(text, None) == LayoutChoice(Layout.TEXT, "text: 3 text files (.md, .txt)")
    assert choose_layout(files_at(tmp_path / "docs", "README.md", data=b"x"), None).layout is Layout.TEXT


def test_a_tsv_directory_is_a_table(tmp_path):
    """Issue 12 item 8: a .tsv was not detected as a table."""
    assert detect_layout(files_at(tmp_path, "part-0.tsv", "part-1.tsv", data=b"x")) is Layout.TABLE


def test_compressed_tables_and_text_are_what_they_hold(tmp_path):
    """Issue 27: a folder of part-0.jsonl.gz said "no images, tables or text"."""
    parts = files_at(tmp_path / "c4", "en/c4-train.00000.json.gz", "en/c4-train.00001.json.gz", "README.md",
                     data=b"x")
    choice = choose_layout(parts, None)
    assert choice.layout is Layout.TABLE and choice.reason.startswith("table: 2 table files (.json.gz); 1 stray")
    pile = files_at(tmp_path / "pile", "part-0.jsonl.zst", "part-1.JSONL.ZST", "part-2.csv.bz2", data=b"x")
    assert choose_layout(pile, None).reason.startswith("table: 3 table files (.csv.bz2, .jsonl.zst)")
    books = files_at(tmp_path / "books", "a.txt.zst", "b.txt.xz", "c.md", data=b"x")
    assert choose_layout(books, None) == LayoutChoice(Layout.TEXT, "text: 3 text files (.md, .txt.xz, .txt.zst)")
    one = files_at(tmp_path / "one", "part-0.jsonl.gz", data=b"x") / "part-0.jsonl.gz"
    assert choose_layout(one, None).layout is Layout.TABLE
    with pytest.raises(UsageError, match="each also compressed: .gz, .zst, .bz2, .xz"):
        choose_layout(files_at(tmp_path / "archives", "a.tar.gz", "b.gz", data=b"x"), None)


def test_json_is_a_table_alone_and_metadata_beside_images(tmp_path):
    assert detect_layout(files_at(tmp_path / "rows", "a.json", "b.json", data=b"x")) is Layout.TABLE
    # WebDataset-style samples at the root: a caption and a metadata .json per image are no loose tables
    flat = files_at(tmp_path / "flat", *[f"{i:04d}.{ext}" for i in range(3) for ext in ("jpg", "txt", "json")],
                    data=b"x")
    assert choose_layout(flat, None).layout is Layout.GROUPED


@pytest.mark.parametrize(("rels", "options"), [
    (("cat/1.jpg", "dog/2.jpg", "logo.png"), ("--layout image-folder", "--layout grouped")),
    (("cat/1.jpg", "cat/deeper/2.jpg"), ("--layout image-folder", "--layout grouped")),
    (("part0/0001.jpg", "part0/0001.seg.png", "part1/0002.jpg"), ("--layout grouped", "--layout image-folder")),
    (("part0/0001.jpg", "part0/0001.cls"), ("--layout grouped", "--layout image-folder")),
    (("a.csv", "b.txt"), ("--layout table", "--layout text")),
    (("cat/1.jpg", "a.csv", "b.csv"), ("--layout table", "--layout image-folder", "--layout grouped")),
])
def test_ambiguous_trees_are_refused_naming_the_layouts(tmp_path, rels, options):
    raw = files_at(tmp_path, *rels, data=b"x")
    with pytest.raises(UsageError) as err:
        choose_layout(raw, None)
    for option in options:
        assert option in str(err.value)
    assert os.fspath(raw) in str(err.value)


def test_nothing_to_shard_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"no images, tables or text .*a\.wav"):
        choose_layout(files_at(tmp_path / "audio", "a.wav", "b.wav", data=b"x"), None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no files found"):
        choose_layout(tmp_path / "empty", None)
    with pytest.raises(UsageError, match=r"no images, tables or text .*\.DS_Store"):
        choose_layout(files_at(tmp_path / "hidden", ".DS_Store", data=b"x"), None)
    with pytest.raises(UsageError, match="no such file or directory"):
        choose_layout(tmp_path / "missing", None)


@pytest.mark.parametrize(("name", "layout"), [("t.csv", Layout.TABLE), ("t.TSV", Layout.TABLE),
                                              ("t.parquet", Layout.TABLE), ("t.ndjson", Layout.TABLE),
                                              ("a.txt", Layout.TEXT), ("a.md", Layout.TEXT),
                                              ("t.json", Layout.TABLE), ("t.csv.gz", Layout.TABLE),
                                              ("a.txt.bz2", Layout.TEXT)])
def test_single_file(tmp_path, name, layout):
    choice = choose_layout(files_at(tmp_path, name, data=b"x") / name, None)
    assert choice.layout is layout and name.split(".", 1)[1].lower() in choice.reason


@pytest.mark.parametrize("name", ["photo.jpg", "photo.PNG"])
def test_a_single_image_is_refused(tmp_path, name):
    """Issue 12 item 8: a RAW that is one .jpg was treated as text."""
    with pytest.raises(UsageError, match="single image"):
        detect_layout(files_at(tmp_path, name, data=b"x") / name)
    with pytest.raises(UsageError, match="single image"):
        choose_layout(tmp_path / name, Layout.TEXT)


def test_a_single_file_of_unknown_kind_names_the_layout_to_pass(tmp_path):
    path = files_at(tmp_path, "server.log", data=b"x") / "server.log"
    with pytest.raises(UsageError, match="--layout text"):
        choose_layout(path, None)
    assert choose_layout(path, Layout.TEXT) == LayoutChoice(Layout.TEXT, "text: as requested (--layout text)")
    with pytest.raises(UsageError, match=r"--layout table reads .*\.csv"):
        choose_layout(path, Layout.TABLE)
    with pytest.raises(UsageError, match="needs a directory"):
        choose_layout(path, Layout.GROUPED)


def test_requested_layout_is_checked_and_described(tmp_path):
    raw = files_at(tmp_path, "cat/1.jpg", "dog/2.jpg", "logo.png", data=b"x")
    choice = choose_layout(raw, Layout.IMAGE_FOLDER)
    assert choice.layout is Layout.IMAGE_FOLDER
    assert choice.reason.startswith("image-folder (as requested with --layout): 2 class folders with 2 images")
    assert choose_layout(raw, Layout.GROUPED).layout is Layout.GROUPED
    assert choose_layout(raw, "grouped") == choose_layout(raw, Layout.GROUPED)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="--layout 'images': expected one of image-folder, grouped, table, text"):
        choose_layout(raw, "images")  # type: ignore[arg-type]
    # A layout RAW holds nothing of is the user's call, said in the reason (the run then rejects every file).
    assert choose_layout(raw, Layout.TABLE).reason == (
        "table (as requested with --layout): no table files (.csv, .json, .jsonl, .ndjson, .parquet, .tsv) among "
        "3 files; all will be rejected"
    )
    assert "no text files" in choose_layout(raw, Layout.TEXT).reason
    assert "no images" in choose_layout(files_at(tmp_path / "t", "a.csv", data=b"x"), Layout.IMAGE_FOLDER).reason


def test_reason_is_utf8_even_for_undecodable_names(tmp_path):
    raw = files_at(tmp_path, "cat/1.jpg", data=b"x")
    with open(os.fsencode(raw) + b"/notes \xff.bin", "wb") as f:
        f.write(b"x")
    choice = choose_layout(raw, None)
    choice.reason.encode("utf-8")  # goes into the manifest and the plan as UTF-8 JSON
    assert "notes \\xff.bin" in choice.reason


def test_follow_symlinks_is_used_for_detection(tmp_path):
    outside = files_at(tmp_path / "outside", "cat/1.jpg", "dog/1.jpg", data=b"x")
    raw = tmp_path / "raw"
    raw.mkdir()
    os.symlink(outside / "cat", raw / "cat")
    os.symlink(outside / "dog", raw / "dog")
    with pytest.raises(UsageError, match="no files found; 2 entries could not be read"):
        choose_layout(raw, None)
    assert choose_layout(raw, None, follow_symlinks=True).layout is Layout.IMAGE_FOLDER


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=raw_trees)
def test_detection_chooses_or_refuses_with_a_hint_and_never_crashes(entries):
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp)
        make_tree(raw, entries)
        try:
            choice = choose_layout(raw, None)
        except UsageError as err:
            assert "--layout" in str(err) or "no images, tables or text" in str(err), err
        else:
            choice.reason.encode("utf-8")
        for layout in Layout:
            choose_layout(raw, layout).reason.encode("utf-8")
