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
full decode would have given it. The region is decoded into a buffer laid out as the
whole image, at its place, and Pillow resizes that buffer as the whole image with the full
decode's own box: the same input size and box give the same float arithmetic and, in stock
Pillow (>= 13.0, python-pillow/Pillow#9549: the vertical pass runs first when the input's
height shrinks more than twice as much as its width), the same pass order. So the output equals the
full-decode path's bit for bit, with Pillow-SIMD and stock Pillow alike (tests check every
filter, scale and JPEG flavour). A region resized as a small image of its own (this lane's
first version) differed by one level in ~20% of the pixels of ~25% of crops with stock
Pillow, where a narrow region flipped the pass order.

Same decoder: the extension links no libjpeg. At import it takes its jpeg_* functions from
the libjpeg Pillow's own JPEG decoder (``PIL._imaging``) is linked with, found by the dynamic
linker's lookup from that module (``bind_libjpeg``): the system's libjpeg-turbo for a source
build such as Pillow-SIMD, the copy bundled in the stock Pillow wheel there (libjpeg-turbo
3.x, where the system has 2.1: no pixel differs between the two on the tests' JPEGs, but
nothing promises that across versions). Where that library has another ABI than the headers
the extension was built with (e.g. a libjpeg 8 against libjpeg 6.2 headers) or lacks partial
decompression, the lane is off (``lane_status`` says why) and crops decode in full: the same
pixels, more CPU.

``decode_box`` returns None where this lane does not apply (no extension or no usable libjpeg,
not a baseline or progressive Huffman-coded JPEG in YCbCr, greyscale
or RGB, data that does not end with the EOI marker, or libjpeg reporting anything at all): the
caller then takes the full decode, which words any error, so damaged data behaves as before.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
from PIL import Image

logger = logging.getLogger(__name__)

_jpeg_region: Any  # the extension module (bind_libjpeg, decode_region, pack_rgb), or None where it is not built
try:
    _jpeg_region = importlib.import_module("loaders.read._jpeg_region")
except ImportError:  # no compiler or libjpeg-turbo headers at install: full decodes only
    _jpeg_region = None

__all__ = ["as_array", "decode_box", "decode_region", "is_available", "lane_disabled", "lane_status", "libjpeg_file"]

RGBX_BYTES = 4
EDGE_PIXELS = 2  # beyond the filter's reach: a cut column is upsampled as an image edge (one column)
JPEG_EOI = b"\xff\xd9"

# Pillow's filter support in input pixels at scale 1 (Image.resize widens it by the downscale factor).
# NEAREST reads the one pixel under each output pixel's centre: within the box, support 0.5 covers it.
# (The box is never shifted, so NEAREST and BOX ties fall as in the full decode; a first version that
# resized the region in its own coordinates moved them by an ulp: whole rows off by up to 58 levels.)
_SUPPORT = {Image.Resampling.NEAREST: 0.5, Image.Resampling.BOX: 0.5, Image.Resampling.BILINEAR: 1.0,
            Image.Resampling.HAMMING: 1.0, Image.Resampling.BICUBIC: 2.0, Image.Resampling.LANCZOS: 3.0}

_NOT_BUILT = "loaders.read._jpeg_region not built (needs cc and libjpeg62-turbo-dev at install)"
_buffers = threading.local()  # one reusable output buffer per thread


def _bind_pillows_libjpeg(extension: Any) -> tuple[str | None, str]:
    """(the libjpeg file the lane decodes with, "") once the extension is bound to the libjpeg
    Pillow decodes with; (None, why the lane is off) where there is none it can use."""
    if extension is None:
        return None, _NOT_BUILT
    imaging = getattr(Image.core, "__file__", None)  # PIL._imaging: Pillow's JPEG decoder and the libjpeg it calls
    if imaging is None:
        return None, "Pillow's core module has no file to find its libjpeg from"
    try:
        return extension.bind_libjpeg(imaging), ""
    except OSError as err:
        return None, f"Pillow's libjpeg cannot serve the partial decode: {err}"


