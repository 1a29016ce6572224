"""5. Stray files, odd names, symlinks and image modes in an image-folder tree."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from tests.dataprep.helpers import (Output, assert_accounted, identities, image_file, image_tree, output_bytes,
                                    png_header_only, read_output, verify_ok, write_text)
from tests.samples import encode


def test_stray_files_at_root_of_image_folder(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 3, "dog": 3})
    write_text(raw / "README.md", "# my photos\n")
    write_text(raw / "LICENSE", "CC-BY\n")
    # same stem, several image formats in one class folder: each its own sample
    image_file(raw / "cat" / "photo.png", color=(1, 100, 1), fmt="PNG")
    image_file(raw / "cat" / "photo.jpg", color=(100, 1, 1))
    image_file(raw / "dog" / "a.b with spaces.jpg", color=(5, 5, 200))
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.manifest["layout"] == "image-folder", output.manifest.get("layout_reason")
    assert "image-folder" in res.out
    assert_accounted(output, [*inputs, "README.md", "LICENSE", "cat/photo.png", "cat/photo.jpg",
                              "dog/a.b with spaces.jpg"])
    kept = {s for s, _ in output.samples}
    assert {"cat/photo.png", "cat/photo.jpg", "dog/a.b with spaces.jpg"} <= kept
    reasons = {r["source"]: r["reason"] for r in output.rejects}
    assert reasons.keys() == {"README.md", "LICENSE"}, reasons


def test_images_at_the_root_and_class_names_that_look_alike(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"a b": 2, "a_b": 2, "A B": 1, "caf\u00e9": 1, "cafe\u0301": 1})
    image_file(raw / "loose.jpg", color=(3, 3, 3))
    res = cli("shard", raw, out, "--workers", "1", "--layout", "image-folder")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, [*inputs, "loose.jpg"])
    assert {r["source"]: r["reason"] for r in output.rejects} == {"loose.jpg": "bad_label"}
    assert sorted(output.manifest["label_map"]) == sorted(["a b", "a_b", "A B", "caf\u00e9", "cafe\u0301"])
    assert sorted(output.manifest["label_map"].values()) == list(range(5))
    label_of = dict(zip((src for src, _ in output.samples), output.labels))
    assert all(label_of[src] == src.split("/")[0] for src in inputs), label_of


def test_case_variants_of_one_name_are_each_accounted(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    for i, name in enumerate(("a.JPG", "a.jpg", "a.Jpg", "A.jpg")):
        image_file(raw / "cat" / name, color=(10 * i, 200, 40))
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.manifest["totals"]["inputs_seen"] == len(inputs) + 4
    assert_accounted(output, [*inputs, "cat/a.JPG", "cat/a.jpg", "cat/a.Jpg", "cat/A.jpg"])
    assert not output.rejects, output.rejects


def test_hidden_files_and_sidecars_without_extension(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    write_text(raw / ".DS_Store", b"\x00\x00\x00\x01Bud1")
    write_text(raw / "cat" / ".DS_Store", b"\x00\x00\x00\x01Bud1")
    image_file(raw / "cat" / "b.jpg", color=(7, 7, 7))
    write_text(raw / "cat" / "b", "sidecar without extension")
    write_text(raw / "cat" / "c._meta", "{}")
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    # hidden files may be rejects or not inputs at all, but never a sample and never twice
    hidden = {(".DS_Store", None), ("cat/.DS_Store", None)}
    assert not hidden & set(output.samples), output.samples
    assert all(identities(output)[h] <= 1 for h in hidden)
    visible = Output(output.manifest, [r for r in output.rejects if (r["source"], r.get("row")) not in hidden],
                     output.samples, output.labels)
    assert_accounted(visible, [*inputs, "cat/b.jpg", "cat/b", "cat/c._meta"])


def test_undecodable_file_and_folder_names(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    braw = os.fsencode(raw)
    bad_file = braw + b"/cat/caf\xe9.jpg"              # latin-1 name: not valid UTF-8
    bad_class = braw + b"/\xe9t\xe9"                   # a class folder whose name is not UTF-8
    bad_ext = braw + b"/dog/x.jp\xff"                  # an extension that is not UTF-8
    os.mkdir(bad_class)
    for path, color in ((bad_file, (1, 2, 250)), (bad_class + b"/one.jpg", (250, 2, 1))):
        with open(path, "wb") as f:
            f.write(encode(Image.new("RGB", (48, 40), color), "JPEG"))
    with open(bad_ext, "wb") as f:
        f.write(b"unknown")
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    names = [os.fsdecode(p[len(braw) + 1:]) for p in (bad_file, bad_class + b"/one.jpg", bad_ext)]
    assert_accounted(output, [*inputs, *names])
    assert len(output.manifest["label_map"]) == 3, output.manifest["label_map"]
    assert verify_ok(cli, out)


def test_follow_symlinks_keeps_the_class_of_the_target(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "zebra": 3})
    os.symlink("zebra", raw / "a_link")               # sorts before zebra
    outside = tmp_path / "elsewhere"
    image_file(outside / "far.jpg", color=(33, 66, 99))
    os.symlink(outside, raw / "extra")
    res = cli("shard", raw, out, "--workers", "1", "--follow-symlinks")
    assert res.rc == 0, res.text
    output = read_output(out)
    got = identities(output)
    assert all(n == 1 for n in got.values()), [k for k, n in got.items() if n > 1]
    label_of = dict(zip((s for s, _ in output.samples), output.labels))
    for i in range(3):
        assert label_of.get(f"zebra/{i:03d}.jpg") == "zebra", (f"zebra/{i:03d}.jpg", label_of)
    assert label_of.get("extra/far.jpg") == "extra", label_of
    assert "zebra" in output.manifest["label_map"]
    for src in inputs:
        assert got[(src, None)] == 1, src


@pytest.mark.parametrize("link", ["to-out", "to-parent-of-raw-and-out"])
def test_follow_symlinks_never_reads_out(cli, tmp_path: Path, link: str) -> None:
    """With --follow-symlinks, a link in RAW that leads to OUT (or to a folder holding OUT) must not make
    dataprep read its own output or state as inputs; the rerun of the finished command is a no-op."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    if link == "to-out":
        os.symlink(out, raw / "cat" / "shards")             # dangling until OUT is made
    else:
        os.symlink(tmp_path, raw / "everything")
    args = ("shard", raw, out, "--workers", "1", "--follow-symlinks", "--layout", "image-folder")
    res = cli(*args)
    assert res.rc == 0, res.text
    output = read_output(out)
    read_back = sorted(src for src, _ in identities(output) if "out/" in src or "shards/" in src)
    assert not read_back, f"dataprep read its own OUT as input: {read_back}"
    for src in inputs:
        assert (src, None) in set(output.samples), src
    first = output_bytes(out)
    res = cli(*args)
    assert res.rc == 0, f"rerun of the finished command: {res.text}"
    assert output_bytes(out) == first


