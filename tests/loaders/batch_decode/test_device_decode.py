"""``DeviceDecode`` on the CPU (nvImageCodec's CPU backend, the code path CUDA runs with another backend): the CPU
path's pixels within the stated tolerance, each JPEG decoded only in its crop's window (the same pixels as a whole
decode), the worker's and the host's decodes counted and exact, failures returned, memory budgets that change
nothing but the chunks, the decoder made on first use and released by ``close()``.

The tolerance, in 8-bit input levels, and why: the CPU path decodes a crop at libjpeg's DCT scale 1/n
(n = 1, 2, 4, 8: the smallest image that still covers the output) and resizes that with Pillow; the device
path decodes the crop's window at full size (nvImageCodec has no scaled decode), averages n x n blocks and
resizes with Pillow's own filter taps in float. Where n = 1 the two differ only by Pillow's fixed-point taps:
at most a level on rare pixels. Where n > 1 a block average is not libjpeg's scaled IDCT (a truncated DCT), so
edges differ: the mean absolute difference per image stays under ``MAD_PER_IMAGE``, under ``MAD_ALL`` over a
set, though single pixels on edges move further (``MAX_PIXEL``). Measured (``_photos(60)``: photo-like JPEGs from 85x64
to 1600x1200, 4:2:0, 4:2:2, 4:4:4 and grey) with nvImageCodec 0.9's CPU backend and Pillow-SIMD 12.1.1: mean
0.16 (random crop 224), 0.18 (centre crop 224), 0.31 (bicubic 160x128); worst image 1.06; worst pixel 23;
images decoded at full scale by the CPU path: at most 0.014 (the host decoder it replaced gave the same, with
stock Pillow 13.0 too). The GPU's IDCT (nvJPEG's, not libjpeg's) adds its own rounding:
test_device_decode_cuda.py allows half a level more, the device suite records it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from loaders.batch_decode import (
    DecodeBackend,
    DecodeLimits,
    DeviceDecode,
    EncodedBatch,
    NvImageCodecDecoder,
    pack_encoded,
)
from loaders.errors import ConfigError, SampleError
from loaders.read.decode import dct_scale_for
from loaders.read.decode_plan import planning
from loaders.read.transforms import CenterCropDecode, DecodeImage, RandomResizedCropDecode
from tests.loaders.helpers import image_flavours, level_difference
from tests.samples import photo_jpeg

MAD_PER_IMAGE = 1.5  # mean |difference| per image, 8-bit levels (see the module docstring)
MAD_ALL = 0.75  # mean |difference| over a set of images
MAX_PIXEL = 40  # a single pixel, on an edge where the block average and the scaled IDCT part most
MAD_FULL_SCALE = 0.05  # where the CPU path decodes at full scale (n = 1): only Pillow's fixed-point taps differ

CPU = torch.device("cpu")
SIZES = [(375, 500), (500, 375), (768, 1024), (1200, 1600), (64, 85), (333, 500)]
TRANSFORMS: dict[str, Callable[[], Any]] = {
    "random_crop_224": lambda: RandomResizedCropDecode(224),
    "center_crop_224": lambda: CenterCropDecode(224),
    "random_crop_bicubic_160x128": lambda: RandomResizedCropDecode((160, 128), interpolation="bicubic"),
}


def _cpu_decoder() -> NvImageCodecDecoder:
    return NvImageCodecDecoder(CPU, DecodeBackend.CPU)


def _plain(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype)


def _photos(count: int) -> list[bytes]:
    """Photo-like JPEGs of the sizes above, in 4:2:0, 4:2:2, 4:4:4, and one in grey."""
    photos = [photo_jpeg(*SIZES[k % len(SIZES)], seed=k, subsampling=k % 3) for k in range(count - 1)]
    return [*photos, photo_jpeg(480, 640, seed=99, mode="L")]


def _both(transform: Any, images: list[bytes], decoder: DeviceDecode | None = None
          ) -> tuple[list[np.ndarray], np.ndarray, EncodedBatch]:
    """The CPU path's images and the device path's batch (nvImageCodec, CPU) for ``images``, rng seeded per
    sample."""
    samples = [{"__key__": f"k{i}", "__index__": i, "jpg": data} for i, data in enumerate(images)]
    cpu = [transform(dict(s), np.random.default_rng(i))["image"] for i, s in enumerate(samples)]
    with planning():
        plans = [transform(dict(s), np.random.default_rng(i))["image"] for i, s in enumerate(samples)]
    encoded = pack_encoded(plans, _plain)
    decoder = decoder or DeviceDecode(CPU, _cpu_decoder())
    out, failures = decoder.decode_field(encoded)
    assert failures == []
    return cpu, out.numpy(), encoded


@pytest.fixture(scope="module")
def photos() -> list[bytes]:
    return _photos(18)


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_device_pixels_are_the_cpu_paths_within_the_stated_tolerance(name: str, photos: list[bytes]) -> None:
    cpu, device, encoded = _both(TRANSFORMS[name](), photos)
    mads = [level_difference(c, d) for c, d in zip(cpu, device)]
    assert max(mads) <= MAD_PER_IMAGE, mads
    assert np.mean(mads) <= MAD_ALL, mads
    assert max(int(np.abs(c.astype(np.int16) - d).max()) for c, d in zip(cpu, device)) <= MAX_PIXEL
    full_scale = [m for m, n in zip(mads, encoded.scales) if n == 1]
    assert full_scale and max(full_scale) <= MAD_FULL_SCALE  # only Pillow's rounding differs there
    assert set(encoded.scales.tolist()) >= {1, 2}  # both regimes were measured


def test_a_whole_image_decodes_to_the_cpu_paths_pixels() -> None:
    images = [photo_jpeg(120, 160, seed=k, subsampling=k % 3) for k in range(5)]
    cpu, device, _ = _both(DecodeImage(), images)
    # Both decoders are libjpeg-turbo's accurate integer IDCT with the same upsampling.
    assert all(np.abs(c.astype(np.int16) - d).max() <= 1 for c, d in zip(cpu, device))


def test_what_the_worker_decoded_lands_in_its_rows_and_is_counted_by_reason() -> None:
    flavours = image_flavours()
    names = ["baseline", "png", "progressive", "cmyk", "webp", "gray", "444"]
    decoder = DeviceDecode(CPU, _cpu_decoder())
    cpu, device, encoded = _both(RandomResizedCropDecode(48), [flavours[n] for n in names], decoder)
    assert encoded.fallback_rows.tolist() == [1, 3, 4] and encoded.reasons == ("png", "cmyk", "webp")
    for row in (1, 3, 4):  # decoded by the CPU path itself, in the worker
        assert np.array_equal(device[row], cpu[row])
    counts = decoder.counts()
    assert (counts.device, counts.worker, counts.host_retried, counts.failed) == (4, 3, 0, 0)
    assert counts.worker_reasons == {"png": 1, "cmyk": 1, "webp": 1}


def test_a_jpeg_the_batch_decoder_returns_no_image_for_is_decoded_on_the_host_by_the_cpu_path() -> None:
    class Refusing(NvImageCodecDecoder):  # as nvImageCodec answers for an image no backend of it takes
        def decode(self, encoded: Any, regions: Any) -> list[torch.Tensor | None]:
            return [None if k == 1 else image for k, image in enumerate(super().decode(encoded, regions))]

    decoder = DeviceDecode(CPU, Refusing(CPU, DecodeBackend.CPU))
    images = [photo_jpeg(96, 128, seed=k, subsampling=k) for k in range(3)]
    cpu, device, _ = _both(RandomResizedCropDecode(48), images, decoder)
    assert np.array_equal(device[1], cpu[1])  # the CPU path's own pixels
    assert level_difference(device[0], cpu[0]) <= MAD_PER_IMAGE and level_difference(device[2], cpu[2]) <= MAD_PER_IMAGE
    counts = decoder.counts()
    assert (counts.device, counts.host_retried, counts.failed) == (2, 1, 0)


def test_a_damaged_scan_decodes_on_the_cpu_backend_as_the_cpu_path_decodes_it() -> None:
    # libjpeg-turbo in nvImageCodec recovers from a scrambled scan as Pillow's libjpeg does (a strict decoder
    # would refuse it and the host would redo it): the CPU path's garbage, within the tolerance.
    flavours = image_flavours(240, 320)
    decoder = DeviceDecode(CPU, _cpu_decoder())
    cpu, device, _ = _both(RandomResizedCropDecode(48), [flavours["baseline"], flavours["bad_scan"]], decoder)
    assert all(level_difference(c, d) <= MAD_PER_IMAGE for c, d in zip(cpu, device))
    assert (decoder.counts().device, decoder.counts().host_retried) == (2, 0)


def test_a_sample_no_decoder_can_decode_is_returned_with_the_cpu_paths_error() -> None:
    flavours = image_flavours()
    transform = RandomResizedCropDecode(48)
    with planning():
        plans = [transform({"__key__": f"k{i}", "__index__": 10 + i, "jpg": data}, np.random.default_rng(i))["image"]
                 for i, data in enumerate([flavours["baseline"], flavours["broken_progressive"]])]
    decoder = DeviceDecode(CPU, _cpu_decoder())
    out, failures = decoder.decode_field(pack_encoded(plans, _plain))
    assert out.shape == (2, 48, 48, 3)
    assert [(f.row, f.index) for f in failures] == [(1, 11)]
    assert isinstance(failures[0].error, SampleError) and failures[0].error.key == "k1"
    assert decoder.counts().failed == 1


class _Recording(NvImageCodecDecoder):
    """nvImageCodec's CPU backend, keeping the regions asked of it, call by call."""

    def __init__(self) -> None:
        super().__init__(CPU, DecodeBackend.CPU)
        self.calls: list[list[Any]] = []

    def decode(self, encoded: Any, regions: Any) -> list[torch.Tensor | None]:
        self.calls.append(list(regions))
        return super().decode(encoded, regions)


