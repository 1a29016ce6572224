from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from PIL import Image, features

from loaders.errors import ConfigError, SampleError
from loaders.read import decode
from loaders.read.decode import (
    Backend,
    active_backend,
    available_backends,
    dct_scale_for,
    decode_crop_resize,
    decode_rgb,
    image_size,
)
from tests.samples import photo_jpeg, photo_pixels
from tests.samples import encode

BACKENDS = [b.value for b in available_backends()]
# Reduced-scale decode vs full decode + Pillow resize on photo-like content: mean absolute
# difference on 0..255 (measured: mean ~2, worst 5.1 over 300 random crops; libjpeg's scaled
# IDCT and Pillow's antialiasing filter differ a little on high-detail content).
REDUCED_MAD = 6.0


@pytest.fixture(scope="module")
def photo() -> bytes:
    """A 640x480 q90 photo-like JPEG: large enough for 1/2 .. 1/8 reduced decodes."""
    return photo_jpeg(480, 640, quality=90)


def _reference(data: bytes, box: tuple[float, float, float, float], size: tuple[int, int]) -> np.ndarray:
    """Straightforward path: full Pillow decode, then resize the (sub-pixel) box."""
    left, top, width, height = box
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("RGB").resize(size, Image.BILINEAR, box=(left, top, left + width, top + height)))


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def _check_array(arr: np.ndarray, shape: tuple[int, ...]) -> None:
    assert arr.shape == shape
    assert arr.dtype == np.uint8
    assert arr.flags.c_contiguous and arr.flags.writeable


@pytest.mark.parametrize(("region", "size", "expected"), [
    ((640, 480), (224, 224), 2),
    ((640, 480), (80, 60), 8),
    ((640, 480), (80, 61), 4),
    ((447, 447), (224, 224), 1),
    ((448, 448), (224, 224), 2),
    ((100, 100), (224, 224), 1),  # upscaling: full resolution
    ((2000, 300), (224, 224), 1),  # one axis too short
])
def test_dct_scale_for_picks_largest_scale_keeping_output_resolution(region, size, expected) -> None:
    assert dct_scale_for(region, size) == expected


def test_image_size_reads_header_of_every_format(photo: bytes) -> None:
    assert image_size(photo) == (640, 480)
    assert image_size(encode(photo_pixels(30, 50), "PNG")) == (50, 30)
    # The header alone suffices: the scan data may be missing.
    assert image_size(photo[:1000]) == (640, 480)


@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_rgb_full(photo: bytes, backend: str) -> None:
    arr = decode_rgb(photo, backend=backend)
    _check_array(arr, (480, 640, 3))
    with Image.open(io.BytesIO(photo)) as img:
        expected = np.asarray(img.convert("RGB"))
    # Both backends are libjpeg-turbo with the same IDCT and upsampling: identical pixels.
    np.testing.assert_array_equal(arr, expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("min_size", "shape"), [
    ((300, 200), (240, 320, 3)),   # 1/2
    ((100, 100), (120, 160, 3)),   # 1/4
    ((75, 59), (60, 80, 3)),       # 1/8
    ((641, 10), (480, 640, 3)),    # larger than the image: full size, never upscaled
])
def test_decode_rgb_reduced_is_at_least_min_size(photo: bytes, backend: str, min_size, shape) -> None:
    arr = decode_rgb(photo, min_size=min_size, backend=backend)
    _check_array(arr, shape)
    full = decode_rgb(photo)
    small = np.asarray(Image.fromarray(full).resize((arr.shape[1], arr.shape[0]), Image.BOX))
    assert _mad(arr, small) < REDUCED_MAD


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("box", "size", "scale"), [
    ((0, 0, 640, 480), (80, 60), 8),
    ((37.5, 20, 400, 300), (96, 72), 4),
    ((100, 50, 500, 400), (224, 160), 2),
    ((10, 10, 200, 150), (224, 224), 1),   # upscaling
    ((0, 0, 640, 480), (64, 64), 4),       # aspect change: limited by height (480 / 8 < 64)
])
def test_decode_crop_resize_matches_reference(photo: bytes, backend: str, box, size, scale) -> None:
    assert dct_scale_for(box[2:], size) == scale
    out = decode_crop_resize(photo, box, size, backend=backend)
    _check_array(out, (size[1], size[0], 3))
    assert _mad(out, _reference(photo, box, size)) < REDUCED_MAD
    exact = decode_crop_resize(photo, box, size, reduced=False, backend=backend)
    np.testing.assert_array_equal(exact, _reference(photo, box, size))


@pytest.mark.parametrize("backend", BACKENDS)
def test_flip_mirrors_left_right(photo: bytes, backend: str) -> None:
    box, size = (50, 40, 300, 200), (90, 60)
    plain = decode_crop_resize(photo, box, size, backend=backend)
    flipped = decode_crop_resize(photo, box, size, flip=True, backend=backend)
    np.testing.assert_array_equal(flipped, plain[:, ::-1])
    _check_array(flipped, (60, 90, 3))
    assert not np.array_equal(flipped, plain)


