"""The partial-decode lane (``loaders.read.region``, the ``_jpeg_region`` extension) against the full decode.

The promise: the lane changes speed only. Every crop, scale, filter, flip and JPEG
flavour gives the pixels the full-decode path gives, bit for bit, with Pillow-SIMD and stock
Pillow alike (the lane disabled by monkeypatching the extension away), and damaged data
raises what it raised before.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from loaders import DataLoader, ShardDataset
from loaders.errors import SampleError
from loaders.read import region
from loaders.read.decode import Interpolation, dct_scale_for, decode_crop_resize, pil_filter
from loaders.read.transforms import RandomResizedCropDecode, random_resized_crop_box
from tests.samples import photo_jpeg

pytestmark = pytest.mark.skipif(not region.is_available(), reason="loaders.read._jpeg_region not built here")


FLAVOURS = {
    "420": photo_jpeg(251, 333),
    "444": photo_jpeg(251, 333, subsampling=0),
    "422": photo_jpeg(333, 251, subsampling=1),
    "progressive": photo_jpeg(251, 333, progressive=True),
    "grey": photo_jpeg(257, 301, mode="L"),
    "large": photo_jpeg(768, 1024, seed=3),
    "restarts": photo_jpeg(251, 333, restart_marker_rows=1),
}


def _full_decode(monkeypatch: pytest.MonkeyPatch, call):
    with monkeypatch.context() as patch:
        patch.setattr(region, "_jpeg_region", None)
        return call()


@settings(max_examples=60, deadline=None)
@given(flavour=st.sampled_from(sorted(FLAVOURS)), seed=st.integers(0, 2**32 - 1),
       size=st.sampled_from([(224, 224), (64, 48), (17, 31), (400, 300)]),
       interpolation=st.sampled_from(list(Interpolation)), flip=st.booleans())
def test_region_lane_gives_the_full_decode_pixels(flavour: str, seed: int, size: tuple[int, int],
                                                  interpolation: Interpolation, flip: bool) -> None:
    data = FLAVOURS[flavour]
    with Image.open(io.BytesIO(data)) as img:
        width, height = img.size
    box = random_resized_crop_box(width, height, (0.02, 1.0), (0.5, 2.0), np.random.default_rng(seed))
    n = dct_scale_for(box[2:], size)
    scaled_box = tuple(v / n for v in box)
    assert region.decode_box(data, (width, height), n, scaled_box, size, pil_filter(interpolation)) is not None
    fast = decode_crop_resize(data, box, size, flip=flip, resample=interpolation)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(region, "_jpeg_region", None)
        full = decode_crop_resize(data, box, size, flip=flip, resample=interpolation)
    assert fast.shape == (size[1], size[0], 3) and fast.flags.writeable and fast.flags.c_contiguous
    # Bit for bit: the region is resized as the whole image, with the full decode's box (stock Pillow >= 13
    # picks the order of its two resize passes from the input's size; a region resized as a small image of
    # its own differed by one level in ~20% of the pixels of a quarter of the crops there).
    np.testing.assert_array_equal(fast, full, err_msg=str((flavour, box, size, interpolation)))


@pytest.mark.parametrize("box", [(0, 0, 1024, 768), (0.5, 700.25, 1023.5, 67.75), (990, 3, 34, 765),
                                 (100, 100, 900, 600), (0, 0, 3, 2)])
def test_reduced_scale_and_edge_boxes_match(monkeypatch: pytest.MonkeyPatch, box) -> None:
    data = FLAVOURS["large"]
    for size in ((224, 224), (100, 75)):
        fast = decode_crop_resize(data, box, size)
        full = _full_decode(monkeypatch, lambda size=size: decode_crop_resize(data, box, size))
        np.testing.assert_array_equal(fast, full, err_msg=str((box, size, dct_scale_for(box[2:], size))))


def test_decode_region_widens_columns_only_and_reports_them() -> None:
    data = FLAVOURS["420"]
    pixels = bytearray(4 * 333 * 251)
    x, width, height = region._jpeg_region.decode_region(data, pixels, 50, 40, 100, 60, 1)
    assert x <= 50 and x + width >= 150 and x % 16 == 0 and height == 60
    with Image.open(io.BytesIO(data)) as img:
        expected = np.asarray(img.convert("RGB"))[40:100, x + 1:x + width - 1]
    # The buffer is laid out as the whole image: the region sits at its place.
    got = np.frombuffer(pixels, np.uint8).reshape(251, 333, 4)[40:100, x + 1:x + width - 1, :3]
    np.testing.assert_array_equal(got, expected)  # exact inside the cut's edge columns


@pytest.mark.parametrize(("args", "error", "match"), [
    ((300, 0, 40, 10, 1), ValueError, "does not fit"),
    ((0, 0, 10, 10, 3), ValueError, "scale must be"),
    ((0, 0, 333, 251, 1), BufferError, "needs"),
])
def test_decode_region_refuses_bad_requests(args, error, match) -> None:
    with pytest.raises(error, match=match):
        region._jpeg_region.decode_region(FLAVOURS["420"], bytearray(1000), *args)


def test_cmyk_and_damaged_jpegs_leave_the_lane() -> None:
    cmyk = photo_jpeg(48, 64, mode="CMYK")
    with pytest.raises(NotImplementedError, match="CMYK"):
        region._jpeg_region.decode_region(cmyk, bytearray(1 << 16), 0, 0, 64, 48, 1)
    assert region.decode_box(cmyk, (64, 48), 1, (0, 0, 64, 48), (32, 24), Image.Resampling.BILINEAR) is None
    data = FLAVOURS["420"]
    no_eoi = data[:-2]
    assert region.decode_box(no_eoi, (333, 251), 1, (0, 0, 10, 10), (8, 8), Image.Resampling.BILINEAR) is None
    # A premature end is a libjpeg warning: an error here, never gray pixels.
    with pytest.raises(ValueError, match="libjpeg"):
        region._jpeg_region.decode_region(data[: len(data) // 2], bytearray(1 << 20), 0, 200, 333, 40, 1)


@pytest.mark.parametrize("cut", [0.3, 0.6, 0.9])
def test_truncated_jpeg_fails_as_before_even_when_the_crop_is_above_the_cut(cut: float) -> None:
    data = FLAVOURS["420"]
    truncated = data[: int(len(data) * cut)]
    with pytest.raises(SampleError):
        decode_crop_resize(truncated, (0, 0, 100, 20), (32, 32))  # rows the damage does not reach


@pytest.mark.parametrize("width", [*range(1, 14), 224])  # the 4-pixel steps, their tail, rows shorter than a step
def test_pack_rgb_packs_and_mirrors(width: int) -> None:
    rgbx = np.random.default_rng(width).integers(0, 256, (3, width, 4), dtype=np.uint8)
    for flip, expected in ((False, rgbx[..., :3]), (True, rgbx[:, ::-1, :3])):
        out = np.full((3 * width * 3 + 16,), 7, np.uint8)  # 16 bytes more: nothing is written past the rows
        region._jpeg_region.pack_rgb(rgbx.tobytes(), out, width, 3, flip)
        np.testing.assert_array_equal(out[:-16].reshape(3, width, 3), expected)
        assert (out[-16:] == 7).all()
    with pytest.raises(ValueError, match="need"):
        region._jpeg_region.pack_rgb(rgbx.tobytes(), np.empty((2, width, 3), np.uint8), width, 3, False)


@pytest.mark.skipif(not hasattr(Image.Image, "__arrow_c_array__"), reason="Pillow < 11.2: no Arrow export")
def test_pack_rgb_reads_a_pillow_image_in_place() -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (7, 9, 3), dtype=np.uint8)
    image = Image.fromarray(rgb)
    out = np.empty_like(rgb)
    region._jpeg_region.pack_rgb(image.__arrow_c_array__()[1], out, 9, 7, True)
    np.testing.assert_array_equal(out, rgb[:, ::-1])
    with pytest.raises(ValueError, match="need"):  # more pixels than the image has
        region._jpeg_region.pack_rgb(image.__arrow_c_array__()[1], np.empty((8, 9, 3), np.uint8), 9, 8, False)
    with pytest.raises(ValueError, match="4-byte pixels"):  # one byte per pixel
        region._jpeg_region.pack_rgb(image.convert("L").__arrow_c_array__()[1], out, 9, 7, False)


@pytest.mark.parametrize("size", [(9, 7), (2100, 2100)], ids=["one-block", "multi-block"])
def test_as_array_is_the_image_whatever_its_memory_layout(size: tuple[int, int]) -> None:
    # Pillow keeps large images in several blocks (16 MiB each): no Arrow view, the copy path.
    # fromarray maps the array's memory (read-only), where Pillow's Arrow export would crash.
    rgb = np.random.default_rng(1).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    mapped = Image.frombuffer("RGBX", size, np.dstack([rgb, rgb[..., :1]]).tobytes(), "raw", "RGBX", 0, 1)
    for image in (Image.fromarray(rgb).copy(), Image.fromarray(rgb).convert("RGBX"), mapped):
        np.testing.assert_array_equal(region.as_array(image), rgb)
        np.testing.assert_array_equal(region.as_array(image, flip=True), rgb[:, ::-1])


def test_loader_batches_are_the_same_with_and_without_the_lane(image_shards, monkeypatch: pytest.MonkeyPatch) -> None:
    dataset = ShardDataset(image_shards, fields=("jpg",), seed=7, transform=RandomResizedCropDecode(96))

    def epoch() -> list[np.ndarray]:
        loader = DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2, worker_type="thread", seed=7)
        return [batch["image"].numpy().copy() for batch in loader]

    fast = epoch()
    full = _full_decode(monkeypatch, epoch)
    assert len(fast) == len(full) > 1
    for a, b in zip(fast, full):
        np.testing.assert_array_equal(a, b)