def test_symlink_leaving_raw_without_follow_is_a_reject(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    image_file(tmp_path / "secret" / "s.jpg")
    os.symlink(tmp_path / "secret" / "s.jpg", raw / "cat" / "s.jpg")
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, [*inputs, "cat/s.jpg"])
    assert {r["source"]: r["reason"] for r in output.rejects} == {"cat/s.jpg": "symlink_outside"}


@pytest.mark.parametrize("fmt", ["wds", "parquet"])
def test_grouped_layout_with_bad_sidecars(cli, tmp_path: Path, fmt: str) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_file(raw / "a" / "0001.jpg", color=(1, 2, 3))
    write_text(raw / "a" / "0001.txt", "caption one")
    write_text(raw / "a" / "0001.json", '{"k": 1}')
    image_file(raw / "a" / "0002.jpg", color=(4, 5, 6))
    write_text(raw / "a" / "0002.json", "{bad json")
    write_text(raw / "a" / "0003.txt", "no media here")
    image_file(raw / "b" / "0001.jpg", color=(7, 8, 9))
    write_text(raw / "b" / "0001.cls", "x")                  # not an integer
    image_file(raw / "b" / "0002.png", color=(10, 11, 12), fmt="PNG")
    write_text(raw / "b" / "0002.txt", b"\xff\xfe")          # not UTF-8
    image_file(raw / "b" / "0003.jpg", color=(13, 14, 15))
    write_text(raw / "b" / "0003.cls", "3")
    write_text(raw / "b" / "0003", "a sidecar without extension")
    write_text(raw / "README", "hi")
    res = cli("shard", raw, out, "--workers", "1", "--layout", "grouped", "--format", fmt)
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.manifest["layout"] == "grouped"
    # each sample (files sharing a stem) is one input, named by its image; stray files are their own
    assert_accounted(output, ["a/0001.jpg", "a/0002.jpg", "a/0003.txt", "b/0001.jpg", "b/0002.png", "b/0003.jpg",
                              "b/0003", "README"])
    kept = {src for src, _ in output.samples}
    assert {"a/0001.jpg", "b/0003.jpg"} <= kept, kept


