"""Encoded image bytes -> uint8 [H, W, 3] RGB arrays on the CPU; fused crop + resize.

JPEG decodes at a reduced DCT scale (1/8, 1/4 or 1/2: libjpeg's scaled IDCT, "draft
mode") whenever the region that will be kept still has at least the requested pixels at
that scale, so large photos cost a fraction of a full decode. Other formats decode fully.

The fused crop path (``decode_crop_resize``) decodes only the rows and columns the resize
reads where the ``loaders.read._jpeg_region`` extension is built (``loaders.read.region``:
the same pixels bit for bit, decoded by Pillow's own libjpeg; 22% less CPU for the fused
transform on ImageNet-like photos: ``tools.bench.region_bench``); elsewhere it decodes whole images.

Two JPEG backends, both on libjpeg-turbo: Pillow (Pillow-SIMD where installed) and
simplejpeg. Pillow is the default and the one obvious path: ``tools.bench.decode_bench`` puts
the two within 10% on the fused decode + crop + resize path (simplejpeg / Pillow = 0.99x
at 500x375, 1.07x at 1024x768 on a 2-core x86_64 VM); simplejpeg's lead on a bare full
decode (~15%) is mostly Pillow's RGBX -> RGB export, which the fused path does not pay
at full size. simplejpeg stays opt-in (``backend="simplejpeg"``). Both release the GIL
while decoding and resizing (2 threads: 1.9-2.0x), so thread workers scale.

Every decode failure raises ``SampleError`` with the codec's exception as ``__cause__``;
callers that know the sample add its key (see ``loaders.read.transforms``).
"""

from __future__ import annotations

import enum
import io
import math
import struct
from collections.abc import Sequence

import numpy as np
from PIL import Image, features

from loaders.errors import ConfigError, SampleError
from loaders.read import region
from loaders.stage_clock import timed_stage

try:
    import simplejpeg
except ImportError:  # optional extra "fast"
    simplejpeg = None

JPEG_MAGIC = b"\xff\xd8\xff"
DCT_SCALES = (8, 4, 2, 1)  # reduced JPEG decode scales 1/n, as Pillow's draft mode offers them

# What Pillow and its plugins raise on broken, truncated or hostile input.
_PIL_ERRORS = (OSError, ValueError, SyntaxError, EOFError, IndexError, KeyError, struct.error,
               Image.DecompressionBombError)
_DRAFT_FORMATS = ("JPEG", "MPO")  # MPO: camera JPEGs with extra frames; Pillow drafts the first


class Backend(enum.StrEnum):
    """The library that decodes JPEG (other formats always go through Pillow)."""

    PILLOW = "pillow"
    SIMPLEJPEG = "simplejpeg"


class Interpolation(enum.StrEnum):
    """Resampling filter of the resize (Pillow's, antialiased when downscaling)."""

    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    LANCZOS = "lanczos"
    BOX = "box"
    HAMMING = "hamming"


DEFAULT_BACKEND = Backend.PILLOW
_PIL_FILTERS = {i: Image.Resampling[i.name] for i in Interpolation}


def available_backends() -> tuple[Backend, ...]:
    """The JPEG backends importable here, default first."""
    return (Backend.PILLOW,) if simplejpeg is None else (Backend.PILLOW, Backend.SIMPLEJPEG)


