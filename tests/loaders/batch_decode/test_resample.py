"""The batched crop + resize: Pillow's own filters, computed in tensor ops on each window's decoded region; chunks
and decoder calls under budgets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from loaders.batch_decode.geometry import (
    Window,
    decode_groups,
    resample_chunks,
    window_for,
    work_bytes,
)
from loaders.batch_decode.resample import resample_chunk
from loaders.read.decode import Interpolation, pil_filter
from tests.samples import photo_pixels

CPU = torch.device("cpu")
BOXES = [(0.0, 0.0, 160.0, 120.0), (13.0, 7.0, 97.0, 61.0), (10.25, 3.5, 120.5, 99.75), (100.0, 40.0, 21.0, 33.0),
         (0.0, 0.0, 7.5, 120.0)]
SIZES = [(48, 64), (64, 64), (120, 160), (5, 9)]  # (height, width): shrinking, equal, growing


def _pillow(pixels: np.ndarray, box: tuple[float, ...], out: tuple[int, int], interpolation: Interpolation,
            flip: bool = False) -> np.ndarray:
    left, top, width, height = box
    image = Image.fromarray(pixels).resize((out[1], out[0]), pil_filter(interpolation),
                                           box=(left, top, left + width, top + height))
    array = np.asarray(image)
    return array[:, ::-1] if flip else array


def _region_of(image: torch.Tensor, window: Window) -> torch.Tensor:
    """What the decoder hands ``resample_chunk`` for ``window``: its region of ``image`` (uint8 [3, H, W])."""
    return image[:, window.top:window.bottom, window.left:window.right]


def _ours(pixels: np.ndarray, box: tuple[float, ...], out: tuple[int, int], interpolation: Interpolation,
          flip: bool = False) -> np.ndarray:
    image = torch.from_numpy(pixels).permute(2, 0, 1)
    window = window_for(0, pixels.shape[:2], box, 1, flip, out, interpolation)
    return resample_chunk({0: _region_of(image, window)}, [window], out, interpolation, CPU)[0].numpy()


@pytest.mark.parametrize("interpolation", list(Interpolation))
@pytest.mark.parametrize("box", BOXES)
@pytest.mark.parametrize("out", SIZES)
def test_the_resize_is_pillows_at_full_scale(interpolation: Interpolation, box: tuple[float, ...],
                                             out: tuple[int, int]) -> None:
    pixels = photo_pixels(120, 160, seed=4)
    expected, got = _pillow(pixels, box, out, interpolation), _ours(pixels, box, out, interpolation)
    diff = np.abs(expected.astype(np.int16) - got.astype(np.int16))
    # Pillow rounds its filter taps to fixed point (stock: 22 bits; Pillow-SIMD: about 15) where ours stay
    # float, and stock Pillow >= 13 runs the vertical pass first when the height shrinks more: a sum on a
    # rounding edge lands a level off (two, once, with Pillow-SIMD's lanczos); on the 5 x 9 output one such
    # pixel is 0.02 of the mean. Nearest neighbour picks pixels: exact.
    assert diff.max() <= (0 if interpolation is Interpolation.NEAREST else 2)
    assert diff.mean() <= 0.2
    assert (diff > 1).mean() <= 0.01


@pytest.mark.parametrize("interpolation", [Interpolation.BILINEAR, Interpolation.BICUBIC])
def test_a_flip_mirrors_the_resized_crop(interpolation: Interpolation) -> None:
    pixels = photo_pixels(120, 160, seed=5)
    box = (10.25, 3.5, 120.5, 99.75)
    flipped = _ours(pixels, box, (64, 48), interpolation, flip=True)
    assert np.array_equal(flipped, _ours(pixels, box, (64, 48), interpolation)[:, ::-1])


def test_samples_resized_in_one_chunk_equal_each_alone() -> None:
    images = {row: torch.from_numpy(photo_pixels(90 + 20 * row, 120 - 10 * row, seed=row)).permute(2, 0, 1)
              for row in range(4)}
    boxes = [(0.0, 0.0, 120.0, 90.0), (5.0, 9.0, 60.0, 80.0), (20.5, 1.0, 70.0, 70.0), (0.0, 30.0, 90.0, 100.0)]
    windows = [window_for(row, tuple(images[row].shape[1:]), boxes[row], 1 + row % 2, row == 2, (32, 40),
                          Interpolation.BILINEAR) for row in range(4)]
    regions = {w.row: _region_of(images[w.row], w) for w in windows}
    together = resample_chunk(regions, windows, (32, 40), Interpolation.BILINEAR, CPU)
    for k, window in enumerate(windows):
        alone = resample_chunk(regions, [window], (32, 40), Interpolation.BILINEAR, CPU)
        assert torch.equal(together[k], alone[0])


def test_block_averaging_reads_whole_blocks_from_the_image_origin() -> None:
    # An image constant on each 4x4 block (origin-aligned) averages to its blocks exactly: at scale 4 and a
    # box that is the whole image, the output is the block values.
    blocks = np.random.default_rng(0).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    pixels = np.repeat(np.repeat(blocks, 4, axis=0), 4, axis=1)
    image = torch.from_numpy(pixels).permute(2, 0, 1)
    window = window_for(0, (24, 32), (0.0, 0.0, 32.0, 24.0), 4, False, (6, 8), Interpolation.BILINEAR)
    assert (window.top, window.bottom, window.left, window.right) == (0, 24, 0, 32)
    out = resample_chunk({0: image}, [window], (6, 8), Interpolation.BILINEAR, CPU)[0].numpy()
    assert np.array_equal(out, blocks)


def test_resampling_chunks_stay_under_the_budget_and_hold_every_window_once() -> None:
    windows = [window_for(row, (200 + 37 * row, 300 - 11 * row), (3.0, 5.0, 150.0 - row, 140.0), 1, False,
                          (64, 64), Interpolation.BILINEAR) for row in range(12)]
    one = work_bytes(1, (max(w.y.span for w in windows), max(w.x.span for w in windows)), (64, 64))
    chunks = resample_chunks(windows, (64, 64), max_bytes=3 * one)
    assert sorted(w.row for chunk in chunks for w in chunk) == list(range(12))
    assert len(chunks) > 1
    for chunk in chunks:
        span = (max(w.y.span for w in chunk), max(w.x.span for w in chunk))
        assert work_bytes(len(chunk), span, (64, 64)) <= 3 * one
    assert len(resample_chunks(windows, (64, 64), max_bytes=1)) == 12  # each alone, however small the budget


def test_decoder_calls_keep_order_and_stay_under_the_budget() -> None:
    sizes = np.array([[100, 100], [200, 100], [100, 100], [50, 50], [300, 300]], dtype=np.int64)
    groups = decode_groups([0, 1, 2, 3, 4], sizes, max_bytes=3 * 100 * 100 * 3)
    assert groups == [[0, 1], [2, 3], [4]]  # the last alone: larger than the budget by itself
    assert decode_groups([1, 3], sizes, max_bytes=10**9) == [[1, 3]]
