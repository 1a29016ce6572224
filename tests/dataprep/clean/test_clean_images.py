"""clean_image: every reject reason with a real file, normalisation, byte-keeping, determinism."""

from __future__ import annotations

import io
import json
import os
import unicodedata
from collections.abc import Callable

import numpy as np
import pytest
from PIL import Image

from dataprep.clean import images
from dataprep.clean.images import clean_image, target_size
from dataprep.clean.options import ImageFormat, ImageOptions
from dataprep.formats.samples import CleanRecord
from dataprep.inputs.records import RawRecord, Reject, RejectReason
from tests.dataprep.helpers import decoded, png_header_only
from tests.samples import photo_jpeg, photo_pixels
from tests.samples import encode

MakeRecord = Callable[..., RawRecord]
SMALL = ImageOptions(min_side=1)
PNG_OUT = ImageOptions(min_side=1, reencode_format=ImageFormat.PNG, background=(0, 255, 0))
needs_simplejpeg = pytest.mark.skipif(images.simplejpeg is None, reason="strict JPEG decoding needs simplejpeg")


@pytest.fixture(params=["simplejpeg", "pillow"])
def jpeg_decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the strict simplejpeg decoder and with the Pillow + marker-check fallback."""
    if request.param == "simplejpeg" and images.simplejpeg is None:
        pytest.skip("simplejpeg is not installed")
    if request.param == "pillow":
        monkeypatch.setattr(images, "simplejpeg", None)
    return str(request.param)


def kept(result: CleanRecord | Reject) -> CleanRecord:
    assert isinstance(result, CleanRecord), result
    return result


def rejected(result: CleanRecord | Reject, reason: RejectReason) -> Reject:
    assert isinstance(result, Reject), result
    assert result.reason is reason, result
    return result


def png_out(raw: RawRecord) -> np.ndarray:
    """uint8 [H, W, 3]: the pixels of ``raw`` cleaned into a (lossless) PNG on a green background."""
    return np.asarray(decoded(kept(clean_image(raw, PNG_OUT, None)).fields["png"]))


def scan_middle(data: bytes) -> int:
    """A byte offset in the middle of the first scan's entropy-coded data."""
    return (data.index(b"\xff\xda") + len(data)) // 2


def with_orientation(image: Image.Image, fmt: str, orientation: int, **params: object) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(image, fmt, exif=exif.tobytes(), **params)


# ----------------------------------------------------------------------------- kept as is


def test_plain_rgb_jpeg_keeps_its_bytes_and_gets_cls_and_json(record: MakeRecord) -> None:
    data = photo_jpeg(64, 96)
    result = kept(clean_image(record({"jpg": data}, label="cat"), ImageOptions(), 3))
    assert result.fields["jpg"] == data
    assert result.fields["cls"] == b"3"
    assert json.loads(result.fields["json"]) == {"__source__": "cat/img.jpg", "label": "cat", "width": 96, "height": 64}
    assert set(result.fields) == {"jpg", "cls", "json"}
    assert (result.key, result.source) == ("cat_img", "cat/img.jpg")


def test_jpeg_with_upright_exif_and_no_needed_resize_keeps_its_bytes(record: MakeRecord) -> None:
    data = with_orientation(Image.fromarray(photo_pixels(64, 96)), "JPEG", 1, quality=90)
    result = kept(clean_image(record({"jpeg": data}), ImageOptions(resize_short=64), None))
    assert result.fields["jpg"] == data  # field named by the encoding, not the input extension
    assert "cls" not in result.fields


def test_cleaning_is_deterministic(record: MakeRecord) -> None:
    raw = record({"png": encode(Image.fromarray(photo_pixels(60, 80)).convert("RGBA"), "PNG")})
    for opts in (ImageOptions(resize_short=40), PNG_OUT):
        first, second = clean_image(raw, opts, 1), clean_image(raw, opts, 1)
        assert kept(first).fields == kept(second).fields