def active_backend() -> str:
    """Which library decodes JPEG by default, e.g. ``"pillow-simd 12.1.1.post0 / libjpeg-turbo 2.1.5 / partial
    decode on (libjpeg: /lib/x86_64-linux-gnu/libjpeg.so.62)"``."""
    pil = Image.__version__
    name = "pillow-simd" if ".post" in pil else "pillow"  # Pillow-SIMD versions carry a .postN suffix
    turbo = features.version("libjpeg_turbo") if features.check_feature("libjpeg_turbo") else None
    jpeg_lib = f"libjpeg-turbo {turbo}" if turbo else f"libjpeg {features.version('jpg')}"
    return f"{name} {pil} / {jpeg_lib} / partial decode {region.lane_status()}"


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) in pixels, read from the header only (no pixel data is decoded)."""
    if simplejpeg is not None and data[:3] == JPEG_MAGIC:
        try:  # a microsecond instead of Pillow's ~15 us Python marker parse
            height, width, _, _ = simplejpeg.decode_jpeg_header(data)
            return width, height
        except ValueError:
            pass  # let Pillow judge it and word the error
    with _open(data) as img:
        return img.size


def dct_scale_for(region: tuple[float, float], size: tuple[int, int]) -> int:
    """The largest n in (8, 4, 2, 1) with region / n >= size in both axes.

    region: (width, height) of the kept area in full-resolution pixels; size: (width,
    height) of the output. Decoding at scale 1/n keeps at least ``size`` pixels there.
    """
    for n in DCT_SCALES:
        if region[0] / n >= size[0] and region[1] / n >= size[1]:
            return n
    return 1


@timed_stage("decode")  # a part of the batch being built, where one is (loaders.stage_clock)
def decode_rgb(data: bytes, *, min_size: tuple[int, int] | None = None,
               backend: Backend | str | None = None) -> np.ndarray:
    """Decode to uint8 [H, W, 3] RGB, C-contiguous, writeable, on the CPU.

    min_size: (width, height); when given, a JPEG may decode at scale 1/2, 1/4 or 1/8 as
    long as the result is at least this large (never smaller than the full image allows).
    """
    which = resolve_backend(backend)
    if which is Backend.SIMPLEJPEG and _is_turbo_rgb_jpeg(data):
        n = 1 if min_size is None else dct_scale_for(image_size(data), min_size)
        try:
            return _simplejpeg_decode(data, n)
        except ValueError:
            pass  # Pillow decides and words the error
    with _open(data) as img:
        if min_size is not None:
            _draft(img, dct_scale_for(img.size, min_size))
        return _to_array(_to_rgb(img))


@timed_stage("decode")
def decode_crop_resize(data: bytes, box: Sequence[float], size: tuple[int, int], *, flip: bool = False,
                       resample: Interpolation | str = Interpolation.BILINEAR, reduced: bool = True,
                       backend: Backend | str | None = None) -> np.ndarray:
    """Decode, crop ``box`` and resize it to ``size`` in one pass: uint8 [size_h, size_w, 3] RGB.

    box: (left, top, width, height) in full-resolution pixels, may be fractional; size:
    (width, height) of the output; flip: mirror left-right after the resize. With
    ``reduced`` a JPEG decodes at the smallest DCT scale that keeps the box at least
    ``size`` pixels; the resize then reads the box (sub-pixel, antialiased) directly
    from the reduced image, so no full-resolution crop is ever made. With ``reduced`` and
    the default backend, only the region the resize reads is decoded (``loaders.read.region``).
    """
    left, top, box_w, box_h = (float(v) for v in box)
    if not (box_w > 0 and box_h > 0 and size[0] > 0 and size[1] > 0):
        raise ConfigError(f"'box' and 'size' must be positive (got box={tuple(box)}, size={size})")
    resample_filter = pil_filter(resample)
    n = dct_scale_for((box_w, box_h), size) if reduced else 1
    which = resolve_backend(backend)
    if reduced and which is Backend.PILLOW and region.is_available() and data[:3] == JPEG_MAGIC:
        full = image_size(data)
        _check_box((left, top, box_w, box_h), full)
        out = region.decode_box(data, full, n, (left / n, top / n, box_w / n, box_h / n), size, resample_filter)
        if out is not None:
            return region.as_array(out, flip=flip)
    if which is Backend.SIMPLEJPEG and _is_turbo_rgb_jpeg(data):
        _check_box((left, top, box_w, box_h), image_size(data))
        try:
            # RGBX is Pillow's own layout for RGB: the decoded array is mapped, not copied.
            pixels = _simplejpeg_decode(data, n, colorspace="RGBX")
        except ValueError:
            pixels = None  # Pillow decides and words the error
        if pixels is not None:
            img = Image.frombuffer("RGBX", (pixels.shape[1], pixels.shape[0]), pixels, "raw", "RGBX", 0, 1)
            return _resize_box(img, n, (left, top, box_w, box_h), size, flip, resample_filter)
    with _open(data) as img:
        _check_box((left, top, box_w, box_h), img.size)
        n = _draft(img, n)
        return _resize_box(_to_rgb(img), n, (left, top, box_w, box_h), size, flip, resample_filter)


def _check_box(box: tuple[float, float, float, float], full: tuple[int, int]) -> None:
    left, top, box_w, box_h = box
    if left < 0 or top < 0 or left + box_w > full[0] or top + box_h > full[1]:
        raise ConfigError(f"crop box (left, top, width, height) = {box} does not fit an image of "
                          f"{full[0]}x{full[1]} pixels")


def _resize_box(img: Image.Image, n: int, box: tuple[float, float, float, float],
                size: tuple[int, int], flip: bool, resample_filter: Image.Resampling) -> np.ndarray:
    # Decoded pixel x of a 1/n-scale JPEG covers full-resolution [n x, n x + n): the box
    # maps to 1/n of itself (the decoded size is ceil(full / n), so it still fits).
    left, top, box_w, box_h = (v / n for v in box)
    return region.as_array(img.resize(size, resample_filter, box=(left, top, left + box_w, top + box_h)), flip=flip)


def pil_filter(resample: Interpolation | str, *, name: str = "resample") -> Image.Resampling:
    """Pillow's filter for ``resample``; ConfigError naming argument ``name`` if unknown."""
    try:
        return _PIL_FILTERS[Interpolation(resample)]
    except ValueError:
        raise ConfigError(f"'{name}' must be one of {[i.value for i in Interpolation]} "
                          f"(got {resample!r})") from None