_libjpeg_file, _lane_off_because = _bind_pillows_libjpeg(_jpeg_region)
if _libjpeg_file is None and _jpeg_region is not None:
    logger.info("partial JPEG decode off, crops decode whole images: %s", _lane_off_because)


_switched_off = threading.Event()  # set inside ``lane_disabled``: decode_box declines, crops decode in full


def is_available() -> bool:
    """Whether the partial-decode lane runs here (else ``decode_box`` always returns None)."""
    return _jpeg_region is not None and _libjpeg_file is not None


@contextlib.contextmanager
def lane_disabled() -> Iterator[None]:
    """Within the block ``decode_box`` returns None in every thread, so crops decode whole images:
    the full decode path, to compare with the lane (``tools.bench.region_bench``). Not reentrant."""
    _switched_off.set()
    try:
        yield
    finally:
        _switched_off.clear()


def decode_region(data: bytes, out: bytearray, x: int, y: int, width: int, height: int, n: int) -> tuple[int, int, int]:
    """The extension's partial decode, for the benchmarks that time its parts: the rows and columns
    ``[y, y + height) x [x, x + width)`` of a JPEG at scale 1/n, RGBX into ``out`` laid out as the whole
    scaled image; (first column decoded, width decoded, height). RuntimeError where the lane is off."""
    if not is_available():
        raise RuntimeError(f"no partial decode here: {lane_status()}")
    first, decoded_width, decoded_height = _jpeg_region.decode_region(data, out, x, y, width, height, n)
    return int(first), int(decoded_width), int(decoded_height)


def libjpeg_file() -> str | None:
    """The libjpeg the lane decodes with (Pillow's: the file PIL._imaging takes jpeg_* from), or None."""
    return _libjpeg_file if _jpeg_region is not None else None


def lane_status() -> str:
    """One line for reports: ``"on (libjpeg: PATH)"`` or ``"off (why)"``."""
    if is_available():
        return f"on (libjpeg: {_libjpeg_file})"
    return f"off ({_NOT_BUILT if _jpeg_region is None else _lane_off_because})"


def decode_box(data: bytes, full_size: tuple[int, int], n: int, box: tuple[float, float, float, float],
               size: tuple[int, int], resample: Image.Resampling) -> Image.Image | None:
    """``box`` of a JPEG decoded at scale 1/n and resized to ``size``: an RGBX Pillow image, or None.

    full_size: (width, height) of the image at full resolution; box: (left, top, width,
    height) in pixels of the 1/n-scale image, fractional; size: (width, height) of the
    output. None: this lane does not apply (see the module docstring); decode in full.
    """
    if not is_available() or _switched_off.is_set() or resample not in _SUPPORT or not data.endswith(JPEG_EOI):
        return None
    scaled_w, scaled_h = math.ceil(full_size[0] / n), math.ceil(full_size[1] / n)
    left, top, box_w, box_h = box
    x0, x1 = _span(left, box_w, size[0], scaled_w, resample)
    y0, y1 = _span(top, box_h, size[1], scaled_h, resample)
    pixels = _buffer(RGBX_BYTES * scaled_w * scaled_h)
    try:
        _jpeg_region.decode_region(data, pixels, x0, y0, x1 - x0, y1 - y0, n)
    except (ValueError, NotImplementedError, BufferError):
        return None  # the full decode decides, and words any error
    # The buffer seen as the whole image, of which the resize reads only the decoded region:
    # the same box on an image of the same size as the full decode's, so the same float
    # arithmetic and, in stock Pillow, the same choice of which pass runs first (it depends
    # on the input's size): the same pixels out.
    # Pillow takes any buffer; its stubs say bytes.
    image = Image.frombuffer("RGBX", (scaled_w, scaled_h),
                             pixels, "raw", "RGBX", 0, 1)  # type: ignore[arg-type]  # a buffer, not bytes: no copy
    return image.resize(size, resample, box=(left, top, left + box_w, top + box_h))


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
