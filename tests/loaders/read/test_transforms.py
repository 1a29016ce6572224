from __future__ import annotations

import io
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from loaders.errors import ConfigError, SampleError
from loaders.read import decode
from loaders.read.decode import Interpolation
from loaders.read.transforms import (
    CenterCropDecode,
    Compose,
    DecodeImage,
    DecodeLabel,
    RandomResizedCropDecode,
    SampleTransform,
    center_crop_box,
    random_resized_crop_box,
)
from tests.samples import photo_jpeg, photo_pixels
from tests.samples import encode

BACKENDS = [b.value for b in decode.available_backends()]
REDUCED_MAD = 6.0  # mean absolute difference on 0..255 allowed for the reduced-scale decode


@pytest.fixture(scope="module")
def photo() -> bytes:
    """A 800x600 q90 photo-like JPEG: crops to 64 px reach every reduced scale."""
    return photo_jpeg(600, 800, seed=1, quality=90)


def _sample(data: bytes, field: str = "jpg", **extra: object) -> dict[str, object]:
    return {"__key__": "shard-0/img_0007", "__index__": 7, field: data, "cls": b"3", **extra}


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def _torchvision_get_params(width: int, height: int, scale: tuple[float, float], ratio: tuple[float, float],
                            rng: np.random.Generator) -> tuple[int, int, int, int]:
    """torchvision.transforms.RandomResizedCrop.get_params, transcribed (returns i, j, h, w),
    with torch's uniform_/randint replaced by the same draws from a numpy Generator."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect_ratio = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(rng.integers(0, height - h + 1))
            j = int(rng.integers(0, width - w + 1))
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w = width
        h = height
    i = (height - h) // 2
    j = (width - w) // 2
    return i, j, h, w


# --- crop parameters ---------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(width=st.integers(1, 3000), height=st.integers(1, 3000), seed=st.integers(0, 2**32 - 1),
       lo=st.floats(0.01, 1.0), span=st.floats(0.0, 1.0), r_lo=st.floats(0.2, 1.0), r_span=st.floats(0.0, 3.0))
def test_crop_box_matches_torchvision_algorithm(width, height, seed, lo, span, r_lo, r_span) -> None:
    scale, ratio = (lo, min(1.0, lo + span)), (r_lo, r_lo + r_span)
    left, top, w, h = random_resized_crop_box(width, height, scale, ratio, np.random.default_rng(seed))
    i, j, ref_h, ref_w = _torchvision_get_params(width, height, scale, ratio, np.random.default_rng(seed))
    if ref_w > 0 and ref_h > 0:  # torchvision can return an empty fallback crop; see below
        assert (left, top, w, h) == (j, i, ref_w, ref_h)
    assert 0 <= left <= width - w and 0 <= top <= height - h and w > 0 and h > 0


def test_crop_box_statistics_stay_in_range() -> None:
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    rng = np.random.default_rng(0)
    boxes = np.array([random_resized_crop_box(500, 375, scale, ratio, rng) for _ in range(2000)])
    areas = boxes[:, 2] * boxes[:, 3] / (500 * 375)
    aspects = boxes[:, 2] / boxes[:, 3]
    # Rounding to whole pixels moves area and ratio a little past the bounds.
    assert areas.min() >= 0.08 * 0.97 and areas.max() <= 1.0
    assert aspects.min() >= 0.75 * 0.97 and aspects.max() <= 4 / 3 * 1.03
    assert 0.3 < areas.mean() < 0.6  # many large draws are rejected (h > 375), pulling the mean down
    assert len({tuple(b) for b in boxes}) > 1900  # varied


def test_crop_box_is_deterministic_per_seed_and_varies_across_seeds() -> None:
    draw = [random_resized_crop_box(640, 480, (0.08, 1.0), (0.75, 4 / 3), np.random.default_rng(s)) for s in range(50)]
    again = [random_resized_crop_box(640, 480, (0.08, 1.0), (0.75, 4 / 3), np.random.default_rng(s)) for s in range(50)]
    assert draw == again
    assert len(set(draw)) == 50


@pytest.mark.parametrize(("width", "height", "expected"), [
    (1000, 10, (493, 0, 13, 10)),    # too wide for any draw: central crop at the max ratio
    (10, 1000, (0, 493, 10, 13)),    # too tall: central crop at the min ratio
])
def test_crop_box_falls_back_to_central_crop(width: int, height: int, expected) -> None:
    assert random_resized_crop_box(width, height, (0.9, 1.0), (3 / 4, 4 / 3), np.random.default_rng(0)) == expected


def test_crop_box_fallback_is_never_empty() -> None:
    # torchvision's fallback gives a 0-pixel-wide crop here (round(1 * 0.4) = 0); ours keeps 1.
    assert _torchvision_get_params(1, 1, (0.5, 0.5), (0.2, 0.4), np.random.default_rng(0))[3] == 0
    assert random_resized_crop_box(1, 1, (0.5, 0.5), (0.2, 0.4), np.random.default_rng(0)) == (0, 0, 1, 1)


def test_crop_box_whole_image_fallback() -> None:
    # Square image, whole area, ratio never exactly 1: no draw fits, and the image's own
    # ratio is in range, so the fallback is the whole image.
    assert random_resized_crop_box(40, 40, (1.0, 1.0), (0.5, 2.0), np.random.default_rng(0)) == (0, 0, 40, 40)


@pytest.mark.parametrize(("width", "height", "size", "short", "expected"), [
    # Resize(256) of 512x384 gives 341x256 (long side truncated); the crop starts at
    # round(58.5) = 58, 16; mapped back by 512/341 and 384/256.
    (512, 384, (224, 224), 256, (58 * 512 / 341, 24.0, 224 * 512 / 341, 336.0)),
    (400, 400, (200, 100), 200, (100.0, 0.0, 200.0, 400.0)),   # size is (height, width)
    (300, 600, (224, 224), 256, (16 * 300 / 256, 144 * 600 / 512, 224 * 300 / 256, 224 * 600 / 512)),
])
def test_center_crop_box_geometry(width, height, size, short, expected) -> None:
    assert center_crop_box(width, height, size, short) == pytest.approx(expected)


# --- RandomResizedCropDecode -------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_random_resized_crop_matches_reference_pipeline(photo: bytes, backend: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    scales: list[int] = []
    real = decode.dct_scale_for

    def recording(region: tuple[float, float], size: tuple[int, int]) -> int:
        scales.append(real(region, size))
        return scales[-1]

    monkeypatch.setattr(decode, "dct_scale_for", recording)
    transform = RandomResizedCropDecode(64, backend=backend)
    with Image.open(io.BytesIO(photo)) as img:
        full = img.convert("RGB")
    for seed in range(12):
        out = transform(_sample(photo), np.random.default_rng(seed))["image"]
        rng = np.random.default_rng(seed)
        left, top, w, h = random_resized_crop_box(800, 600, transform.scale, transform.ratio, rng)
        ref = full.crop((left, top, left + w, top + h)).resize((64, 64), Image.BILINEAR)
        if rng.random() < 0.5:
            ref = ref.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        assert out.shape == (64, 64, 3) and out.dtype == np.uint8 and out.flags.c_contiguous
        assert _mad(out, np.asarray(ref)) < REDUCED_MAD
    assert {2, 4, 8} <= set(scales)  # the reduced decodes really ran


def test_random_resized_crop_output_and_sample_fields(photo: bytes) -> None:
    sample = _sample(photo, json=b"{}")
    out = RandomResizedCropDecode((48, 80), out_field="pixels")(sample, np.random.default_rng(0))
    assert set(out) == {"__key__", "__index__", "cls", "json", "pixels"}  # jpg dropped
    assert out["pixels"].shape == (48, 80, 3)  # size is (height, width)
    assert out["pixels"].flags.writeable
    assert "jpg" in sample and "pixels" not in sample  # the input is not modified


def test_random_resized_crop_is_deterministic_in_rng(photo: bytes) -> None:
    transform = RandomResizedCropDecode(32)
    first = [transform(_sample(photo), np.random.default_rng(s))["image"] for s in range(6)]
    again = [transform(_sample(photo), np.random.default_rng(s))["image"] for s in range(6)]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert len({a.tobytes() for a in first}) == 6


def test_flip_probability_draws_after_the_crop(photo: bytes) -> None:
    never = RandomResizedCropDecode(40, flip_p=0.0)
    always = RandomResizedCropDecode(40, flip_p=1.0)
    for seed in range(4):
        plain = never(_sample(photo), np.random.default_rng(seed))["image"]
        mirrored = always(_sample(photo), np.random.default_rng(seed))["image"]
        np.testing.assert_array_equal(mirrored, plain[:, ::-1])
    small = photo_jpeg(60, 80, seed=3, quality=75)  # Pillow's default quality
    half, never8 = RandomResizedCropDecode(8, flip_p=0.5), RandomResizedCropDecode(8, flip_p=0.0)
    flips = sum(not np.array_equal(half(_sample(small), np.random.default_rng(s))["image"],
                                   never8(_sample(small), np.random.default_rng(s))["image"]) for s in range(200))
    assert 60 < flips < 140  # Binomial(200, 0.5): 100 +- 10 (one sigma is 7)


@pytest.mark.parametrize("field", ["jpg", "jpeg", "png", "webp"])
def test_image_field_is_found_by_default(field: str) -> None:
    pixels = photo_pixels(30, 40, seed=0)
    data = encode(pixels, "PNG")  # content type does not depend on the field name
    out = DecodeImage()({"__key__": "k", field: data}, np.random.default_rng(0))
    np.testing.assert_array_equal(out["image"], pixels)
    assert field not in out


def test_explicit_field_and_first_present_wins(photo: bytes) -> None:
    png = encode(np.zeros((10, 12, 3), np.uint8), "PNG")
    sample = {"__key__": "k", "png": png, "jpg": photo}
    assert DecodeImage()(sample, np.random.default_rng(0))["image"].shape == (600, 800, 3)  # jpg first
    assert DecodeImage(field="png")(sample, np.random.default_rng(0))["image"].shape == (10, 12, 3)
    # memoryview / bytearray fields (a reader's zero-copy view) are accepted
    view = {"__key__": "k", "jpg": memoryview(photo)}
    assert RandomResizedCropDecode(16)(view, np.random.default_rng(0))["image"].shape == (16, 16, 3)


@pytest.mark.parametrize("make", [
    lambda: RandomResizedCropDecode(32),
    lambda: CenterCropDecode(32),
    lambda: DecodeImage(),
])
@pytest.mark.parametrize("data", [b"", b"definitely not an image", "a str"])
def test_undecodable_image_raises_sample_error_naming_key(make, data) -> None:
    with pytest.raises(SampleError) as info:
        make()(_sample(data), np.random.default_rng(0))
    err = info.value
    assert err.key == "shard-0/img_0007" and err.index == 7
    assert "shard-0/img_0007" in str(err) and "'jpg'" in str(err)


def test_truncated_jpeg_keeps_pillow_error_as_cause(photo: bytes) -> None:
    with pytest.raises(SampleError, match="img_0007") as info:
        RandomResizedCropDecode(32)(_sample(photo[: len(photo) // 3]), np.random.default_rng(0))
    assert isinstance(info.value.__cause__, OSError)  # Pillow's "image file is truncated"
    assert "truncated" in str(info.value)


def test_missing_image_field_raises_sample_error() -> None:
    with pytest.raises(SampleError, match=r"no image field.*\['cls', 'txt'\]"):
        DecodeImage()({"__key__": "k", "cls": b"1", "txt": b"x"}, np.random.default_rng(0))
    with pytest.raises(SampleError, match="no field 'tif'"):
        DecodeImage(field="tif")({"__key__": "k", "cls": b"1"}, np.random.default_rng(0))


def test_non_rgb_modes_become_rgb() -> None:
    grey = encode(np.full((20, 30), 77, np.uint8), "PNG")
    rgba = encode(np.full((20, 30, 4), 99, np.uint8), "PNG")
    cmyk = encode(Image.new("CMYK", (30, 20), (0, 80, 160, 0)), "JPEG")
    for data in (grey, rgba, cmyk):
        for transform in (DecodeImage(), RandomResizedCropDecode(8), CenterCropDecode(8, resize_short=16)):
            image = transform({"__key__": "k", "jpg": data}, np.random.default_rng(0))["image"]
            assert image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8


# --- CenterCropDecode --------------------------------------------------------------------------

@pytest.mark.parametrize(("height", "width"), [(300, 400), (500, 333), (257, 1000), (256, 256)])
def test_center_crop_exact_geometry_against_resize_then_crop(height: int, width: int) -> None:
    pixels = photo_pixels(height, width, seed=2)
    out = CenterCropDecode(224)({"__key__": "k", "png": encode(pixels, "PNG")}, np.random.default_rng(0))["image"]
    # torchvision: Resize(256) truncates the long side, CenterCrop rounds the offsets.
    if width <= height:
        new_w, new_h = 256, int(256 * height / width)
    else:
        new_w, new_h = int(256 * width / height), 256
    top, left = int(round((new_h - 224) / 2.0)), int(round((new_w - 224) / 2.0))
    ref = np.asarray(Image.fromarray(pixels).resize((new_w, new_h), Image.BILINEAR)
                     .crop((left, top, left + 224, top + 224)))
    assert out.shape == (224, 224, 3)
    assert int(np.abs(out.astype(np.int16) - ref).max()) <= 1  # float box coordinates: rounding only


@pytest.mark.parametrize("backend", BACKENDS)
def test_center_crop_reduced_decode_close_to_reference(photo: bytes, backend: str) -> None:
    out = CenterCropDecode(64, resize_short=73, backend=backend)(_sample(photo), np.random.default_rng(0))["image"]
    with Image.open(io.BytesIO(photo)) as img:
        resized = img.convert("RGB").resize((int(73 * 800 / 600), 73), Image.BILINEAR)
    left, top = int(round((97 - 64) / 2.0)), int(round((73 - 64) / 2.0))
    ref = np.asarray(resized.crop((left, top, left + 64, top + 64)))
    assert decode.dct_scale_for(center_crop_box(800, 600, (64, 64), 73)[2:], (64, 64)) == 8
    assert _mad(out, ref) < REDUCED_MAD


def test_center_crop_defaults_and_rng_independence(photo: bytes) -> None:
    assert CenterCropDecode(224).resize_short == 256
    assert CenterCropDecode((224, 160)).resize_short == 256
    transform = CenterCropDecode((32, 48))
    a = transform(_sample(photo), np.random.default_rng(0))["image"]
    b = transform(_sample(photo), np.random.default_rng(99))["image"]
    assert a.shape == (32, 48, 3)
    np.testing.assert_array_equal(a, b)


# --- DecodeLabel, Compose ------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "label"), [(b"3", 3), (b" 12\n", 12), (b"-1", -1), ("7", 7), (5, 5),
                                               (np.int64(9), 9), (bytearray(b"41"), 41)])
def test_decode_label(value: object, label: int) -> None:
    out = DecodeLabel()({"__key__": "k", "cls": value}, np.random.default_rng(0))
    assert out["label"] == label and type(out["label"]) is int
    assert "cls" not in out


@pytest.mark.parametrize("value", [b"", b"abc", b"3.5", b"1_000", b"+3", b"\xff\xfe", "\u0663", True, None, 2.0])
def test_decode_label_garbage_names_key(value: object) -> None:
    with pytest.raises(SampleError, match=r"'shard-0/img_0007' \(index 7\).*'cls'") as info:
        DecodeLabel()(_sample(b"", cls=value), np.random.default_rng(0))
    assert info.value.key == "shard-0/img_0007" and info.value.index == 7


def test_decode_label_missing_field() -> None:
    with pytest.raises(SampleError, match="no field 'cls'"):
        DecodeLabel()({"__key__": "k", "jpg": b""}, np.random.default_rng(0))


def test_compose_applies_in_order_with_the_same_rng(photo: bytes) -> None:
    crop, label = RandomResizedCropDecode(24), DecodeLabel()
    composed = Compose([crop, label])
    out = composed(_sample(photo), np.random.default_rng(5))
    manual = label(crop(_sample(photo), np.random.default_rng(5)), np.random.default_rng(123))
    assert out["label"] == 3
    np.testing.assert_array_equal(out["image"], manual["image"])
    assert isinstance(composed.transforms, tuple)
    # Two random transforms share the stream: the second sees the draws after the first's.
    twice = Compose([RandomResizedCropDecode(8, out_field="a"), RandomResizedCropDecode(8, field="b")])
    both = twice({"__key__": "k", "jpg": photo, "b": photo}, np.random.default_rng(1))
    rng = np.random.default_rng(1)
    first = RandomResizedCropDecode(8, out_field="a")({"jpg": photo}, rng)["a"]
    second = RandomResizedCropDecode(8, field="b")({"b": photo}, rng)["image"]
    np.testing.assert_array_equal(both["a"], first)
    np.testing.assert_array_equal(both["image"], second)


def test_all_transforms_follow_the_protocol() -> None:
    for transform in (RandomResizedCropDecode(8), CenterCropDecode(8), DecodeImage(), DecodeLabel(), Compose([])):
        assert isinstance(transform, SampleTransform)


# --- configuration -----------------------------------------------------------------------------

@pytest.mark.parametrize(("make", "message"), [
    (lambda: RandomResizedCropDecode(-3), r"'size' must be a positive int .*\(got -3 that is a int\)"),
    (lambda: RandomResizedCropDecode((224,)), "'size'"),
    (lambda: RandomResizedCropDecode(True), "'size'"),
    (lambda: RandomResizedCropDecode(8, scale=(0.5, 0.1)), "'scale'"),
    (lambda: RandomResizedCropDecode(8, scale=(0.0, 1.0)), "'scale'"),
    (lambda: RandomResizedCropDecode(8, scale=(0.5, 1.5)), "'scale'"),
    (lambda: RandomResizedCropDecode(8, ratio=(2.0, 1.0)), "'ratio'"),
    (lambda: RandomResizedCropDecode(8, flip_p=1.5), "'flip_p'"),
    (lambda: RandomResizedCropDecode(8, field=""), "'field'"),
    (lambda: RandomResizedCropDecode(8, out_field=None), "'out_field'"),
    (lambda: RandomResizedCropDecode(8, interpolation="sinc"), "'interpolation' must be one of"),
    (lambda: CenterCropDecode(8, interpolation="sinc"), "'interpolation'"),
    (lambda: RandomResizedCropDecode(8, backend="nvjpeg"), "'backend'"),
    (lambda: CenterCropDecode(224, resize_short=200), "'resize_short' must be >= 224"),
    (lambda: CenterCropDecode(224, resize_short=0), "'resize_short'"),
    (lambda: DecodeImage(out_field=""), "'out_field'"),
    (lambda: DecodeLabel(field=None), "'field'"),
    (lambda: Compose(RandomResizedCropDecode(8)), "'transforms'"),
    (lambda: Compose([RandomResizedCropDecode(8), "flip"]), r"'transforms\[1\]'"),
])
def test_invalid_configuration_raises_config_error(make, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_config_is_frozen_and_normalised() -> None:
    transform = RandomResizedCropDecode(224, scale=[0.25, 1], ratio=(1, 2))
    assert transform.size == (224, 224) and transform.scale == (0.25, 1.0) and transform.ratio == (1.0, 2.0)
    assert transform.interpolation is Interpolation.BILINEAR
    assert CenterCropDecode(8, interpolation="bicubic").interpolation is Interpolation.BICUBIC
    with pytest.raises(AttributeError):
        transform.flip_p = 0.0  # type: ignore[misc]
