"""Decode plans: what a decode transform would have decoded, handed on undecoded, for a decoder on the device.

Inside ``planning()`` (the loader sets it around each batch read when ``decode="device"``),
``RandomResizedCropDecode``, ``CenterCropDecode`` and ``DecodeImage`` draw exactly what they
draw on the CPU path (the crop box and the flip, from the sample's keyed rng, in the same
order) and return an ``EncodedImage`` instead of pixels: the JPEG bytes, the box, the flip,
the output size and the DCT scale the CPU path would decode at. A sample the device decoder
cannot take (``fallback_reason``: PNG, WebP, CMYK, lossless or 12-bit JPEG, a file cut short)
is decoded here instead, by the CPU path itself, so its pixels are the CPU path's exactly
and its failure is the CPU path's failure, in the worker, where the skip budget counts it.

Why a scoped mode (a context variable, like ``torch.no_grad()``) rather than an argument:
the loader knows the device, the transform does the per-sample work, and the dataset in
between (ours or a user's) need not pass anything through. The one caller that reads a
batch sets it and resets it, in the thread (or worker process) that reads, so no copy of
the dataset can miss it or keep it.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

try:
    import simplejpeg
except ImportError:  # a declared dependency; without it the frame's component count decides
    simplejpeg = None

from loaders.read.decode import JPEG_MAGIC, Backend, Interpolation, dct_scale_for, decode_crop_resize, decode_rgb
from loaders.read.jpeg_frame import HUFFMAN_FRAMES, JpegFrame, read_frame

__all__ = ["EncodedImage", "Fallback", "fallback_reason", "is_planning", "plan_crop", "plan_full", "planning"]

_PLANNING: contextvars.ContextVar[bool] = contextvars.ContextVar("loaders_decode_planning", default=False)
# Luma sampling factors (horizontal, vertical) with 1x1 chroma that nvJPEG names: 4:4:4, 4:2:2, 4:4:0,
# 4:2:0, 4:1:1, 4:1:0.
_CHROMA_LAYOUTS = frozenset({(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (4, 2)})


class Fallback(enum.StrEnum):
    """Why a sample was decoded in the worker (by the CPU path) instead of on the device."""

    PNG = "png"
    WEBP = "webp"
    OTHER_FORMAT = "other_format"  # neither JPEG, PNG nor WebP (GIF, TIFF, BMP...)
    CMYK = "cmyk"  # four-component JPEG (CMYK or YCCK)
    UNSUPPORTED_JPEG = "unsupported_jpeg"  # lossless, arithmetic-coded, 12-bit, RGB-coded, odd sampling
    TRUNCATED = "truncated"  # no EOI marker after the first scan
    UNREADABLE = "unreadable"  # its markers lead to no frame: the CPU path words the error


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedImage:
    """One sample's image as a decode plan (what a decode transform returns inside ``planning()``).

    data: the JPEG bytes (b"" when ``pixels`` holds the image). full_size: (height, width) of the
    full-resolution image. box: (left, top, width, height) in full-resolution pixels, as the CPU
    path crops it. scale: the DCT scale denominator n (1, 2, 4, 8) the CPU path decodes at.
    flip: mirror left-right after the resize. size: (height, width) of the output; None for
    the image at its own size (``DecodeImage``). interpolation, backend: the CPU path's.
    pixels: uint8 [h, w, 3] decoded in the worker, with ``reason`` (a ``Fallback``) saying why.
    key, index: the sample's, for messages.
    """

    data: bytes
    full_size: tuple[int, int]
    box: tuple[float, float, float, float]
    scale: int
    flip: bool
    size: tuple[int, int] | None
    interpolation: Interpolation
    backend: Backend | str | None
    pixels: np.ndarray | None = None
    reason: Fallback | None = None
    key: str = ""
    index: int = -1


@contextlib.contextmanager
def planning(enabled: bool = True) -> Iterator[None]:
    """Within the block, in this thread, decode transforms return ``EncodedImage`` plans (when ``enabled``)."""
    token = _PLANNING.set(enabled)
    try:
        yield
    finally:
        _PLANNING.reset(token)


def is_planning() -> bool:
    """Whether the calling thread is inside ``planning()``."""
    return _PLANNING.get()


def fallback_reason(data: bytes) -> Fallback | None:
    """Why the device decoder cannot take ``data`` (None: it can): a baseline, extended or progressive
    Huffman-coded 8-bit JPEG in YCbCr or greyscale, with common chroma sampling and an EOI marker."""
    reason, _ = _inspect(data)
    return reason


def _inspect(data: bytes) -> tuple[Fallback | None, JpegFrame | None]:
    if data[:3] != JPEG_MAGIC:
        if data[:8] == b"\x89PNG\r\n\x1a\n":
            return Fallback.PNG, None
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return Fallback.WEBP, None
        return Fallback.OTHER_FORMAT, None
    frame = read_frame(data)
    if frame is None:
        return Fallback.UNREADABLE, None
    if frame.components == 4:
        return Fallback.CMYK, frame
    if frame.sof not in HUFFMAN_FRAMES or frame.precision != 8 or not _sampling_ok(frame) or not _is_ycbcr(data):
        return Fallback.UNSUPPORTED_JPEG, frame
    if not frame.has_eoi:
        return Fallback.TRUNCATED, frame
    return None, frame


def _sampling_ok(frame: JpegFrame) -> bool:
    if frame.components == 1:
        return frame.height > 0 and frame.width > 0
    luma, *chroma = frame.sampling
    return (frame.components == 3 and frame.height > 0 and frame.width > 0 and luma in _CHROMA_LAYOUTS
            and all(c == (1, 1) for c in chroma))


def _is_ycbcr(data: bytes) -> bool:
    """YCbCr or greyscale by libjpeg-turbo's reading (an RGB-coded 3-component JPEG is neither)."""
    if simplejpeg is None:
        return True  # the frame's component count already said 1 or 3
    try:
        _, _, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return False
    return colorspace in ("YCbCr", "Gray")


