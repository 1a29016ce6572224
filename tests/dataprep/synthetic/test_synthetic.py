"""Tests of dataprep.synthetic: determinism, content, declared broken inputs, tables, text, CLI."""

from __future__ import annotations

import csv
import errno
import json
import logging
import os
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps, UnidentifiedImageError

from dataprep.errors import UsageError
from dataprep.inputs.records import RejectReason
from dataprep.synthetic import (
    BROKEN_KINDS,
    ODD_NAME,
    SPECIAL_KINDS,
    TABLE_COLUMNS,
    SyntheticReport,
    SyntheticSpec,
    main,
    make_dataset,
    make_image_tree,
    photo_like,
)

SIDECAR_EXTS = (".txt", ".json")


def tree_bytes(root: Path) -> dict[bytes, bytes]:
    """Every file under ``root``: path relative to root (as bytes, any name) -> contents."""
    files: dict[bytes, bytes] = {}
    top = os.fsencode(root)
    for dirpath, _, names in os.walk(top):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, top)] = f.read()
    return files


def spectrum_slope(grey: np.ndarray) -> float:
    """Slope of log radially averaged power vs log frequency, 0.01..0.25 cycles/pixel."""
    g = grey.astype(np.float64) - grey.mean()
    power = (np.abs(np.fft.rfft2(g)) ** 2).ravel()
    freq = np.hypot(np.fft.fftfreq(g.shape[0])[:, None], np.fft.rfftfreq(g.shape[1])[None, :]).ravel()
    bins = np.digitize(freq, np.geomspace(0.01, 0.25, 12))
    xs = [np.log(freq[bins == b].mean()) for b in range(1, 12)]
    ys = [np.log(power[bins == b].mean()) for b in range(1, 12)]
    return float(np.polyfit(xs, ys, 1)[0])


def load(path: Path) -> Image.Image:
    image = Image.open(path)
    image.load()
    return image


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> SyntheticReport:
    # 16 images: image 0 plain, 1..12 every special kind, 13..15 plain.
    return make_dataset(tmp_path_factory.mktemp("syn") / "out", SyntheticSpec(images=16, classes=4, seed=3))


@pytest.fixture(scope="module")
def plain_tree(tmp_path_factory: pytest.TempPathFactory) -> SyntheticReport:
    return make_image_tree(tmp_path_factory.mktemp("plain") / "images", images=60, classes=3, seed=0, broken=False,
                           sidecars=False)


def plain_jpegs(report: SyntheticReport) -> list[Path]:
    return [p for p in sorted(report.root.rglob("*.jpg"))
            if p.relative_to(report.root).as_posix() not in report.special]


# ----------------------------------------------------------------------------- determinism and counts


def test_same_seed_gives_identical_bytes_and_another_seed_differs(tmp_path: Path) -> None:
    spec = SyntheticSpec(images=14, classes=3, seed=5)
    first = tree_bytes(make_dataset(tmp_path / "a", spec).root)
    second = tree_bytes(make_dataset(tmp_path / "b", spec).root)
    other = tree_bytes(make_dataset(tmp_path / "c", SyntheticSpec(images=14, classes=3, seed=6)).root)
    assert first == second
    assert first.keys() == other.keys()
    changed = [k for k in first if first[k] != other[k]]
    assert os.path.join(b"images", b"class_00", b"img_0000.jpg") in changed
    assert os.path.join(b"tables", b"part-0.csv") in changed
    assert len(changed) > 14


def test_report_counts_match_the_files_on_disk(dataset: SyntheticReport) -> None:
    files = tree_bytes(dataset.root)
    images = [k for k in files if k.startswith(b"images") and not k.endswith((b".txt", b".json"))]
    assert dataset.image_files == 16
    assert len(images) == dataset.image_files + len(dataset.broken)
    assert sorted(dataset.broken.values()) == sorted(str(r) for r in BROKEN_KINDS.values())
    assert dataset.bytes_written == sum(len(v) for v in files.values())
    assert (dataset.table_rows, dataset.bad_table_rows, len(dataset.table_rejects)) == (400, 9, 9)
    assert dataset.text_files == len(list((dataset.root / "text").iterdir())) == 7
    assert sorted(set(dataset.special.values())) == sorted(set(SPECIAL_KINDS))


