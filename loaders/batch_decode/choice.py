"""Where a loader decodes JPEG: ``DecodeMode`` and the rule (pure) that resolves ``decode="auto"``.

| decode | device | result |
|---|---|---|
| "cpu" | any | the workers decode (today's path) |
| "device" | CUDA or CPU | the workers hand on decode plans, the device decodes; a ConfigError says what is missing |
| "auto" (default) | CUDA, everything below holds, nvImageCodec decodes there | "device" |
| "auto" | anything else | "cpu", the reason kept in ``loader.stats()`` |

What "device" needs: a ``device``; a map-style dataset that declares ``can_defer_decode = True``
(``ShardDataset`` / ``ParquetShardDataset`` whose transform is one of this package's image
decode transforms, or a ``Compose`` of this package's transforms holding one); batches
(``batch_size`` not None) collated by the loader's own collate (no ``collate_fn``); on CUDA,
nvImageCodec with one of its CUDA backends working there; on the CPU, nvImageCodec's CPU
backend (``decoders.device_decoder_problem``). On the CPU, "auto" stays "cpu": the CPU backend
is for tests and parity (the same code path as on CUDA), slower than the fused CPU path.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import torch

from loaders.errors import ConfigError

__all__ = ["DecodeChoice", "DecodeInputs", "DecodeMode", "choose_decode"]


class DecodeMode(enum.StrEnum):
    """Where JPEGs are decoded: chosen by the rule, in the workers (CPU) or on the loader's device."""

    AUTO = "auto"
    CPU = "cpu"
    DEVICE = "device"


@dataclass(frozen=True, kw_only=True)
class DecodeInputs:
    """What the rule reads. dataset: its class name (for messages); can_defer: it declares
    ``can_defer_decode = True``; own_collate: no ``collate_fn`` was given; batched: ``batch_size``
    is not None; iterable: an IterableDataset."""

    requested: DecodeMode
    device: torch.device | None
    dataset: str
    can_defer: bool
    own_collate: bool
    batched: bool
    iterable: bool


@dataclass(frozen=True)
class DecodeChoice:
    """``mode``: CPU or DEVICE; ``reason``: why, in words (``loader.stats()`` shows it)."""

    mode: DecodeMode
    reason: str


def choose_decode(given: DecodeInputs, decoder_problem: Callable[[torch.device], str | None]) -> DecodeChoice:
    """The decode mode for ``given``; ``decoder_problem(device)``: why no batch decoder works there (None: one
    does), asked only when everything else holds. ConfigError when "device" was asked for and cannot be."""
    if given.requested is DecodeMode.CPU:
        return DecodeChoice(DecodeMode.CPU, "decode='cpu' was given")
    device = given.device
    if given.requested is DecodeMode.AUTO and (device is None or device.type != "cuda"):
        return DecodeChoice(DecodeMode.CPU, "decode='auto' decodes on the device only where it is CUDA")
    why_not = _missing(given)
    if why_not is None and device is not None:
        why_not = decoder_problem(device)
    if given.requested is DecodeMode.DEVICE:
        if why_not is not None:
            raise ConfigError(f"decode='device' cannot be used: {why_not}; use decode='cpu' (or 'auto')")
        return DecodeChoice(DecodeMode.DEVICE, f"decode='device' was given ({device})")
    if why_not is not None:
        return DecodeChoice(DecodeMode.CPU, f"decode='auto' decodes in the workers: {why_not}")
    return DecodeChoice(DecodeMode.DEVICE, f"decode='auto' on {device}: nvImageCodec decodes there")


def _missing(given: DecodeInputs) -> str | None:
    """The first precondition of device decoding that ``given`` lacks, in words; None when all hold."""
    if given.device is None:
        return "it needs 'device' (where batches go)"
    if given.iterable:
        return "it needs a map-style dataset (an IterableDataset's samples are read by its own code)"
    if not given.batched:
        return "it needs batches (batch_size=None hands over single samples)"
    if not given.own_collate:
        return "a collate_fn was given: the loader's own collate packs the encoded images"
    if not given.can_defer:
        return (f"the dataset ({given.dataset}) does not declare can_defer_decode = True: give a ShardDataset or "
                "ParquetShardDataset a transform of loaders' decode transforms (RandomResizedCropDecode, "
                "CenterCropDecode, DecodeImage, or a Compose of loaders' transforms holding one)")
    return None
