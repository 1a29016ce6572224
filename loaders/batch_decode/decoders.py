"""Batch JPEG decoders: a list of encoded JPEGs -> a list of uint8 [3, H, W] RGB images on the device, in one call.

- ``NvjpegDecoder`` (CUDA): ``torchvision.io.decode_jpeg(list, device=...)``, nvJPEG's batched
  decode (torchvision >= 0.19). torchvision decodes on a stream of its own, waits for it on the
  host (a sync of that stream only, inside torchvision), then makes the caller's current
  stream wait for it; its outputs are allocated on the caller's current stream. Its decoder
  state (nvJPEG handle, pinned and device buffers grown to the largest image) lives in
  torchvision for the process; nothing here can free it.
- ``HostDecoder`` (CPU): the same call on this machine's cores: simplejpeg (libjpeg-turbo,
  strict: a corrupt scan raises, as nvJPEG may) or Pillow, on a few threads (both release the
  GIL). It is what ``device="cpu", decode="device"`` runs, so that everything around the
  nvJPEG call is tested on any machine.

torchvision is imported only here, only for a CUDA device (``device_decoder_problem`` says
why it cannot be used: missing, a build that does not load beside this torch, too old, no
nvJPEG), so nothing else needs it.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np
import torch
from PIL import Image

from loaders.read.topology import cpus_available

try:
    import simplejpeg
except ImportError:  # a declared dependency; Pillow decodes without it
    simplejpeg = None

__all__ = ["MIN_TORCHVISION", "BatchDecoder", "HostDecoder", "NvjpegDecoder", "device_decoder_problem", "make_decoder"]

MIN_TORCHVISION = (0, 19)  # decode_jpeg takes a list (one batched nvJPEG call) from 0.19
HOST_THREADS = 4


class BatchDecoder(Protocol):
    """Decodes a batch of JPEGs in one call."""

    name: str

    def decode(self, encoded: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """encoded: uint8 [n_i] CPU, contiguous, one JPEG each -> uint8 [3, H_i, W_i] RGB on the device.
        Raises RuntimeError or ValueError when any of them does not decode."""
        ...

    def close(self, *, wait: bool = True) -> None:
        """Stop any threads it started (``wait``: join them); it may be used again: they start anew."""
        ...


class HostDecoder:
    """The batch decoded on this machine's CPU, ``threads`` at a time; images are CPU tensors [3, H, W]
    (views of C-contiguous [H, W, 3] arrays). Threads start on the first call and stop at ``close()``."""

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads or max(1, min(HOST_THREADS, cpus_available()))
        self.name = f"host, {self.threads} threads ({'simplejpeg' if simplejpeg is not None else 'Pillow'})"
        self._pool: ThreadPoolExecutor | None = None

    def decode(self, encoded: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        if len(encoded) <= 1:
            return [_decode_on_host(data) for data in encoded]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="loaders-decode")
        return list(self._pool.map(_decode_on_host, encoded))

    def close(self, *, wait: bool = True) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait)


def _decode_on_host(data: torch.Tensor) -> torch.Tensor:
    buffer = data.numpy()
    if simplejpeg is not None:
        pixels = simplejpeg.decode_jpeg(buffer, colorspace="RGB", strict=True)
    else:
        try:
            with Image.open(io.BytesIO(buffer.tobytes())) as img:
                pixels = np.asarray(img.convert("RGB"))
        except OSError as err:
            raise ValueError(f"cannot decode a JPEG of {buffer.size} bytes: {err}") from err
    return torch.from_numpy(pixels).permute(2, 0, 1)


class NvjpegDecoder:
    """``torchvision.io.decode_jpeg(list, mode=RGB, device=device)``: nvJPEG, one call per batch."""

    def __init__(self, device: torch.device) -> None:
        import torchvision
        from torchvision.io import ImageReadMode, decode_jpeg

        self.device = device
        self.name = f"nvjpeg (torchvision {torchvision.__version__})"
        self._decode: Any = decode_jpeg
        self._mode = ImageReadMode.RGB

    def decode(self, encoded: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        images: list[torch.Tensor] = self._decode(list(encoded), mode=self._mode, device=self.device)
        return images

    def close(self, *, wait: bool = True) -> None:
        return None  # nvJPEG's state is torchvision's, for the process


def make_decoder(device: torch.device) -> BatchDecoder:
    """The batch decoder for ``device``: nvJPEG on CUDA, the host's threads elsewhere."""
    if device.type == "cuda":
        return NvjpegDecoder(device)
    return HostDecoder()


def device_decoder_problem(device: torch.device) -> str | None:
    """Why no batch decoder works on ``device`` (None: one does). CPU: always works. CUDA: torchvision
    must import beside this torch, be >= 0.19 and decode a small JPEG there (checked once per device)."""
    if device.type == "cpu":
        return None
    if device.type != "cuda":
        return f"no batch JPEG decoder for {device.type} devices (CUDA and the CPU have one)"
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _nvjpeg_problem(index)


@functools.cache
def _nvjpeg_problem(index: int) -> str | None:
    try:
        import torchvision
        from torchvision.io import ImageReadMode, decode_jpeg
    except (ImportError, RuntimeError, OSError, AttributeError) as err:  # e.g. "operator torchvision::nms
        # does not exist": a torchvision wheel built for another torch
        return f"torchvision does not import here ({type(err).__name__}: {err}); pip install 'shardfeed[gpu]'"
    found = tuple(int(part) for part in re.findall(r"\d+", torchvision.__version__)[:2])
    if found < MIN_TORCHVISION:
        return f"torchvision {torchvision.__version__} decodes no lists of JPEGs; >= 0.19 is needed"
    try:
        decode_jpeg([_probe_jpeg()], mode=ImageReadMode.RGB, device=torch.device("cuda", index))
    except (RuntimeError, TypeError, ValueError) as err:
        return f"torchvision.io.decode_jpeg on cuda:{index} failed ({type(err).__name__}: {err})"
    return None


def _probe_jpeg() -> torch.Tensor:
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (90, 160, 30)).save(buffer, "JPEG", quality=90)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