def test_names_that_sanitize_to_one_key_stay_distinct(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    names = ["cat/_x.jpg", "cat_/x.jpg", "cat/a b.jpg", "cat/a_b.jpg", "cat/a.b.jpg", "cat/a?b.jpg", "cat/a__b.jpg",
             "cat/line\nbreak.jpg", "cat/tab\there.jpg", 'cat/quote".jpg', "cat/back\\slash.jpg", "cat/-dash.jpg",
             "cat/\u00e9.jpg", "cat/e\u0301.jpg", "cat/A B.jpg", "cat_/_.jpg", "cat/..jpg.jpg"]
    for i, name in enumerate(names):
        image_file(raw / name, color=(i * 13 % 256, 50, 60))
    for fmt in ("wds", "parquet"):
        res = cli("shard", raw, out / fmt, "--workers", "1", "--format", fmt)
        assert res.rc == 0, res.text
        output = read_output(out / fmt)  # also: every key unique across shards, a peer reads each sample
        got = identities(output)
        for name in names:
            if not Path(name).name.startswith("."):
                assert got[(name, None)] == 1, (name, got)
        assert verify_ok(cli, out / fmt)


def test_special_files_and_symlinks_inside_raw(cli, tmp_path: Path) -> None:
    """A FIFO (opening it would block), a dangling link, a link loop, an empty file, a deeper folder: each
    accounted once, no hang, no traceback."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    os.mkfifo(raw / "cat" / "pipe.jpg")
    os.symlink("nowhere.jpg", raw / "cat" / "dangling.jpg")
    os.symlink("..", raw / "dog" / "loop")
    write_text(raw / "cat" / "empty.jpg", b"")
    image_file(raw / "cat" / "sub.jpg" / "deep.jpg", color=(1, 1, 1))
    (raw / "empty_class").mkdir()
    for extra in ((), ("--follow-symlinks",)):
        res = cli("shard", raw, out, "--workers", "1", "--layout", "image-folder", "--overwrite", *extra)
        assert res.rc == 0, res.text
        output = read_output(out)
        got = identities(output)
        assert all(n == 1 for n in got.values()), [k for k, n in got.items() if n > 1]
        for src in [*inputs, "cat/pipe.jpg", "cat/dangling.jpg", "cat/empty.jpg", "cat/sub.jpg/deep.jpg"]:
            assert got[(src, None)] == 1, (src, sorted(got))
        assert not any(src.startswith("dog/loop/") for src, _ in got), sorted(got)
        reasons = {r["source"]: r["reason"] for r in output.rejects}
        assert reasons["cat/empty.jpg"] == "empty_file" and "cat/pipe.jpg" in reasons, reasons


def test_file_symlink_inside_raw_does_not_relabel_its_target(cli, tmp_path: Path) -> None:
    """`cat/alias.jpg -> ../dog/000.jpg`: the dog photo stays a dog. As with a linked folder, the real file is
    the sample and the link is the duplicate, whichever sorts first."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    os.symlink("../dog/000.jpg", raw / "cat" / "alias.jpg")
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, [*inputs, "cat/alias.jpg"])
    label_of = dict(zip((src for src, _ in output.samples), output.labels))
    assert label_of.get("dog/000.jpg") == "dog", f"dog/000.jpg kept as {label_of.get('dog/000.jpg')!r}; " \
                                                 f"rejects: {output.rejects}"


@pytest.mark.parametrize("extra", [(), ("--resize-short", "32"), ("--format", "parquet"),
                                   ("--format", "parquet", "--row-group-size", "1KiB"), ("--shard-size", "1KiB")],
                         ids=["plain", "resize", "parquet", "parquet-tiny-row-groups", "samples-bigger-than-a-shard"])
