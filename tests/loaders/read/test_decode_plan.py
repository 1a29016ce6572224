"""Decode plans (``decode="device"``'s worker side): the same draws as the CPU path, what the device decoder
cannot take decoded there by the CPU path itself, and the JPEG frame they are judged by."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from loaders.errors import SampleError
from loaders.read import transforms
from loaders.read.decode_plan import EncodedImage, Fallback, fallback_reason, is_planning, planning
from loaders.read.jpeg_frame import read_frame
from loaders.read.transforms import (
    CenterCropDecode,
    Compose,
    DecodeImage,
    DecodeLabel,
    RandomResizedCropDecode,
    transform_can_defer_decode,
)
from tests.loaders.helpers import image_flavours
from tests.samples import photo_jpeg

FLAVOURS = image_flavours()


def _sample(data: bytes) -> dict[str, object]:
    return {"__key__": "shard-0/img_0007", "__index__": 7, "jpg": data, "cls": b"3"}


@pytest.mark.parametrize(("name", "sof", "components", "has_eoi"), [
    ("baseline", 0xC0, 3, True), ("progressive", 0xC2, 3, True), ("gray", 0xC0, 1, True),
    ("cmyk", 0xC0, 4, True), ("truncated", 0xC0, 3, False)])
def test_the_frame_header_is_read_from_the_markers(name: str, sof: int, components: int, has_eoi: bool) -> None:
    frame = read_frame(FLAVOURS[name])
    assert frame is not None
    assert (frame.sof, frame.components, frame.has_eoi, frame.precision) == (sof, components, has_eoi, 8)
    assert (frame.height, frame.width) == (96, 128)


@pytest.mark.parametrize("data", [b"", b"\xff\xd8", b"not a jpeg at all", b"\xff\xd8\xff\xe0\x00\x10JFIF",
                                  b"\xff\xd8\x00\x00\x00\x00"])
def test_markers_that_lead_to_no_frame_give_none(data: bytes) -> None:
    assert read_frame(data) is None


@pytest.mark.parametrize(("name", "reason"), [
    ("baseline", None), ("progressive", None), ("gray", None), ("444", None), ("bad_scan", None),
    ("png", Fallback.PNG), ("webp", Fallback.WEBP), ("cmyk", Fallback.CMYK), ("truncated", Fallback.TRUNCATED)])
def test_what_the_device_decoder_cannot_take_is_named(name: str, reason: Fallback | None) -> None:
    assert fallback_reason(FLAVOURS[name]) == reason


def test_other_formats_and_unreadable_headers_are_named() -> None:
    assert fallback_reason(b"GIF89a....") == Fallback.OTHER_FORMAT
    assert fallback_reason(b"\xff\xd8\xff\xe0garbage") == Fallback.UNREADABLE


def _cpu_and_plan(transform: transforms.SampleTransform, data: bytes, seed: int,
                  monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, object], dict[str, object], float, float]:
    """The CPU path's call of decode_crop_resize (its box and flip), the plan, and one draw after each."""
    seen: dict[str, object] = {}
    real = transforms.decode_crop_resize

    def spy(data: bytes, box: tuple[float, ...], size: tuple[int, int], **kw: object) -> np.ndarray:
        seen.update(box=tuple(float(v) for v in box), flip=kw["flip"], size=size)
        return real(data, box, size, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(transforms, "decode_crop_resize", spy)
    cpu_rng, plan_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    transform(_sample(data), cpu_rng)
    with planning():
        plan = transform(_sample(data), plan_rng)["image"]
    assert isinstance(plan, EncodedImage)
    planned = {"box": plan.box, "flip": plan.flip, "size": (plan.size[1], plan.size[0]) if plan.size else None}
    return seen, planned, float(cpu_rng.random()), float(plan_rng.random())


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("make", [lambda: RandomResizedCropDecode(64), lambda: RandomResizedCropDecode((48, 80)),
                                  lambda: CenterCropDecode(64),
                                  lambda: Compose([RandomResizedCropDecode(32, flip_p=0.3), DecodeLabel()])])
def test_a_plan_holds_exactly_the_crop_and_flip_the_cpu_path_decodes(make, seed: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    data = photo_jpeg(300 + 17 * seed, 400 - 9 * seed, seed=seed)
    cpu, plan, cpu_next, plan_next = _cpu_and_plan(make(), data, seed, monkeypatch)
    assert plan == cpu  # bit-identical floats, the same flip, the same output size
    assert plan_next == cpu_next  # the same draws in the same order: what comes after draws alike


def test_a_plan_carries_the_bytes_the_scale_and_the_sample() -> None:
    data = photo_jpeg(600, 800, seed=3)
    with planning():
        out = RandomResizedCropDecode(64, scale=(0.9, 1.0))(_sample(data), np.random.default_rng(0))
    plan = out["image"]
    assert isinstance(plan, EncodedImage) and "jpg" not in out and out["cls"] == b"3"
    assert plan.data == data and plan.pixels is None and plan.reason is None
    assert plan.full_size == (600, 800) and plan.size == (64, 64) and plan.scale == 8  # 1/8 still covers 64 px
    assert (plan.key, plan.index) == ("shard-0/img_0007", 7)


@pytest.mark.parametrize("name", ["png", "webp", "cmyk"])
def test_what_the_device_cannot_take_is_decoded_in_the_worker_with_the_cpu_paths_pixels(name: str) -> None:
    transform = RandomResizedCropDecode(40)
    expected = transform(_sample(FLAVOURS[name]), np.random.default_rng(5))["image"]
    with planning():
        plan = transform(_sample(FLAVOURS[name]), np.random.default_rng(5))["image"]
    assert plan.reason == name and plan.data == b""
    assert plan.pixels is not None and np.array_equal(plan.pixels, expected)


@pytest.mark.parametrize("name", ["truncated", "broken_progressive"])
def test_a_broken_image_fails_where_the_cpu_path_fails(name: str) -> None:
    transform = DecodeImage() if name == "truncated" else RandomResizedCropDecode(40)
    with pytest.raises(SampleError) as cpu:
        transform(_sample(FLAVOURS[name]), np.random.default_rng(0))
    if name == "truncated":  # decoded (and failing) in the worker, as on the CPU path
        with planning(), pytest.raises(SampleError) as planned:
            transform(_sample(FLAVOURS[name]), np.random.default_rng(0))
        assert type(planned.value) is type(cpu.value) and str(planned.value) == str(cpu.value)
    else:  # every check a worker makes passes: the device side finds it (tests/loaders/batch_decode)
        with planning():
            assert transform(_sample(FLAVOURS[name]), np.random.default_rng(0))["image"].reason is None


def test_decode_image_plans_the_whole_image_at_its_own_size() -> None:
    with planning():
        plan = DecodeImage()(_sample(FLAVOURS["progressive"]), np.random.default_rng(0))["image"]
        png = DecodeImage()(_sample(FLAVOURS["png"]), np.random.default_rng(0))["image"]
    assert plan.size is None and plan.full_size == (96, 128) and plan.box == (0.0, 0.0, 128.0, 96.0)
    assert plan.scale == 1 and not plan.flip
    assert png.reason == Fallback.PNG and png.pixels.shape == (96, 128, 3)


def test_planning_is_scoped_to_the_block_and_the_thread() -> None:
    assert not is_planning()
    seen: list[bool] = []
    with planning():
        assert is_planning()
        with planning(False):
            assert not is_planning()
        assert is_planning()
        thread = threading.Thread(target=lambda: seen.append(is_planning()))
        thread.start()
        thread.join()
    assert not is_planning() and seen == [False]
    # Outside the scope a transform decodes, as always.
    out = RandomResizedCropDecode(16)(_sample(FLAVOURS["baseline"]), np.random.default_rng(0))
    assert isinstance(out["image"], np.ndarray) and out["image"].shape == (16, 16, 3)


def test_which_transforms_can_defer_their_decode() -> None:
    assert transform_can_defer_decode(RandomResizedCropDecode(8))
    assert transform_can_defer_decode(Compose([CenterCropDecode(8), DecodeLabel()]))
    assert transform_can_defer_decode(DecodeImage())
    assert not transform_can_defer_decode(None)
    assert not transform_can_defer_decode(DecodeLabel())
    assert not transform_can_defer_decode(Compose([DecodeLabel()]))
    assert not transform_can_defer_decode(Compose([RandomResizedCropDecode(8), lambda s, rng: s]))
    assert not transform_can_defer_decode(lambda s, rng: s)
