"""Pure geometry of the batched crop + resize, on the host: which pixels each sample reads, and chunks.

The CPU path decodes a crop at DCT scale 1/n (libjpeg's scaled IDCT) and resizes the box / n
with Pillow. The device path decodes the window (a ``Window``: the region its resize reads) at
full resolution, averages n x n blocks (aligned with the image's origin, as the DCT blocks are:
a window's top and left are multiples of n) and resizes with Pillow's own filter coefficients
(``Resample.c``'s ``precompute_coeffs``: the same centres, supports and bounds, in float64 here).
``Axis`` is one axis of one sample's resize: the source span it reads and, per output pixel,
the centre and the bounds of its taps. A flip (mirror after the resize) is the output order
reversed. The rest is chunking: which samples are decoded in one call and resampled in
one pair of batched matrix products, so that the memory either takes stays under its budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loaders.read.decode import Interpolation

__all__ = ["SUPPORT", "Axis", "Window", "axis_plans", "chunk_params", "decode_groups", "resample_chunks",
           "window_for", "windows_for", "work_bytes"]

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


def axis_plans(in_sizes: np.ndarray, begins: np.ndarray, ends: np.ndarray, out_size: int,
               interpolation: Interpolation, reverse: np.ndarray) -> list[Axis]:
    """Per sample, the resize of source [begin, end) of an axis of ``in_size`` pixels to ``out_size`` pixels,
    as Pillow computes it (all samples at once: float64 [n] arguments, n results); ``reverse`` (bool [n]):
    the outputs mirrored (a left-right flip after the resize)."""
    scale = (ends - begins) / out_size
    filter_scale = np.maximum(scale, 1.0)
    support = (SUPPORT[interpolation] * filter_scale)[:, None]
    centers = begins[:, None] + (np.arange(out_size, dtype=np.float64) + 0.5)[None, :] * scale[:, None]
    limit = in_sizes[:, None]
    if interpolation is Interpolation.NEAREST:  # Pillow samples the pixel under the centre (its affine path)
        lo = np.clip(np.floor(centers), 0, limit - 1).astype(np.int64)
        hi = lo + 1
    else:
        lo = np.maximum(np.floor(centers - support + 0.5), 0).astype(np.int64)
        hi = np.minimum(np.floor(centers + support + 0.5), limit).astype(np.int64)
    flipped = reverse[:, None]
    centers, lo, hi = (np.where(flipped, a[:, ::-1], a) for a in (centers, lo, hi))
    starts, stops = lo.min(axis=1), hi.max(axis=1)
    return [Axis(start=int(start), stop=int(stop), centers=centers[k] - start, lo=lo[k] - start, hi=hi[k] - start,
                 inv_scale=float(1.0 / filter_scale[k])) for k, (start, stop) in enumerate(zip(starts, stops))]


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


def windows_for(rows: Sequence[int], full_sizes: np.ndarray, boxes: np.ndarray, scales: np.ndarray,
                flips: np.ndarray, out: tuple[int, int], interpolation: Interpolation) -> list[Window]:
    """The windows of samples ``rows`` (all at once): full_sizes int64 [n, 2] (height, width), boxes
    float64 [n, 4] (left, top, width, height) in full-resolution pixels, scales int64 [n] (the CPU path's
    DCT scales), flips bool [n]; out (height, width)."""
    n = scales.astype(np.int64)
    heights, widths = full_sizes[:, 0].astype(np.int64), full_sizes[:, 1].astype(np.int64)
    left, top, box_w, box_h = (boxes[:, k] / n for k in range(4))
    xs = axis_plans(-(-widths // n), left, left + box_w, out[1], interpolation, flips.astype(bool))
    ys = axis_plans(-(-heights // n), top, top + box_h, out[0], interpolation, np.zeros(len(n), dtype=bool))
    return [Window(row=row, scale=int(s), top=y.start * int(s), bottom=min(y.stop * int(s), int(h)),
                   left=x.start * int(s), right=min(x.stop * int(s), int(w)), y=y, x=x)
            for row, s, h, w, x, y in zip(rows, n, heights, widths, xs, ys)]


def window_for(row: int, full: tuple[int, int], box: Sequence[float], scale: int, flip: bool,
               out: tuple[int, int], interpolation: Interpolation) -> Window:
    """One sample's window (``windows_for`` of one): full (height, width), box (left, top, width, height)."""
    return windows_for([row], np.array([full], dtype=np.int64), np.array([box], dtype=np.float64),
                       np.array([scale], dtype=np.int64), np.array([flip]), out, interpolation)[0]


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
    for a, (axes, size) in enumerate((([w.x for w in chunk], out_w), ([w.y for w in chunk], out_h))):
        params[:, a, 0, :size] = np.stack([axis.centers for axis in axes])
        params[:, a, 1, :size] = np.stack([axis.lo for axis in axes])
        params[:, a, 2, :size] = np.stack([axis.hi for axis in axes])
        params[:, a, 3, :] = np.array([axis.inv_scale for axis in axes])[:, None]
    return params


def decode_groups(rows: Sequence[int], sizes: np.ndarray, max_bytes: int) -> list[list[int]]:
    """``rows`` in order, grouped so that each group's decoded RGB pixels (``sizes[row]``: int (height, width)
    of what is decoded, a region or the whole image; 3 bytes a pixel) stay under ``max_bytes`` (a group holds
    at least one): one decoder call each."""
    groups: list[list[int]] = []
    total = 0
    for row in rows:
        height, width = (int(v) for v in sizes[row])
        size = 3 * height * width
        if groups and total + size <= max_bytes:
            groups[-1].append(row)
            total += size
        else:
            groups.append([row])
            total = size
    return groups
