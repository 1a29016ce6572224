"""Batched crop + resize on the device: decoded images -> uint8 [k, height, width, 3], Pillow's filters.

Per chunk of samples (``geometry.resample_chunks``): each sample's window (decoded as a region,
or cropped from the whole image) is copied (averaged
in n x n blocks first where the CPU path decodes at 1/n) into one float32 [k, 3, rows, cols]
buffer, zero-padded; the filter weights of both axes are built on the device from one small
parameter array (``geometry.chunk_params``, one host-to-device copy from pinned memory); then
two batched matrix products resize every sample at once: the horizontal pass first, rounded
to 8 bits as Pillow rounds between its passes, then the vertical pass. Nothing here reads a
device value on the host: all work is enqueued on the current stream, asynchronously.

Kernels per chunk: one copy per sample (three where it is block-averaged), a few elementwise
kernels for the weights, two matrix products, the rounding and one indexed copy into the
output. On CUDA with TF32 matrix products allowed by the user (``torch.backends.cuda.matmul.
allow_tf32``), the products run in TF32 (10-bit mantissa) and may move some pixels by a level.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from loaders.batch_decode.geometry import Window, chunk_params
from loaders.read.decode import Interpolation

__all__ = ["filter_values", "host_to_device", "resample_chunk", "stack_images"]


def host_to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` on ``device``: on CUDA through pinned memory, copied asynchronously (a pageable source
    would make the copy wait for the stream); elsewhere the array's own memory, shared."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def filter_values(arg: torch.Tensor, interpolation: Interpolation) -> torch.Tensor:
    """Pillow's resampling filter (``Resample.c``) at ``arg`` (source offsets over the filter scale)."""
    x = arg.abs()
    if interpolation is Interpolation.NEAREST:  # the one tap inside [lo, hi) is the pixel under the centre
        return torch.ones_like(arg)
    if interpolation is Interpolation.BOX:
        return ((arg > -0.5) & (arg <= 0.5)).to(arg.dtype)
    if interpolation is Interpolation.BILINEAR:
        return (1.0 - x).clamp_(min=0.0)
    if interpolation is Interpolation.HAMMING:
        px = math.pi * x
        values = torch.sin(px) / px.clamp(min=1e-12) * (0.54 + 0.46 * torch.cos(px))
        return torch.where(x == 0, torch.ones_like(x), torch.where(x >= 1, torch.zeros_like(x), values))
    if interpolation is Interpolation.BICUBIC:
        a = -0.5
        near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
        return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))
    # LANCZOS: sinc(x) * sinc(x / 3) on [-3, 3)
    values = torch.sinc(arg) * torch.sinc(arg / 3.0)
    return torch.where((arg >= -3.0) & (arg < 3.0), values, torch.zeros_like(arg))


def _axis_weights(params: torch.Tensor, size: int, span: int, interpolation: Interpolation) -> torch.Tensor:
    """float32 [k, size, span]: each output pixel's normalised taps over the source span (zero outside),
    computed in float64 from ``params`` (float64 [k, 4, L]) as Pillow computes them."""
    centers, lo, hi, inv_scale = (params[:, r, :size, None] for r in range(4))
    source = torch.arange(span, dtype=params.dtype, device=params.device)
    weights = filter_values((source - centers + 0.5) * inv_scale, interpolation)
    weights = weights * ((source >= lo) & (source < hi))
    total = weights.sum(dim=-1, keepdim=True)
    normalised = torch.where(total != 0, weights / torch.where(total != 0, total, torch.ones_like(total)), weights)
    return normalised.to(torch.float32)


def _round_8bit(values: torch.Tensor) -> torch.Tensor:
    """Pillow's 8-bit output of a pass: round half up, clipped to 0..255 (still float32)."""
    return values.add_(0.5).floor_().clamp_(0.0, 255.0)


def _gather_sources(images: Mapping[int, torch.Tensor], chunk: Sequence[Window],
                    device: torch.device) -> torch.Tensor:
    """float32 [k, 3, rows, cols]: each window's pixels (``images[row]``: uint8 [3, bottom - top, right - left]),
    block-averaged at its scale, zero-padded."""
    rows = max(w.y.span for w in chunk)
    cols = max(w.x.span for w in chunk)
    sources = torch.zeros((len(chunk), 3, rows, cols), dtype=torch.float32, device=device)
    for k, window in enumerate(chunk):
        pixels = images[window.row]
        if window.scale > 1:
            # ceil_mode with no padding averages an edge block over the pixels it has, as libjpeg's scaled
            # IDCT does over the edge-replicated block the encoder made.
            pixels = F.avg_pool2d(pixels.unsqueeze(0).float(), window.scale, ceil_mode=True)[0]
        sources[k, :, :window.y.span, :window.x.span] = pixels
    return sources


def resample_chunk(images: Mapping[int, torch.Tensor], chunk: Sequence[Window], out: tuple[int, int],
                   interpolation: Interpolation, device: torch.device) -> torch.Tensor:
    """uint8 [k, out_h, out_w, 3] on ``device``: each window of ``chunk`` (``images[row]``: its pixels, uint8
    [3, bottom - top, right - left] on ``device``) resized to out (height, width), in the chunk's order."""
    sources = _gather_sources(images, chunk, device)
    params = host_to_device(chunk_params(chunk, out), device)
    out_h, out_w = out
    across = torch.matmul(sources, _axis_weights(params[:, 0], out_w, sources.shape[3], interpolation)
                          .transpose(1, 2).unsqueeze(1))
    del sources
    across = _round_8bit(across)
    down = torch.matmul(_axis_weights(params[:, 1], out_h, across.shape[2], interpolation).unsqueeze(1), across)
    return _round_8bit(down).to(torch.uint8).permute(0, 2, 3, 1)


def stack_images(images: Sequence[torch.Tensor]) -> torch.Tensor:
    """uint8 [k, H, W, 3] of same-size images uint8 [3, H, W] (an image decoded at its own size)."""
    return torch.stack([image.permute(1, 2, 0) for image in images])