def test_every_class_folder_holds_images_and_nothing_is_at_the_top(dataset: SyntheticReport) -> None:
    images = dataset.root / "images"
    assert sorted(p.name for p in images.iterdir()) == ["class_00", "class_01", "class_02", "class_03"]
    assert all(p.is_dir() and any(p.iterdir()) for p in images.iterdir())


# ----------------------------------------------------------------------------- image content


def test_sizes_are_imagenet_like_and_average_about_100_kb(plain_tree: SyntheticReport) -> None:
    sizes: dict[str, list[int]] = {"mid": [], "large": [], "small": []}
    for path in plain_jpegs(plain_tree):
        width, height = Image.open(path).size
        group = "large" if (width, height) == (1024, 768) else "small" if (width, height) == (320, 240) else "mid"
        if group == "mid":
            assert 450 <= max(width, height) <= 520 and 0.65 <= min(width, height) / max(width, height) <= 0.82
        sizes[group].append(path.stat().st_size)
    total = sum(len(v) for v in sizes.values())
    assert len(sizes["mid"]) >= 0.6 * total and sizes["large"] and sizes["small"]
    assert 70_000 <= np.mean(sizes["mid"]) <= 140_000


def test_images_decode_and_look_like_photos(plain_tree: SyntheticReport) -> None:
    for path in plain_jpegs(plain_tree)[:20]:
        grey = np.asarray(load(path).convert("L"))
        assert grey.std() > 20, f"{path} is nearly flat"
        assert -3.2 < spectrum_slope(grey) < -1.4, f"{path} spectrum is not ~1/f^2"


def test_spectrum_check_rejects_white_noise() -> None:
    noise = np.random.default_rng(0).integers(0, 256, (240, 320))
    assert spectrum_slope(noise) > -0.5


def test_classes_differ_by_colour(plain_tree: SyntheticReport) -> None:
    paths = plain_jpegs(plain_tree)
    colours = np.array([np.asarray(load(p).convert("RGB").resize((32, 32)),
                                   np.float32).reshape(-1, 3).mean(0) for p in paths])
    labels = np.array([int(p.parent.name.removeprefix("class_")) for p in paths])
    centroids = np.stack([colours[labels == k].mean(0) for k in range(3)])
    predicted = np.argmin(((colours[:, None] - centroids[None]) ** 2).sum(-1), axis=1)
    assert (predicted == labels).mean() >= 0.8


def test_photo_like_shape_dtype_and_validation() -> None:
    rng = np.random.default_rng(1)
    pixels = photo_like(37, 53, rng)
    assert pixels.shape == (37, 53, 3) and pixels.dtype == np.uint8
    assert photo_like(8, 8, rng).shape == (8, 8, 3)
    with pytest.raises(UsageError, match="'height' must be an int >= 1"):
        photo_like(0, 5, rng)


# ----------------------------------------------------------------------------- special variants


def test_special_variants_decode_as_declared(dataset: SyntheticReport) -> None:
    expected_mode = {"png_rgb": "RGB", "png_rgba": "RGBA", "jpeg_gray": "L", "jpeg_cmyk": "CMYK", "png_palette": "P",
                     "odd_name": "RGB", "undecodable_name": "RGB", "jpeg_exif_orientation_6": "RGB"}
    for rel, kind in dataset.special.items():
        image = load(dataset.root / "images" / rel)
        if kind == "png_gray16":
            assert image.mode in ("I;16", "I") and np.asarray(image).max() > 255
        else:
            assert image.mode == expected_mode[kind], rel
        if kind == "png_rgba":
            alpha = np.asarray(image)[..., 3]
            assert alpha.min() < 64 and alpha.max() > 192
        assert os.path.basename(rel).endswith(".png" if kind.startswith("png") else ".jpg")


def test_exif_orientation_6_shows_the_marker_top_left_once_transposed(dataset: SyntheticReport) -> None:
    (rel,) = [r for r, k in dataset.special.items() if k == "jpeg_exif_orientation_6"]
    stored = load(dataset.root / "images" / rel)
    assert stored.getexif()[0x0112] == 6
    shown = ImageOps.exif_transpose(stored)
    assert shown.size == stored.size[::-1]
    corner = np.asarray(shown)[4:28, 4:28].astype(int).mean(axis=(0, 1))
    assert corner[0] > 200 and corner[1] < 60 and corner[2] < 60