def test_tight_memory_budgets_change_the_calls_not_the_pixels(photos: list[bytes]) -> None:
    roomy_decoder, tight_decoder = _Recording(), _Recording()
    _, roomy, _ = _both(RandomResizedCropDecode(64), photos, DeviceDecode(CPU, roomy_decoder))
    assert [len(call) for call in roomy_decoder.calls] == [len(photos)]  # the whole batch in one decoder call
    limits = DecodeLimits(max_decoded_bytes=1 << 20, max_work_bytes=1 << 20)
    tight = DeviceDecode(CPU, tight_decoder, limits, regions=False)  # whole images: 1 MiB groups
    _, chunked, _ = _both(RandomResizedCropDecode(64), photos, tight)
    calls = [len(call) for call in tight_decoder.calls]
    assert len(calls) > 1 and sum(calls) == len(photos)
    assert np.array_equal(roomy, chunked)


def test_every_encoded_field_of_a_nested_batch_is_decoded() -> None:
    images = [photo_jpeg(60, 80, seed=k) for k in range(3)]
    with planning():
        plans = [DecodeImage()({"jpg": data}, np.random.default_rng(0))["image"] for data in images]
    encoded = pack_encoded(plans, _plain)
    labels = torch.arange(3)
    batch = {"image": encoded, "pair": [encoded, labels], "meta": {"keys": ["a", "b", "c"]}}
    decoded, failures = DeviceDecode(CPU, _cpu_decoder()).decode(batch)
    assert failures == [] and decoded["meta"] == {"keys": ["a", "b", "c"]} and decoded["pair"][1] is labels
    assert decoded["image"].shape == (3, 60, 80, 3) and decoded["image"].dtype == torch.uint8
    assert torch.equal(decoded["image"], decoded["pair"][0])


