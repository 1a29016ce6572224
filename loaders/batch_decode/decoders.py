"""Batch JPEG decoders: JPEGs and the region each needs -> uint8 [3, h, w] RGB on the device, in one call.

``NvImageCodecDecoder`` is NVIDIA nvImageCodec (``nvidia-nvimgcodec-cu12`` 0.9): one
``Decoder.decode`` call per list of JPEGs, each decoded only in its region
(``CodeStream.get_sub_code_stream(region=Region(top, left, bottom, right))``), by one backend:

| ``DecodeBackend`` | nvImageCodec | what decodes |
|---|---|---|
| "hardware" | ``HW_GPU_ONLY`` | the JPEG engine of A100 / H100 / H200-class GPUs (nvJPEG's hardware decoder) |
| "gpu" | ``GPU_ONLY`` | nvJPEG on the CUDA cores |
| "hybrid" | ``HYBRID_CPU_GPU`` | nvJPEG: Huffman decoding on the host's threads, the rest on the GPU |
| "cpu" | ``CPU_ONLY`` | libjpeg-turbo on the host's cores: ``device="cpu"`` (what CI runs, no CUDA) |

On CUDA the backend is the first of hardware, gpu, hybrid that decodes a probe JPEG on the
device (``backend_for``, once per device); the decoder also allows the ones after it, so an
image the first cannot take is decoded by the next within the same call. 0.9 has no
reduced-scale (DCT-scaled) decode: regions decode at full resolution (``device_decode``
averages the blocks the CPU path's scale asks for).

One ``nvimgcodec.Decoder`` per ``NvImageCodecDecoder`` (one per loader, on its device): made on
the first call, reused for every later batch and epoch, released by ``close()`` (a later call
makes a new one). Its outputs: on CUDA, images in nvImageCodec's device memory, decoded on the
caller's current stream and handed to torch through DLPack (which orders torch's current
stream after the decode); on the CPU, numpy views of its host images (kept alive by them).

nvImageCodec is imported only when a decoder is made or probed (``device_decoder_problem`` says
why it cannot be used: missing, no nvJPEG libraries for a CUDA backend, another device type).
"""

from __future__ import annotations

import enum
import functools
import io
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch
from PIL import Image

from loaders.errors import ConfigError

__all__ = ["BatchDecoder", "CUDA_BACKENDS", "DecodeBackend", "NvImageCodecDecoder", "Region", "backend_for",
           "backend_problem", "device_decoder_problem", "make_decoder"]

Region = tuple[int, int, int, int]  # (top, left, bottom, right) in full-resolution pixels, bottom/right exclusive
_INSTALL_HINT = "pip install 'shardfeed[gpu]' (nvidia-nvimgcodec-cu12 with the nvJPEG libraries)"


class DecodeBackend(enum.StrEnum):
    """Which of nvImageCodec's backends decodes (see the module docstring)."""

    HARDWARE = "hardware"
    GPU = "gpu"
    HYBRID = "hybrid"
    CPU = "cpu"


CUDA_BACKENDS = (DecodeBackend.HARDWARE, DecodeBackend.GPU, DecodeBackend.HYBRID)  # the order of preference
_KINDS = {DecodeBackend.HARDWARE: "HW_GPU_ONLY", DecodeBackend.GPU: "GPU_ONLY",
          DecodeBackend.HYBRID: "HYBRID_CPU_GPU", DecodeBackend.CPU: "CPU_ONLY"}
_LABELS = {DecodeBackend.HARDWARE: "hardware", DecodeBackend.GPU: "GPU", DecodeBackend.HYBRID: "hybrid",
           DecodeBackend.CPU: "CPU"}


class BatchDecoder(Protocol):
    """Decodes a batch of JPEGs in one call, each in its region."""

    name: str

    def decode(self, encoded: Sequence[torch.Tensor], regions: Sequence[Region | None]) -> list[torch.Tensor | None]:
        """encoded: uint8 [n_i] CPU, contiguous, one JPEG each; regions: the pixels each needs (None: all) ->
        per JPEG, uint8 [3, bottom - top, right - left] RGB on the device, or None where it could not decode it.
        May raise RuntimeError or ValueError when the call as a whole fails."""
        ...

    def close(self, *, wait: bool = True) -> None:
        """Release what it holds (threads, buffers); it may be used again."""
        ...


def _nvimgcodec() -> Any:
    from nvidia import nvimgcodec

    return nvimgcodec