def test_backends_agree_on_fused_path(photo: bytes) -> None:
    if Backend.SIMPLEJPEG not in available_backends():
        pytest.skip("simplejpeg not installed")
    box, size = (30, 20, 560, 420), (70, 52)
    np.testing.assert_array_equal(decode_crop_resize(photo, box, size, backend="pillow"),
                                  decode_crop_resize(photo, box, size, backend="simplejpeg"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("resample", ["bilinear", "nearest", "lanczos"])
def test_png_decodes_fully_and_exactly(backend: str, resample: str) -> None:
    pixels = photo_pixels(120, 160)
    png = encode(pixels, "PNG")
    np.testing.assert_array_equal(decode_rgb(png, min_size=(10, 10), backend=backend), pixels)
    box, size = (16, 8, 128, 96), (32, 24)
    expected = np.asarray(Image.fromarray(pixels).resize(size, Image.Resampling[resample.upper()],
                                                         box=(16, 8, 144, 104)))
    np.testing.assert_array_equal(decode_crop_resize(png, box, size, resample=resample, backend=backend), expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_grayscale_becomes_three_equal_channels(backend: str, fmt: str) -> None:
    grey = photo_pixels(64, 80)[..., 0]
    arr = decode_rgb(encode(grey, fmt), backend=backend)
    _check_array(arr, (64, 80, 3))
    assert np.array_equal(arr[..., 0], arr[..., 1]) and np.array_equal(arr[..., 1], arr[..., 2])
    if fmt == "PNG":
        np.testing.assert_array_equal(arr[..., 0], grey)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cmyk_jpeg_converts_like_pillow(backend: str) -> None:
    cmyk = Image.fromarray(photo_pixels(48, 64)).convert("CMYK")
    data = encode(cmyk, "JPEG", quality=95)
    with Image.open(io.BytesIO(data)) as img:
        expected = np.asarray(img.convert("RGB"))
    np.testing.assert_array_equal(decode_rgb(data, backend=backend), expected)
    out = decode_crop_resize(data, (0, 0, 64, 48), (32, 24), backend=backend)
    _check_array(out, (24, 32, 3))


def test_alpha_palette_and_16_bit_modes() -> None:
    rgba = np.dstack([photo_pixels(20, 30), np.full((20, 30), 7, np.uint8)])
    np.testing.assert_array_equal(decode_rgb(encode(rgba, "PNG")), rgba[..., :3])

    palette = Image.fromarray(photo_pixels(20, 30)).convert("P")
    palette.info["transparency"] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Pillow warns on P -> RGB with transparency; we must not
        arr = decode_rgb(encode(palette, "PNG", transparency=0))
    _check_array(arr, (20, 30, 3))

    deep = (np.arange(20 * 30, dtype=np.uint16).reshape(20, 30) * 100)
    arr = decode_rgb(encode(Image.fromarray(deep), "PNG"))
    np.testing.assert_array_equal(arr[..., 0], (deep >> 8).astype(np.uint8))  # scaled, not clipped at 255


def test_mpo_camera_jpeg_decodes_reduced() -> None:
    frames = [Image.fromarray(photo_pixels(240, 320, seed)) for seed in (0, 1)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "MPO", save_all=True, append_images=frames[1:])
    data = buffer.getvalue()
    with Image.open(io.BytesIO(data)) as img:
        assert img.format == "MPO"
    arr = decode_rgb(data, min_size=(80, 60))
    _check_array(arr, (60, 80, 3))
    assert _mad(arr, np.asarray(frames[0].resize((80, 60), Image.BOX))) < REDUCED_MAD


@pytest.mark.skipif(not features.check("webp"), reason="Pillow built without WebP")
def test_webp_decodes() -> None:
    pixels = photo_pixels(40, 60)
    arr = decode_rgb(encode(pixels, "WEBP", lossless=True))
    np.testing.assert_array_equal(arr, pixels)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("damage", ["empty", "garbage", "truncated", "header_only", "bad_markers"])
def test_broken_bytes_raise_sample_error_with_cause(photo: bytes, backend: str, damage: str) -> None:
    data = {
        "empty": b"",
        "garbage": b"this is not an image at all",
        "truncated": photo[: len(photo) // 2],
        "header_only": photo[:600],
        "bad_markers": b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4,
    }[damage]
    for call in (lambda: decode_rgb(data, backend=backend),
                 lambda: decode_crop_resize(data, (0, 0, 320, 240), (64, 48), backend=backend)):
        with pytest.raises(SampleError) as info:
            call()
        assert isinstance(info.value.__cause__, Exception)  # the codec's own error is kept
        assert str(info.value)


def test_image_size_of_garbage_raises_sample_error() -> None:
    with pytest.raises(SampleError, match="27 bytes"):
        image_size(b"this is not an image at all")


def test_bad_arguments_raise_config_error(photo: bytes) -> None:
    with pytest.raises(ConfigError, match="'backend'"):
        decode_rgb(photo, backend="libjpeg9")
    with pytest.raises(ConfigError, match="'resample'"):
        decode_crop_resize(photo, (0, 0, 10, 10), (4, 4), resample="cubic-ish")
    with pytest.raises(ConfigError, match="does not fit"):
        decode_crop_resize(photo, (600, 0, 100, 100), (4, 4))
    with pytest.raises(ConfigError, match="positive"):
        decode_crop_resize(photo, (0, 0, 0, 10), (4, 4))
    with pytest.raises(ConfigError, match="positive"):
        decode_crop_resize(photo, (0, 0, 10, 10), (0, 4))


def test_simplejpeg_missing_is_a_config_error(monkeypatch: pytest.MonkeyPatch, photo: bytes) -> None:
    monkeypatch.setattr(decode, "simplejpeg", None)
    assert decode.available_backends() == (Backend.PILLOW,)
    with pytest.raises(ConfigError, match="not installed"):
        decode_rgb(photo, backend="simplejpeg")
    assert decode_rgb(photo, min_size=(80, 60)).shape == (60, 80, 3)
    assert image_size(photo) == (640, 480)


def test_active_backend_names_library_and_codec() -> None:
    text = active_backend()
    assert text.startswith(("pillow ", "pillow-simd "))
    assert "libjpeg" in text