def test_images_of_other_sizes_do_not_batch_as_on_the_cpu_path() -> None:
    with planning():
        plans = [DecodeImage()({"__key__": f"k{i}", "jpg": photo_jpeg(60, 80 + i, seed=i)}, np.random.default_rng(0))
                 ["image"] for i in range(2)]
    with pytest.raises(RuntimeError, match=r"sample 1 of the batch has shape \(60, 81, 3\), sample 0 has \(60, 80"):
        pack_encoded(plans, _plain)


def test_the_dct_scale_of_a_plan_is_the_cpu_paths() -> None:
    with planning():
        plan = CenterCropDecode(64)({"jpg": photo_jpeg(600, 800, seed=1)}, np.random.default_rng(0))["image"]
    assert plan.scale == dct_scale_for(plan.box[2:], (64, 64)) == 8


@pytest.mark.parametrize("value", [0, 1000, True, 2.0 * (1 << 20)])
def test_limits_are_checked(value: object) -> None:
    with pytest.raises(ConfigError, match="max_decoded_bytes"):
        DecodeLimits(max_decoded_bytes=value)  # type: ignore[arg-type]


def test_an_image_decoded_at_another_size_than_its_header_says_is_redone_by_the_cpu_path() -> None:
    class Clipping(NvImageCodecDecoder):  # a decoder that returns the second image short of a row
        def decode(self, encoded: Any, regions: Any) -> list[torch.Tensor | None]:
            images = super().decode(encoded, regions)
            return [image[:, :-1] if image is not None and len(images) > 1 and k == 1 else image
                    for k, image in enumerate(images)]

    decoder = DeviceDecode(CPU, Clipping(CPU, DecodeBackend.CPU))
    cpu, device, _ = _both(RandomResizedCropDecode(48), [photo_jpeg(96, 128, seed=k) for k in range(3)], decoder)
    assert np.array_equal(device[1], cpu[1])
    assert (decoder.counts().device, decoder.counts().host_retried) == (2, 1)