class NvImageCodecDecoder:
    """nvImageCodec on ``device`` (CPU: the CPU_ONLY backend) with ``backend`` first and, with ``fallback``,
    the CUDA backends after it in ``CUDA_BACKENDS`` order; ``threads``: its host threads (0: one per core).
    Makes nothing until the first call (see the module docstring)."""

    def __init__(self, device: torch.device, backend: DecodeBackend, *, fallback: bool = True,
                 threads: int = 0) -> None:
        if (backend is DecodeBackend.CPU) != (device.type == "cpu"):
            raise ConfigError(f"'backend' {backend.value!r} does not decode on a {device.type} device (got device "
                              f"{device}); 'cpu' decodes on the CPU, 'hardware', 'gpu' and 'hybrid' on CUDA")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device, self.backend, self.threads = device, backend, threads
        later = CUDA_BACKENDS[CUDA_BACKENDS.index(backend) + 1:] if fallback and backend in CUDA_BACKENDS else ()
        self.backends = (backend, *later)
        version = ".".join(_nvimgcodec().__version__.split(".")[:2])
        self.name = f"nvImageCodec {version}, {_LABELS[backend]}"
        self._lock = threading.Lock()
        self._decoder: Any = None

    @property
    def is_open(self) -> bool:
        """Whether it holds an nvImageCodec decoder now (made by a call, released by ``close()``)."""
        return self._decoder is not None

    def decode(self, encoded: Sequence[torch.Tensor], regions: Sequence[Region | None]) -> list[torch.Tensor | None]:
        nv = _nvimgcodec()
        streams = [_code_stream(nv, data, region) for data, region in zip(encoded, regions)]
        wanted = [k for k, stream in enumerate(streams) if stream is not None]
        out: list[torch.Tensor | None] = [None] * len(streams)
        if not wanted:
            return out
        on_cuda = self.device.type == "cuda"
        stream_ptr = torch.cuda.current_stream(self.device).cuda_stream if on_cuda else 0
        with self._lock:
            if self._decoder is None:
                self._decoder = self._open(nv)
            images = self._decoder.decode([streams[k] for k in wanted], params=_params(nv), cuda_stream=stream_ptr)
        for k, image in zip(wanted, images):
            if image is not None:
                out[k] = torch.from_dlpack(image) if on_cuda else torch.from_numpy(np.asarray(image))
        return out

    def close(self, *, wait: bool = True) -> None:
        with self._lock:
            decoder, self._decoder = self._decoder, None
        if decoder is not None:
            decoder.__exit__(None, None, None)

    def _open(self, nv: Any) -> Any:
        device_id = nv.NVIMGCODEC_DEVICE_CPU_ONLY if self.device.type == "cpu" else self.device.index
        backends = [nv.Backend(getattr(nv.BackendKind, _KINDS[b])) for b in self.backends]
        return nv.Decoder(device_id=device_id, max_num_cpu_threads=self.threads, backends=backends)


@functools.cache
def _params(nv: Any) -> Any:
    """RGB, planar (uint8 [3, H, W]), 8 bits, EXIF orientation ignored: the CPU path's decode."""
    return nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.ColorSpec.SRGB, allow_any_depth=False,
                           sample_format=nv.SampleFormat.P_RGB)


def _code_stream(nv: Any, data: torch.Tensor, region: Region | None) -> Any:
    """The code stream of ``data`` (its region's), or None where nvImageCodec cannot parse its header."""
    try:
        stream = nv.CodeStream(data.numpy())
        if region is None:
            return stream
        return stream.get_sub_code_stream(region=nv.Region(*region))
    except (RuntimeError, ValueError):
        return None


def make_decoder(device: torch.device) -> BatchDecoder:
    """The batch decoder for ``device`` (its backend: ``backend_for``); it makes nothing until used."""
    return NvImageCodecDecoder(device, backend_for(device))


def backend_for(device: torch.device) -> DecodeBackend:
    """"cpu" on the CPU; on CUDA the first of ``CUDA_BACKENDS`` that decodes here (probed once per device).
    ConfigError when none does, saying why (``device_decoder_problem``)."""
    if device.type == "cpu":
        return DecodeBackend.CPU
    working = _working_backend(_cuda_index(device))
    if isinstance(working, str):
        raise ConfigError(working)
    return working


def device_decoder_problem(device: torch.device) -> str | None:
    """Why no batch decoder works on ``device`` (None: one does): nvImageCodec must import and, on CUDA, one
    of its CUDA backends decode a small JPEG there; on the CPU its CPU backend (checked once per device)."""
    if device.type == "cpu":
        return _cpu_problem()
    if device.type != "cuda":
        return f"no batch JPEG decoder for {device.type} devices (CUDA and the CPU have one)"
    working = _working_backend(_cuda_index(device))
    return working if isinstance(working, str) else None


def _cuda_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _import_problem() -> str | None:
    try:
        _nvimgcodec()
    except (ImportError, OSError, RuntimeError) as err:
        return f"nvImageCodec does not import here ({type(err).__name__}: {err}); {_INSTALL_HINT}"
    return None


@functools.cache
def _cpu_problem() -> str | None:
    problem = _import_problem()
    return problem if problem is not None else backend_problem(torch.device("cpu"), DecodeBackend.CPU)


@functools.cache
def _working_backend(index: int) -> DecodeBackend | str:
    """The first CUDA backend that decodes the probe on cuda:``index``, or why none does."""
    problem = _import_problem()
    if problem is not None:
        return problem
    reasons = []
    for backend in CUDA_BACKENDS:
        why_not = backend_problem(torch.device("cuda", index), backend)
        if why_not is None:
            return backend
        reasons.append(f"{backend.value}: {why_not}")
    return (f"no nvImageCodec backend decodes on cuda:{index} ({'; '.join(reasons)}); are the nvJPEG libraries "
            f"installed? {_INSTALL_HINT}")


def backend_problem(device: torch.device, backend: DecodeBackend) -> str | None:
    """None where ``backend`` alone decodes a small JPEG's region on ``device``, else why not (a probe: it
    makes a decoder, decodes and releases it)."""
    decoder = NvImageCodecDecoder(device, backend, fallback=False)
    try:
        (image,) = decoder.decode([_probe_jpeg()], [(8, 8, 40, 56)])
    except (RuntimeError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    finally:
        decoder.close()
    if image is None or tuple(image.shape) != (3, 32, 48):
        return "it decodes no JPEG"
    return None


def _probe_jpeg() -> torch.Tensor:
    """A 64 x 64 4:2:0 baseline JPEG."""
    buffer = io.BytesIO()
    ramp = np.add.outer(np.arange(64), np.arange(64)).astype(np.uint8)
    Image.fromarray(np.stack([ramp, ramp[::-1], ramp.T], axis=-1)).save(buffer, "JPEG", quality=90)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