def test_odd_and_undecodable_names_are_written(dataset: SyntheticReport) -> None:
    names = {kind: os.path.basename(rel) for rel, kind in dataset.special.items()}
    assert names["odd_name"] == ODD_NAME
    assert b"\xff" in os.fsencode(names["undecodable_name"])


def test_undecodable_name_falls_back_when_the_file_system_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    real_write_bytes = Path.write_bytes

    def refuse_non_utf8(self: Path, data: bytes) -> int:
        if b"\xff" in os.fsencode(self):
            raise OSError(errno.EILSEQ, "Illegal byte sequence", str(self))
        return real_write_bytes(self, data)

    monkeypatch.setattr(Path, "write_bytes", refuse_non_utf8)
    with caplog.at_level(logging.WARNING, logger="dataprep.synthetic"):
        report = make_image_tree(tmp_path / "images", images=10, classes=2, seed=0, broken=False)
    assert "undecodable_name" not in report.special.values()
    assert (tmp_path / "images" / "class_01" / "img_0009.jpg").is_file()
    assert "non-UTF-8 file name" in caplog.text


def test_sidecars_share_the_image_stem(dataset: SyntheticReport, tmp_path: Path) -> None:
    images = dataset.root / "images"
    def of_valid_images(suffix: str) -> list[Path]:
        return [p for p in images.rglob(f"*{suffix}")
                if p.relative_to(images).with_suffix(".jpg").as_posix() not in dataset.broken]

    captions, metadata = of_valid_images(".txt"), of_valid_images(".json")
    assert captions and metadata
    for path in captions:
        assert path.read_text(encoding="utf-8").strip()
        assert any(path.with_suffix(ext).exists() for ext in (".jpg", ".png"))
    for path in metadata:
        assert {"caption_id", "photographer"} <= json.loads(path.read_bytes()).keys()
    bare = make_image_tree(tmp_path / "bare", images=6, classes=2, seed=0, broken=False, sidecars=False)
    assert not [p for p in bare.root.rglob("*") if p.suffix in SIDECAR_EXTS]


# ----------------------------------------------------------------------------- broken inputs


def test_every_broken_file_fails_as_declared(dataset: SyntheticReport) -> None:
    images = dataset.root / "images"
    assert set(dataset.broken.values()) <= {str(r) for r in RejectReason}
    for rel, reason in dataset.broken.items():
        path = images / rel
        if reason == RejectReason.EMPTY_FILE:
            assert path.stat().st_size == 0
        elif reason == RejectReason.TRUNCATED:
            with pytest.raises(OSError, match="truncated"):
                load(path)
        elif reason == RejectReason.CORRUPT:
            with pytest.raises(OSError) as failure:
                load(path)
            assert "truncated" not in str(failure.value)
            assert Image.open(path).size[0] > 0  # the header is fine
        elif reason == RejectReason.NOT_AN_IMAGE:
            with pytest.raises(UnidentifiedImageError):
                Image.open(path)
        elif reason == RejectReason.TOO_SMALL:
            assert min(load(path).size) < 32
        elif reason == RejectReason.DUPLICATE:
            same = [p for p in images.rglob("*.jpg") if p != path and p.read_bytes() == path.read_bytes()]
            assert same and all(p.relative_to(images).as_posix() < rel for p in same)
        else:
            assert reason == RejectReason.BAD_METADATA
            load(path)
            assert_bad_sidecar(path)


def assert_bad_sidecar(image_path: Path) -> None:
    json_path, text_path = image_path.with_suffix(".json"), image_path.with_suffix(".txt")
    if json_path.exists():
        assert not isinstance(json.loads(json_path.read_bytes()), dict)
    else:
        with pytest.raises(UnicodeDecodeError):
            text_path.read_bytes().decode("utf-8")


def test_no_broken_files_without_broken(tmp_path: Path) -> None:
    report = make_image_tree(tmp_path / "images", images=13, classes=2, seed=0, broken=False)
    assert report.broken == {}
    for path in report.root.rglob("*"):
        if path.is_file() and path.suffix not in SIDECAR_EXTS:
            assert min(load(path).size) >= 32