# ----------------------------------------------------------------------------- rejects


def test_missing_file_is_unreadable(record: MakeRecord) -> None:
    raw = record({"jpg": photo_jpeg(64, 96)})
    os.unlink(raw.files["jpg"])
    result = rejected(clean_image(raw, ImageOptions(), None), RejectReason.UNREADABLE)
    assert "No such file" in result.detail and raw.files["jpg"] in result.detail


def test_empty_file(record: MakeRecord) -> None:
    rejected(clean_image(record({"jpg": b""}), ImageOptions(), None), RejectReason.EMPTY_FILE)


def test_text_named_jpg_is_not_an_image(record: MakeRecord) -> None:
    result = rejected(clean_image(record({"jpg": b"hello, I am text\n" * 10}), ImageOptions(), None),
                      RejectReason.NOT_AN_IMAGE)
    assert "68 65 6c 6c" in result.detail  # names the bytes it found


def test_record_without_image_field_has_no_media(record: MakeRecord) -> None:
    result = rejected(clean_image(record({"txt": b"caption"}), ImageOptions(), None), RejectReason.NO_MEDIA)
    assert "txt" in result.detail


@pytest.mark.parametrize("cut", [0.5, 0.9, 0.02])
def test_jpeg_cut_short_is_truncated(record: MakeRecord, jpeg_decoder: str, cut: float) -> None:
    data = photo_jpeg(64, 96)
    rejected(clean_image(record({"jpg": data[: int(len(data) * cut)]}), SMALL, None), RejectReason.TRUNCATED)


@needs_simplejpeg
@pytest.mark.parametrize("damage", ["random", "zeros", "cut_then_eoi"])
def test_damaged_jpeg_scan_that_pillow_accepts_is_corrupt(record: MakeRecord, damage: str) -> None:
    data = photo_jpeg(64, 96, seed=1)
    mid = scan_middle(data)
    if damage == "random":
        broken = data[:mid] + np.random.default_rng(0).integers(0, 256, 200,
                                                                dtype=np.uint8).tobytes() + data[mid + 200 :]
    elif damage == "zeros":
        broken = data[:mid] + bytes(300) + data[mid + 300 :]
    else:
        broken = data[:mid] + b"\xff\xd9"
    decoded(broken)  # Pillow alone sees nothing wrong: that is the point
    result = rejected(clean_image(record({"jpg": broken}), SMALL, None), RejectReason.CORRUPT)
    assert "Corrupt JPEG data" in result.detail  # what libjpeg said


def test_marker_written_into_scan_is_rejected_by_both_decoders(record: MakeRecord, jpeg_decoder: str) -> None:
    data = photo_jpeg(64, 96, seed=2)
    mid = scan_middle(data)
    broken = data[:mid] + b"\xff\xc0\x00\x11" + bytes(13) + data[mid + 17 :]  # a bogus SOF in the scan
    result = clean_image(record({"jpg": broken}), SMALL, None)
    assert isinstance(result, Reject) and result.reason in (RejectReason.CORRUPT, RejectReason.TRUNCATED), result