def plan_crop(data: bytes, full: tuple[int, int], box: tuple[float, float, float, float], size: tuple[int, int], *,
              flip: bool, interpolation: Interpolation, backend: Backend | str | None, key: str = "",
              index: int = -1) -> EncodedImage:
    """The plan of ``decode_crop_resize(data, box, size, flip=...)``; full, size: (width, height).

    Decodes here, with that very function, what the device decoder cannot take (SampleError as it raises)."""
    reason = fallback_reason(data)
    pixels = None
    if reason is not None:
        pixels = decode_crop_resize(data, box, size, flip=flip, resample=interpolation, backend=backend)
    scale = dct_scale_for((box[2], box[3]), size)
    return EncodedImage(data=b"" if pixels is not None else data, full_size=(full[1], full[0]), box=box,
                        scale=scale, flip=flip, size=(size[1], size[0]), interpolation=interpolation,
                        backend=backend, pixels=pixels, reason=reason, key=key, index=index)


def plan_full(data: bytes, *, backend: Backend | str | None, key: str = "", index: int = -1) -> EncodedImage:
    """The plan of ``decode_rgb(data)``: the whole image at its own size (decoded here where the
    device decoder cannot take it, SampleError as ``decode_rgb`` raises)."""
    reason, frame = _inspect(data)
    if reason is None and frame is not None:
        height, width = frame.height, frame.width
        pixels = None
    else:
        pixels = decode_rgb(data, backend=backend)
        height, width = pixels.shape[:2]
    return EncodedImage(data=data if pixels is None else b"", full_size=(height, width),
                        box=(0.0, 0.0, float(width), float(height)), scale=1, flip=False, size=None,
                        interpolation=Interpolation.BILINEAR, backend=backend, pixels=pixels, reason=reason,
                        key=key, index=index)