def resolve_backend(backend: Backend | str | None) -> Backend:
    """The backend named by ``backend`` (None: the default); ConfigError if unknown or not installed."""
    if backend is None:
        return DEFAULT_BACKEND
    try:
        which = Backend(backend)
    except ValueError:
        raise ConfigError(f"'backend' must be one of {[b.value for b in Backend]} (got {backend!r})") from None
    if which is Backend.SIMPLEJPEG and simplejpeg is None:
        raise ConfigError("backend 'simplejpeg' is not installed: pip install simplejpeg (extra 'fast')")
    return which


def _is_turbo_rgb_jpeg(data: bytes) -> bool:
    # TurboJPEG converts only YCbCr and grayscale JPEGs to RGB the way Pillow does
    # (CMYK/YCCK need Adobe's inversion); everything else takes the Pillow path.
    if data[:3] != JPEG_MAGIC:
        return False
    try:
        _, _, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return False
    return colorspace in ("YCbCr", "Gray")


def _simplejpeg_decode(data: bytes, n: int, colorspace: str = "RGB") -> np.ndarray:
    """Decode at scale 1/n with TurboJPEG: uint8 [ceil(H / n), ceil(W / n), 3 or 4]."""
    if n == 1:
        return simplejpeg.decode_jpeg(data, colorspace=colorspace)
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    # Asking for exactly ceil(full / n) makes TurboJPEG pick scale 1/n, as Pillow would,
    # not an odd M/8 factor (measured slower than a full decode here).
    return simplejpeg.decode_jpeg(data, colorspace=colorspace, min_height=math.ceil(height / n),
                                  min_width=math.ceil(width / n))


def _open(data: bytes) -> Image.Image:
    try:
        return Image.open(io.BytesIO(data))
    except _PIL_ERRORS as err:
        raise SampleError(f"not a readable image ({len(data)} bytes, starting {bytes(data[:8])!r}): "
                          f"{_describe(err)}") from err


def _draft(img: Image.Image, n: int) -> int:
    """Ask a JPEG to decode at scale 1/n; return the scale denominator it will use (1 if none)."""
    if n == 1 or img.format not in _DRAFT_FORMATS:
        return 1
    width, height = img.size
    # Pillow picks the largest power of two <= min(width // w, height // h); with
    # (w, h) = (width // n, height // n) that is exactly n (n <= width, height here).
    drafted = img.draft("RGB", (max(1, width // n), max(1, height // n)))
    if drafted is None:  # Pillow could not configure the decoder: full scale
        return 1
    _, (_, _, scaled_w, _) = drafted
    return round(width / scaled_w)


def _to_rgb(img: Image.Image) -> Image.Image:
    """Decode the pixels and convert any mode to RGB (alpha dropped, 16-bit scaled to 8)."""
    try:
        img.load()
        if img.mode == "RGB":
            return img
        if img.mode.startswith("I"):  # 16/32-bit grey: keep the top 8 of 16 bits, not a clip at 255
            grey = np.asarray(img).astype(np.int64) >> 8
            img = Image.fromarray(np.clip(grey, 0, 255).astype(np.uint8))
        elif img.mode == "P" and "transparency" in img.info:
            img = img.convert("RGBA")  # Pillow warns when going straight to RGB
        return img.convert("RGB")
    except _PIL_ERRORS as err:
        raise SampleError(f"cannot decode {img.format or 'image'} {img.size[0]}x{img.size[1]} "
                          f"{img.mode}: {_describe(err)}") from err


def _to_array(img: Image.Image) -> np.ndarray:
    # np.array copies Pillow's read-only export: torch.from_numpy needs writeable memory.
    return np.array(img, dtype=np.uint8, copy=True)


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