def test_damaged_png_data_is_corrupt_and_cut_png_truncated(record: MakeRecord) -> None:
    data = encode(Image.fromarray(photo_pixels(64, 96)), "PNG")
    idat = data.index(b"IDAT") + 4
    broken = data[: idat + 40] + bytes(64) + data[idat + 104 :]
    rejected(clean_image(record({"png": broken}), SMALL, None), RejectReason.CORRUPT)
    rejected(clean_image(record({"png": data[: len(data) // 2]}), SMALL, None), RejectReason.TRUNCATED)
    rejected(clean_image(record({"png": data[:-12]}), SMALL, None), RejectReason.TRUNCATED)  # no IEND chunk


def test_cut_webp_is_truncated(record: MakeRecord) -> None:
    data = encode(Image.fromarray(photo_pixels(64, 96)), "WEBP", quality=80)
    rejected(clean_image(record({"webp": data[: len(data) // 2]}), SMALL, None), RejectReason.TRUNCATED)


def test_too_small_uses_the_size_after_exif_orientation(record: MakeRecord) -> None:
    data = with_orientation(Image.fromarray(photo_pixels(40, 100)), "JPEG", 6)
    result = rejected(clean_image(record({"jpg": data}), ImageOptions(min_side=50), None), RejectReason.TOO_SMALL)
    assert "40x100" in result.detail
    rejected(clean_image(record({"jpg": photo_jpeg(8, 8)}), ImageOptions(), None), RejectReason.TOO_SMALL)


def test_pixel_count_is_checked_before_decoding(record: MakeRecord) -> None:
    # The file declares 1000x1000 pixels and holds none: decoding it would say "truncated".
    raw = record({"png": png_header_only(1000, 1000)})
    result = rejected(clean_image(raw, ImageOptions(max_pixels=999_999), None), RejectReason.TOO_LARGE)
    assert "1000x1000" in result.detail
    rejected(clean_image(raw, ImageOptions(), None), RejectReason.CORRUPT)


@pytest.mark.filterwarnings("error")  # Pillow's DecompressionBombWarning must not escape
@pytest.mark.parametrize("side", [10_000, 20_000])  # above Pillow's warning / error thresholds
def test_decompression_bombs_are_too_large(record: MakeRecord, side: int) -> None:
    rejected(clean_image(record({"png": png_header_only(side, side)}), ImageOptions(), None), RejectReason.TOO_LARGE)


# ----------------------------------------------------------------------------- normalisation


def test_cmyk_jpeg_becomes_rgb_with_similar_colours(record: MakeRecord) -> None:
    pixels = photo_pixels(48, 64)
    data = encode(Image.fromarray(pixels).convert("CMYK"), "JPEG", quality=95)
    out = decoded(kept(clean_image(record({"jpg": data}), SMALL, None)).fields["jpg"])
    assert (out.mode, out.size) == ("RGB", (64, 48))
    assert np.abs(np.asarray(out, np.float32).mean((0, 1)) - pixels.mean((0, 1))).max() < 8


def test_grey_jpeg_is_reencoded_as_rgb(record: MakeRecord) -> None:
    data = encode(Image.fromarray(photo_pixels(64, 96)).convert("L"), "JPEG", quality=90)
    result = kept(clean_image(record({"jpg": data}), SMALL, None))
    assert result.fields["jpg"] != data and decoded(result.fields["jpg"]).mode == "RGB"


def test_alpha_is_composited_on_the_background(record: MakeRecord) -> None:
    rgba = np.zeros((40, 40, 4), np.uint8)
    rgba[:, :, 0] = 200
    rgba[:, 20:, 3] = 255  # left half transparent
    out = png_out(record({"png": encode(Image.fromarray(rgba), "PNG")}))
    assert (out[:, :20] == (0, 255, 0)).all() and (out[:, 20:] == (200, 0, 0)).all()


def test_la_png_is_composited(record: MakeRecord) -> None:
    grey = Image.fromarray(np.full((40, 40), 90, np.uint8))
    alpha = Image.fromarray(np.where(np.arange(40) < 10, 0, 255).astype(np.uint8)[None, :].repeat(40, 0))
    out = png_out(record({"png": encode(Image.merge("LA", (grey, alpha)), "PNG")}))
    assert (out[:, :10] == (0, 255, 0)).all() and (out[:, 10:] == 90).all()


def test_palette_png_with_transparency(record: MakeRecord) -> None:
    image = Image.fromarray((np.arange(40)[None, :].repeat(40, 0) >= 20).astype(np.uint8), "P")
    image.putpalette([255, 0, 0, 0, 0, 255])
    out_plain = png_out(record({"png": encode(image, "PNG")}))
    assert (out_plain[:, :20] == (255, 0, 0)).all() and (out_plain[:, 20:] == (0, 0, 255)).all()
    out = png_out(record({"png": encode(image, "PNG", transparency=0)}))
    assert (out[:, :20] == (0, 255, 0)).all() and (out[:, 20:] == (0, 0, 255)).all()


def test_16_bit_grey_png_is_scaled_not_clipped(record: MakeRecord) -> None:
    values = np.array([[0x0100, 0x4000, 0x8080, 0xFF00]], np.uint16).repeat(4, 0)
    source = Image.fromarray(values)
    assert source.mode.startswith("I;16")
    out = png_out(record({"png": encode(source, "PNG")}))
    assert out.shape == (4, 4, 3) and (out[0, :, 0] == [1, 64, 128, 255]).all()


def test_gif_and_webp_and_bmp_and_tiff_are_reencoded_as_jpeg(record: MakeRecord) -> None:
    image = Image.fromarray(photo_pixels(40, 48))
    for field, data in (("gif", encode(image, "GIF")), ("webp", encode(image, "WEBP", lossless=True)),
                        ("bmp", encode(image, "BMP")), ("tiff", encode(image, "TIFF"))):
        out = kept(clean_image(record({field: data}), SMALL, None))
        assert set(out.fields) == {"jpg", "json"} and decoded(out.fields["jpg"]).size == (48, 40), field


def test_exif_orientation_6_turns_the_image_and_drops_exif(record: MakeRecord, jpeg_decoder: str) -> None:
    pixels = np.full((64, 96, 3), 128, np.uint8)
    pixels[:16, :16] = (255, 0, 0)  # red in the stored top-left corner
    data = with_orientation(Image.fromarray(pixels), "JPEG", 6, quality=95)
    result = kept(clean_image(record({"jpg": data}), SMALL, None))
    out = decoded(result.fields["jpg"])
    assert out.size == (64, 96)  # width and height swapped
    assert json.loads(result.fields["json"])["width"] == 64
    red_corner, other_corner = out.getpixel((58, 5)), out.getpixel((5, 5))  # turned clockwise: now top-right
    assert red_corner[0] > 200 and red_corner[1] < 60 and abs(other_corner[0] - 128) < 20
    assert 0x0112 not in out.getexif() and not out.info.get("exif")


@pytest.mark.parametrize(
    ("opts", "size"),
    [(ImageOptions(min_side=1, resize_short=40), (60, 40)), (ImageOptions(min_side=1, max_side=60), (60, 40)),
     (ImageOptions(min_side=1, resize_short=500), (120, 80)), (ImageOptions(min_side=1, max_side=500), (120, 80))],
)
def test_resize_only_downscales(record: MakeRecord, jpeg_decoder: str, opts: ImageOptions,
                                size: tuple[int, int]) -> None:
    data = photo_jpeg(80, 120)
    result = kept(clean_image(record({"jpg": data}), opts, None))
    assert decoded(result.fields["jpg"]).size == size
    assert (result.fields["jpg"] == data) == (size == (120, 80))


def test_resize_after_orientation(record: MakeRecord, jpeg_decoder: str) -> None:
    data = with_orientation(Image.fromarray(photo_pixels(80, 120)), "JPEG", 6)
    out = decoded(kept(clean_image(record({"jpg": data}), ImageOptions(min_side=1, resize_short=40),
                                   None)).fields["jpg"])
    assert out.size == (40, 60)


def test_resize_keeps_the_picture(record: MakeRecord) -> None:
    pixels = photo_pixels(160, 240)
    raw = record({"jpg": photo_jpeg(160, 240)})
    out = decoded(kept(clean_image(raw, ImageOptions(min_side=1, resize_short=80), None)).fields["jpg"])
    reference = np.asarray(Image.fromarray(pixels).resize(out.size, Image.Resampling.BOX), np.float32)
    assert np.abs(np.asarray(out, np.float32) - reference).mean() < 6


def test_png_reencode_format(record: MakeRecord) -> None:
    rgba = encode(Image.fromarray(photo_pixels(64, 96)).convert("RGBA"), "PNG")
    result = kept(clean_image(record({"png": rgba}), PNG_OUT, 0))
    assert set(result.fields) == {"png", "cls", "json"} and decoded(result.fields["png"]).mode == "RGB"


def test_jpeg_quality_is_applied(record: MakeRecord) -> None:
    raw = record({"png": encode(Image.fromarray(photo_pixels(64, 96)), "PNG")})
    low = kept(clean_image(raw, ImageOptions(min_side=1, quality=20), None)).fields["jpg"]
    high = kept(clean_image(raw, ImageOptions(min_side=1, quality=95), None)).fields["jpg"]
    assert len(low) < len(high)


def test_target_size() -> None:
    assert target_size((500, 375), ImageOptions(resize_short=256)) == (341, 256)
    assert target_size((375, 500), ImageOptions(max_side=100)) == (75, 100)
    assert target_size((10, 5000), ImageOptions(max_side=100)) == (1, 100)
    assert target_size((200, 100), ImageOptions(resize_short=100)) is None
    assert target_size((200, 100), ImageOptions()) is None


# ----------------------------------------------------------------------------- sidecars


def test_sidecars(record: MakeRecord) -> None:
    nfd = unicodedata.normalize("NFD", "Crème brûlée")
    raw = record({"jpg": photo_jpeg(64, 96), "txt": nfd.encode(), "json": b'{"b": 1, "a": "x"}', "seg.png": b"\x00raw"})
    result = kept(clean_image(raw, SMALL, 2))
    assert result.fields["txt"] == "Crème brûlée".encode() != nfd.encode()
    assert result.fields["json"] == b'{"__source__":"cat/img.jpg","a":"x","b":1}'
    assert result.fields["seg.png"] == b"\x00raw"


@pytest.mark.parametrize(
    ("field", "data", "words"),
    [("txt", b"caf\xe9", "not UTF-8"), ("json", b"[1, 2]", "list"), ("json", b"{oops", "does not parse"),
     ("json", b'{"a": NaN}', "NaN"), ("json", b"", "does not parse")],
)
def test_bad_sidecars(record: MakeRecord, field: str, data: bytes, words: str) -> None:
    raw = record({"jpg": photo_jpeg(64, 96), field: data})
    result = rejected(clean_image(raw, SMALL, None), RejectReason.BAD_METADATA)
    assert words in result.detail and f"img.{field}" in result.detail


def test_sidecar_colliding_with_a_generated_field(record: MakeRecord) -> None:
    raw = record({"jpg": photo_jpeg(64, 96), "cls": b"7"})
    rejected(clean_image(raw, SMALL, 1), RejectReason.BAD_METADATA)
    assert kept(clean_image(raw, SMALL, None)).fields["cls"] == b"7"  # no label: passes through


def test_undecodable_source_name_still_gives_valid_utf8_json(record: MakeRecord) -> None:
    source = os.fsdecode(b"cat/img_\xff.jpg")
    raw = record({"jpg": photo_jpeg(64, 96)}, source=source)
    doc = json.loads(kept(clean_image(raw, SMALL, None)).fields["json"].decode("utf-8"))
    assert doc["__source__"] == source


def test_a_json_sidecar_never_contradicts_the_sample(record: MakeRecord) -> None:
    """A sidecar's label, width, height and __source__ are the sample's own; its other keys are kept."""
    raw = record({"jpg": photo_jpeg(64, 96),
                  "json": b'{"__source__": "dog/1.jpg", "label": "dog", "width": 5, "height": 7, '
                          b'"caption": "a cat"}'}, label="cat")
    result = kept(clean_image(raw, SMALL, 2))
    doc = json.loads(result.fields["json"])
    width, height = Image.open(io.BytesIO(result.fields["jpg"])).size
    assert doc == {"__source__": "cat/img.jpg", "label": "cat", "width": width, "height": height, "caption": "a cat"}