# ----------------------------------------------------------------------------- tables and text


def classify_table_line(name: str, line: bytes, seen_ids: set[int]) -> str | None:
    """The reject reason a strict reader gives one data line, or None when it is clean."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8"
    if name.endswith(".csv"):
        values = next(csv.reader([text]))
        if len(values) != len(TABLE_COLUMNS):
            return "bad_row"
        row: dict[str, object] = dict(zip(TABLE_COLUMNS, values))
        if row["id"] == "":
            return "missing_column"
    else:
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            return "bad_row"
        if set(row) != set(TABLE_COLUMNS):
            return "missing_column"
    try:
        row_id, _ = int(str(row["id"])), float(str(row["score"]))
    except ValueError:
        return "wrong_type"
    if row_id in seen_ids:
        return "duplicate"
    seen_ids.add(row_id)
    return None


def test_tables_hold_exactly_the_declared_bad_rows(dataset: SyntheticReport) -> None:
    found: dict[tuple[str, int], str] = {}
    rows = 0
    for name in ("part-0.csv", "part-1.jsonl"):
        lines = (dataset.root / "tables" / name).read_bytes().splitlines()
        if name.endswith(".csv"):
            assert lines[0].decode() == ",".join(TABLE_COLUMNS)
        first = 2 if name.endswith(".csv") else 1
        seen: set[int] = set()
        for number, line in enumerate(lines[first - 1 :], start=first):
            rows += 1
            if reason := classify_table_line(name, line, seen):
                found[(name, number)] = reason
    assert rows == dataset.table_rows == 400
    assert found == dataset.table_rejects
    for name in ("part-0.csv", "part-1.jsonl"):
        assert {r for (n, _), r in found.items() if n == name} >= {"bad_row", "wrong_type", "missing_column",
                                                                   "invalid_utf8"}
    assert list(found.values()).count("duplicate") == 1


def test_text_files_hold_the_declared_oddities(dataset: SyntheticReport) -> None:
    files = {p.name: p.read_bytes() for p in (dataset.root / "text").iterdir()}
    assert files["blank.txt"] and not files["blank.txt"].strip()
    with pytest.raises(UnicodeDecodeError):
        files["latin1.txt"].decode("utf-8")
    nfc, nfd = files["accents_nfc.txt"].decode(), files["accents_nfd.txt"].decode()
    assert nfc != nfd and unicodedata.normalize("NFC", nfd) == nfc
    paragraphs = [files[n].decode("utf-8") for n in files if n.startswith("para_")]
    assert all(len(text.splitlines()) > 5 for text in paragraphs)
    assert any(len(set(lines)) < len(lines) for lines in ([x for x in t.splitlines() if x] for t in paragraphs))


# ----------------------------------------------------------------------------- spec and CLI


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"images": 0}, "'images' must be an int >= 1 (got 0 that is a int)"),
        ({"images": True}, "'images' must be an int >= 1 (got True that is a bool)"),
        ({"seed": -1}, "'seed' must be an int >= 0"),
        ({"broken": 1}, "'broken' must be a bool (got 1 that is a int)"),
        ({"images": 3, "classes": 4}, "'classes' must be <= 'images'"),
    ],
)
def test_spec_rejects_bad_values(params: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as failure:
        SyntheticSpec(**params)  # type: ignore[arg-type]
    assert message in str(failure.value)


def test_refuses_a_non_empty_output(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("precious")
    with pytest.raises(UsageError, match="not an empty directory"):
        make_dataset(tmp_path, SyntheticSpec(images=2, classes=1))
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_cli_writes_the_tree_and_prints_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "raw"
    assert main([str(out), "--images", "5", "--classes", "2", "--seed", "1", "--no-tables", "--no-text"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1 and "5 images in 2 classes" in printed
    assert sorted(p.name for p in out.iterdir()) == ["images"]
    written = [p for p in (out / "images").rglob("*") if p.is_file() and p.suffix not in SIDECAR_EXTS]
    assert len(written) == 5 + len(BROKEN_KINDS)


def test_cli_reports_usage_errors_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "raw"), "--images", "0"]) == 2
    assert "'images' must be an int >= 1" in capsys.readouterr().err
    assert not (tmp_path / "raw").exists()
