"""Pure geometry of the batched crop + resize, on the host: which pixels each sample reads, and chunks.

The CPU path decodes a crop at DCT scale 1/n (libjpeg's scaled IDCT) and resizes the box / n
with Pillow. The device path decodes at full size, averages n x n blocks (aligned with the
image's origin, as the DCT blocks are) and resizes with Pillow's own filter coefficients
(``Resample.c``'s ``precompute_coeffs``: the same centres, supports and bounds, in float64
here). ``Axis`` is one axis of one sample's resize: the source span it reads and, per output
pixel, the centre and the bounds of its taps. A flip (mirror after the resize) is the output
order reversed. The rest is chunking: which samples are decoded in one call and resampled in
one pair of batched matrix products, so that the memory either takes stays under its budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loaders.read.decode import Interpolation

__all__ = ["SUPPORT", "Axis", "Window", "axis_plan", "chunk_params", "decode_groups", "resample_chunks",
           "window_for", "work_bytes"]

# Pillow's filter supports (Resample.c), in source pixels before scaling by the downscale factor.
SUPPORT = {Interpolation.NEAREST: 0.0, Interpolation.BOX: 0.5, Interpolation.BILINEAR: 1.0,
           Interpolation.HAMMING: 1.0, Interpolation.BICUBIC: 2.0, Interpolation.LANCZOS: 3.0}
FLOAT_BYTES = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class Axis:
    """One axis of one sample's resize, in the 1/n image. start, stop: the source span read
    [start, stop). centers: float64 [out], each output pixel's source centre minus ``start``;
    lo, hi: int64 [out], its taps' bounds [lo, hi) minus ``start``; inv_scale: 1 / the filter's
    scale (Pillow's ``ss``)."""

    start: int
    stop: int
    centers: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    inv_scale: float

    @property
    def span(self) -> int:
        return self.stop - self.start


def axis_plan(in_size: int, begin: float, end: float, out_size: int, interpolation: Interpolation, *,
              reverse: bool = False) -> Axis:
    """The resize of source [begin, end) of an axis of ``in_size`` pixels to ``out_size`` pixels, as
    Pillow computes it; ``reverse``: the outputs mirrored (a left-right flip after the resize)."""
    scale = (end - begin) / out_size
    filter_scale = max(scale, 1.0)
    support = SUPPORT[interpolation] * filter_scale
    centers = begin + (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    if interpolation is Interpolation.NEAREST:  # Pillow samples the pixel under the centre (its affine path)
        lo = np.clip(np.floor(centers), 0, in_size - 1).astype(np.int64)
        hi = lo + 1
    else:
        lo = np.maximum(np.floor(centers - support + 0.5), 0).astype(np.int64)
        hi = np.minimum(np.floor(centers + support + 0.5), in_size).astype(np.int64)
    if reverse:
        centers, lo, hi = centers[::-1], lo[::-1], hi[::-1]
    start, stop = int(lo.min()), int(hi.max())
    return Axis(start=start, stop=stop, centers=centers - start, lo=lo - start, hi=hi - start,
                inv_scale=1.0 / filter_scale)


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """What sample ``row`` reads: full-resolution rows [top, bottom) and columns [left, right), averaged
    in ``scale`` x ``scale`` blocks to ``y.span`` x ``x.span`` pixels, then resized along ``x`` and ``y``."""

    row: int
    scale: int
    top: int
    bottom: int
    left: int
    right: int
    y: Axis
    x: Axis


def window_for(row: int, full: tuple[int, int], box: Sequence[float], scale: int, flip: bool,
               out: tuple[int, int], interpolation: Interpolation) -> Window:
    """Sample ``row``'s window: full (height, width), box (left, top, width, height) in full-resolution
    pixels, the CPU path's DCT scale, out (height, width)."""
    height, width = full
    n = scale
    left, top, box_w, box_h = (float(v) / n for v in box)
    x = axis_plan(math.ceil(width / n), left, left + box_w, out[1], interpolation, reverse=flip)
    y = axis_plan(math.ceil(height / n), top, top + box_h, out[0], interpolation)
    return Window(row=row, scale=n, top=y.start * n, bottom=min(y.stop * n, height), left=x.start * n,
                  right=min(x.stop * n, width), y=y, x=x)


def work_bytes(count: int, span: tuple[int, int], out: tuple[int, int]) -> int:
    """Device bytes of one resampling chunk: ``count`` samples read padded to span (rows, cols): float32
    sources, horizontal pass and vertical pass; both weight matrices, built in float64 (3 times a float32's
    bytes at their peak: the float64 taps and their float32 copy)."""
    rows, cols = span
    out_h, out_w = out
    per_sample = 3 * rows * cols + 3 * rows * out_w + 3 * (out_w * cols + out_h * rows) + 3 * out_h * out_w
    return FLOAT_BYTES * count * per_sample


def resample_chunks(windows: Sequence[Window], out: tuple[int, int], max_bytes: int) -> list[list[Window]]:
    """The windows in chunks whose ``work_bytes`` stay under ``max_bytes`` (a chunk holds at least one):
    largest first, so that the samples of a chunk are padded to similar sizes."""
    ordered = sorted(windows, key=lambda w: w.y.span * w.x.span, reverse=True)
    chunks: list[list[Window]] = []
    rows = cols = 0
    for window in ordered:
        grown = (max(rows, window.y.span), max(cols, window.x.span))
        if chunks and work_bytes(len(chunks[-1]) + 1, grown, out) <= max_bytes:
            chunks[-1].append(window)
            rows, cols = grown
        else:
            chunks.append([window])
            rows, cols = window.y.span, window.x.span
    return chunks


def chunk_params(chunk: Sequence[Window], out: tuple[int, int]) -> np.ndarray:
    """float64 [k, 2, 4, max(out)]: per sample, per axis (x, then y), the rows centres, lo, hi and
    inv_scale (repeated), padded with zeros past each axis's output size. One host-to-device copy.
    float64 as Pillow computes them: a tap on a filter's edge (the box filter's +-0.5) stays on its side."""
    out_h, out_w = out
    params = np.zeros((len(chunk), 2, 4, max(out_h, out_w)), dtype=np.float64)
    for k, window in enumerate(chunk):
        for a, (axis, size) in enumerate(((window.x, out_w), (window.y, out_h))):
            params[k, a, 0, :size] = axis.centers
            params[k, a, 1, :size] = axis.lo
            params[k, a, 2, :size] = axis.hi
            params[k, a, 3, :] = axis.inv_scale
    return params


def decode_groups(rows: Sequence[int], full_sizes: np.ndarray, max_bytes: int) -> list[list[int]]:
    """``rows`` in order, grouped so that each group's full-resolution RGB images (height x width x 3
    bytes each) stay under ``max_bytes`` (a group holds at least one): one decoder call each."""
    groups: list[list[int]] = []
    total = 0
    for row in rows:
        height, width = (int(v) for v in full_sizes[row])
        size = 3 * height * width
        if groups and total + size <= max_bytes:
            groups[-1].append(row)
            total += size
        else:
            groups.append([row])
            total = size
    return groups
