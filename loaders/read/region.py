"""Decode only the part of a JPEG a crop's resize reads, then resize it: the fused path's fast lane.

A RandomResizedCrop keeps about 40% of an image. libjpeg-turbo's partial decompression
(the ``loaders.read._jpeg_region`` extension, built from ``_jpeg_region.c`` where a C compiler
and libjpeg-turbo's headers are present) skips the IDCT and colour conversion of every
pixel outside the region and never reads the rows below it; the rows above it still
need their entropy decoding (a JPEG without restart markers has no other way to find
where a row starts). ``python -m tools.bench.region_bench`` on a 2-core x86_64 VM, 500
photo-like ~500x375 JPEGs (~4.7 bits per pixel, torchvision's crop distribution), one
core: 0.745 ms per image instead of 0.965 for the full decode, of which 0.615 is the
entropy decoding down to the crop's last row.

The region is the crop box plus the resize filter's support plus two pixels on each
side (clipped to the image), so every output pixel reads exactly the decoded pixels a
full decode would have given it: the output equals the full-decode path's (tests check
it against Pillow's decode + ``resize(box=)``; a few pixels may differ by one level where
the box's float coordinates round differently).

``decode_box`` returns None where this lane does not apply (no extension, a NEAREST or BOX
resize, not a baseline or progressive Huffman-coded JPEG in YCbCr, greyscale or RGB, data
that does not end with the EOI marker, or libjpeg reporting anything at all): the caller
then takes the full decode, which words any error, so damaged data behaves as before.
"""

from __future__ import annotations

import importlib
import math
import threading
from typing import Any

import numpy as np
from PIL import Image

_jpeg_region: Any  # the extension module (decode_region, pack_rgb), or None where it is not built
try:
    _jpeg_region = importlib.import_module("loaders.read._jpeg_region")
except ImportError:  # no compiler or libjpeg-turbo headers at install: full decodes only
    _jpeg_region = None

__all__ = ["decode_box", "is_available"]

RGBX_BYTES = 4
EDGE_PIXELS = 2  # beyond the filter's reach: a cut column is upsampled as an image edge (one column)
JPEG_EOI = b"\xff\xd9"
MAX_IMCU_WIDTH = 32  # pixels: libjpeg widens a cut region to iMCU boundaries (up to 4x8 at 4:1:1)

# Pillow's filter support in input pixels at scale 1 (Image.resize widens it by the downscale factor).
# Only filters whose weights vary continuously with the position: shifting the box into the
# region's coordinates changes the float arithmetic by an ulp, which moves such a weight by
# far less than one level, but flips which source pixel a NEAREST or BOX tie picks (measured:
# whole rows off by up to 58 levels when upscaling with BOX), so those two decode in full.
_SUPPORT = {Image.Resampling.BILINEAR: 1.0, Image.Resampling.HAMMING: 1.0, Image.Resampling.BICUBIC: 2.0,
            Image.Resampling.LANCZOS: 3.0}

_buffers = threading.local()  # one reusable output buffer per thread


def is_available() -> bool:
    """Whether the partial-decode extension is built here (else ``decode_box`` always returns None)."""
    return _jpeg_region is not None


def decode_box(data: bytes, full_size: tuple[int, int], n: int, box: tuple[float, float, float, float],
               size: tuple[int, int], resample: Image.Resampling) -> Image.Image | None:
    """``box`` of a JPEG decoded at scale 1/n and resized to ``size``: an RGBX Pillow image, or None.

    full_size: (width, height) of the image at full resolution; box: (left, top, width,
    height) in pixels of the 1/n-scale image, fractional; size: (width, height) of the
    output. None: this lane does not apply (see the module docstring); decode in full.
    """
    if _jpeg_region is None or resample not in _SUPPORT or not data.endswith(JPEG_EOI):
        return None
    scaled_w, scaled_h = math.ceil(full_size[0] / n), math.ceil(full_size[1] / n)
    left, top, box_w, box_h = box
    x0, x1 = _span(left, box_w, size[0], scaled_w, resample)
    y0, y1 = _span(top, box_h, size[1], scaled_h, resample)
    pixels = _buffer(RGBX_BYTES * min(scaled_w, x1 - x0 + 2 * MAX_IMCU_WIDTH) * (y1 - y0))
    try:
        x, width, height = _jpeg_region.decode_region(data, pixels, x0, y0, x1 - x0, y1 - y0, n)
    except (ValueError, NotImplementedError, BufferError):
        return None  # the full decode decides, and words any error
    region = Image.frombuffer("RGBX", (width, height), pixels,  # type: ignore[arg-type]  # any buffer; stubs say bytes
                             "raw", "RGBX", 0, 1)
    return region.resize(size, resample, box=(left - x, top - y0, left - x + box_w, top - y0 + box_h))


def _span(start: float, length: float, out: int, limit: int, resample: Image.Resampling) -> tuple[int, int]:
    """[first, end) pixels along one axis that the resize of [start, start + length) to ``out`` reads."""
    reach = math.ceil(_SUPPORT[resample] * max(length / out, 1.0)) + EDGE_PIXELS
    return max(0, math.floor(start) - reach), min(limit, math.ceil(start + length) + reach)


def _buffer(nbytes: int) -> bytearray:
    """This thread's output buffer, grown to at least ``nbytes`` (the decoded region lives only until
    the resize that reads it returns)."""
    buffer = getattr(_buffers, "pixels", None)
    if buffer is None or len(buffer) < nbytes:
        buffer = bytearray(max(nbytes, 1 << 20))
        _buffers.pixels = buffer
    return buffer


def as_array(image: Image.Image, *, flip: bool = False) -> np.ndarray:
    """uint8 [H, W, 3] RGB, C-contiguous and writeable, from an RGB or RGBX Pillow image,
    mirrored left-right with ``flip``: where the extension is built, one pass in C without
    the GIL, reading Pillow's memory in place (tools/RESULTS.md §13)."""
    if _jpeg_region is None:
        if flip:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return np.frombuffer(bytearray(image.tobytes("raw", "RGB")), dtype=np.uint8).reshape(
            image.height, image.width, 3)
    out = np.empty((image.height, image.width, 3), dtype=np.uint8)
    # RGB and RGBX images both hold 4 bytes per pixel in Pillow, read in place through the
    # Arrow C data interface (Pillow >= 11.2, one memory block); else their raw export, a copy.
    # Not for a read-only image: Pillow maps those onto foreign memory (frombuffer, fromarray,
    # uncompressed files), and its Arrow export crashes the process on them (Pillow 12.1).
    pixels: object = None
    if not image.readonly and hasattr(image, "__arrow_c_array__"):
        try:
            pixels = image.__arrow_c_array__()[1]
        except ValueError:  # several memory blocks (a large image)
            pass
    if pixels is None:
        pixels = image.tobytes("raw", "RGBX")
    _jpeg_region.pack_rgb(pixels, out, image.width, image.height, flip)
    return out