def test_each_jpeg_is_decoded_only_in_its_crops_window_with_a_whole_decodes_pixels(photos: list[bytes]) -> None:
    limits = DecodeLimits(max_decoded_bytes=16 << 20)  # the windows: 14.5 MiB, the whole images: 28.3
    windowed_decoder, whole_decoder = _Recording(), _Recording()
    _, windowed, encoded = _both(RandomResizedCropDecode(64), photos, DeviceDecode(CPU, windowed_decoder, limits))
    _, whole, _ = _both(RandomResizedCropDecode(64), photos, DeviceDecode(CPU, whole_decoder, limits, regions=False))
    assert np.array_equal(windowed, whole)  # a region decodes to the same pixels as that crop of the whole image
    assert all(r is None for call in whole_decoder.calls for r in call)
    # the windows fit one call where the whole images do not
    assert len(windowed_decoder.calls) == 1 and len(whole_decoder.calls) == 2
    regions = windowed_decoder.calls[0]
    assert len(regions) == len(photos)
    for (top, left, bottom, right), (height, width), box, scale in zip(regions, encoded.full_sizes, encoded.boxes,
                                                                       encoded.scales):
        box_left, box_top, box_w, box_h = box
        assert 0 <= top <= box_top and 0 <= left <= box_left  # the region holds the crop box...
        assert box_top + box_h <= bottom <= height and box_left + box_w <= right <= width
        assert top % scale == 0 and left % scale == 0  # ...aligned with the DCT blocks of the CPU path's scale
    areas = [(bottom - top) * (right - left) / (height * width)
             for (top, left, bottom, right), (height, width) in zip(regions, encoded.full_sizes)]
    assert np.mean(areas) < 0.75  # random crops: most of each image is never decoded


def test_the_decoder_is_made_on_first_use_and_released_by_close() -> None:
    decoder = _cpu_decoder()
    device = DeviceDecode(CPU, decoder)
    assert not decoder.is_open  # constructors make nothing
    _both(DecodeImage(), [photo_jpeg(60, 80, seed=1)], device)
    assert decoder.is_open
    device.close()
    assert not decoder.is_open
    _, again, _ = _both(DecodeImage(), [photo_jpeg(60, 80, seed=1)], device)  # a later call makes it anew
    assert decoder.is_open and again.shape == (1, 60, 80, 3)
    device.close()