def test_every_kept_image_decodes_as_rgb_at_its_recorded_size(cli, tmp_path: Path, extra: tuple[str, ...]) -> None:
    """Gray, palette, RGBA, CMYK, 16-bit, LA, WebP, TIFF, BMP, GIF, an EXIF-rotated JPEG, a truncated JPEG: each
    kept one decodes (as a peer would) to RGB of the width/height its metadata says; the truncated one is a reject."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    (raw / "a").mkdir(parents=True), (raw / "b").mkdir()
    Image.new("L", (64, 50), 100).save(raw / "a" / "gray.png")
    Image.new("P", (64, 50), 3).save(raw / "a" / "pal.png")
    Image.new("RGBA", (64, 50), (255, 0, 0, 128)).save(raw / "a" / "rgba.png")
    Image.new("CMYK", (64, 50), (0, 100, 100, 0)).save(raw / "a" / "cmyk.jpg")
    Image.new("I;16", (64, 50), 30000).save(raw / "b" / "sixteen.png")
    Image.new("LA", (64, 50), (50, 200)).save(raw / "b" / "la.png")
    Image.new("RGB", (64, 50), (1, 2, 3)).save(raw / "b" / "x.webp")
    Image.new("RGB", (64, 50), (1, 2, 4)).save(raw / "b" / "x.tiff")
    Image.new("RGB", (64, 50), (1, 2, 5)).save(raw / "b" / "x.bmp")
    frames = [Image.new("RGB", (64, 50), (i * 50, 0, 0)) for i in range(3)]
    frames[0].save(raw / "b" / "anim.gif", save_all=True, append_images=frames[1:])
    write_text(raw / "b" / "trunc.jpg", encode(Image.new("RGB", (200, 150), (9, 9, 9)), "JPEG")[:-200])
    rot = Image.new("RGB", (80, 40), (0, 200, 0))
    exif = rot.getexif()
    exif[0x0112] = 6  # rotate 90: displayed 40 x 80
    rot.save(raw / "b" / "rot.jpg", exif=exif)
    res = cli("shard", raw, out, "--workers", "2", *extra)
    assert res.rc == 0, res.text
    output = read_output(out)
    assert {r["source"]: r["reason"] for r in output.rejects} == {"b/trunc.jpg": "truncated"}
    assert len(output.samples) == 11
    assert all(shard["num_samples"] > 0 for shard in output.manifest["shards"]), "an empty shard"
    decoded = {}
    for shard in output.manifest["shards"]:
        path = out / shard["name"]
        if path.suffix == ".tar":
            import webdataset as wds
            rows = [(json.loads(x["json"]), x.get("jpg") or x.get("png")) for x in
                    wds.WebDataset(str(path), shardshuffle=False, empty_check=False)]
        else:
            table = pq.read_table(path).to_pylist()
            rows = [(json.loads(r["json"]), r.get("jpg") or r.get("png")) for r in table]
        for meta, data in rows:
            assert data, meta
            img = Image.open(io.BytesIO(data))
            img.load()
            decoded[meta["__source__"]] = (img.mode, img.size, (meta.get("width"), meta.get("height")))
    for src, (mode, size, recorded) in decoded.items():
        assert mode == "RGB" and size == recorded, (src, mode, size, recorded)
        if "--resize-short" in extra:
            assert min(size) == 32, (src, size)
    assert decoded["b/rot.jpg"][1] == ((40, 80) if not extra or extra[0] != "--resize-short" else (32, 64))


def test_json_sidecar_cannot_contradict_the_generated_metadata(cli, tmp_path: Path) -> None:
    """`cat/a.json` saying {"label": "dog", "width": 5, "__source__": ...}: the sample must not carry a label
    that contradicts its cls, a width that is not the image's, or another source (or it is a bad_metadata reject)."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    write_text(raw / "cat" / "000.json", json.dumps({"__source__": "dog/000.jpg", "label": "dog", "width": 5,
                                                     "height": 7, "caption": "a cat"}))
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, inputs)
    if ("cat/000.jpg", None) in set(output.samples):
        import webdataset as wds

        index_to_label = {v: k for k, v in output.manifest["label_map"].items()}
        for shard in output.manifest["shards"]:
            for sample in wds.WebDataset(str(out / shard["name"]), shardshuffle=False, empty_check=False):
                meta = json.loads(sample["json"])
                size = Image.open(io.BytesIO(sample["jpg"])).size
                assert meta["label"] == index_to_label[int(sample["cls"])], meta
                assert (meta["width"], meta["height"]) == size, (meta, size)


def test_pixel_bombs_are_rejected_from_the_header(cli, tmp_path: Path) -> None:
    """Over --max-pixels (default) but under Pillow's own bomb limit, and far over it: too_large, found from the
    header (a decode would take seconds and fail as corrupt)."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2})
    # Headers that claim the pixels, with almost no pixel data (a decompression bomb's shape).
    write_text(raw / "cat" / "big.png", png_header_only(12_000, 12_000, pixel_bytes=100))
    write_text(raw / "cat" / "huge.png", png_header_only(60_000, 60_000, pixel_bytes=100))
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, [*inputs, "cat/big.png", "cat/huge.png"])
    reasons = {r["source"]: r["reason"] for r in output.rejects}
    assert reasons == {"cat/big.png": "too_large", "cat/huge.png": "too_large"}
