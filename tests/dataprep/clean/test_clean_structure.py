"""JPEG marker walk and PNG chunk walk: what they accept, and TRUNCATED vs CORRUPT."""

from __future__ import annotations

import pytest
from PIL import Image

from dataprep.clean.structure import jpeg_structure_problem, png_structure_problem
from dataprep.inputs.records import RejectReason
from tests.samples import photo_jpeg, photo_pixels
from tests.samples import encode


def reason(problem: tuple[RejectReason, str] | None) -> RejectReason | None:
    return None if problem is None else problem[0]


def test_valid_jpegs_pass() -> None:
    data = photo_jpeg(64, 96)
    assert jpeg_structure_problem(data) is None
    assert jpeg_structure_problem(data + b"trailing camera data") is None
    assert jpeg_structure_problem(encode(Image.fromarray(photo_pixels(64, 96)), "JPEG", progressive=True)) is None
    restarts = encode(Image.fromarray(photo_pixels(64, 96)), "JPEG", restart_marker_blocks=1)
    assert jpeg_structure_problem(restarts) is None


@pytest.mark.parametrize("cut", [3, 4, 100, 0.5, -2])
def test_cut_jpeg_is_truncated(cut: float) -> None:
    data = photo_jpeg(64, 96)
    end = int(len(data) * cut) if isinstance(cut, float) else cut % len(data)
    problem = jpeg_structure_problem(data[:end])
    assert reason(problem) is RejectReason.TRUNCATED and problem is not None and f"byte {end}" in problem[1]


def test_damaged_markers_are_corrupt() -> None:
    data = photo_jpeg(64, 96)
    mid = (data.index(b"\xff\xda") + len(data)) // 2
    junk_after_segment = data[:mid] + b"\xff\xc4\x00\x04zzjunk" + data[mid + 10 :]
    assert reason(jpeg_structure_problem(junk_after_segment)) is RejectReason.CORRUPT
    # A bogus length sends the walk past the end of data that does end in EOI: not a cut file.
    overlong = data[:mid] + b"\xff\xc0\xff\xf0" + data[mid + 4 :]
    assert reason(jpeg_structure_problem(overlong)) is RejectReason.CORRUPT
    assert reason(jpeg_structure_problem(b"\xff\xd8\xff\xd9")) is RejectReason.CORRUPT  # EOI before any scan


def test_png_chunks() -> None:
    data = encode(Image.fromarray(photo_pixels(64, 96)), "PNG")
    assert png_structure_problem(data) is None
    idat = data.index(b"IDAT")
    flipped = data[: idat + 20] + bytes([data[idat + 20] ^ 1]) + data[idat + 21 :]
    problem = png_structure_problem(flipped)
    assert reason(problem) is RejectReason.CORRUPT and problem is not None and "b'IDAT'" in problem[1]
    assert reason(png_structure_problem(data[:-12])) is RejectReason.TRUNCATED  # no IEND
    assert reason(png_structure_problem(data[: idat + 50])) is RejectReason.TRUNCATED
