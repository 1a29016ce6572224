"""Shared pieces of the batched augmentations: the op protocol, tensor specs, seeding, checks.

Every op works on a whole batch at once, float [B, C, H, W] in 0..1 on any device, with
per-sample random parameters drawn on that device from one ``torch.Generator`` per batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from loaders.errors import ConfigError
from loaders.read.seeding import batch_seed
from loaders.validate import check_int

__all__ = [
    "BatchOp",
    "TensorSpec",
    "batch_generator",
    "check_images",
    "check_probability",
    "check_range",
    "describe",
    "to_pair",
    "uniform",
]


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of a per-batch tensor; the batch dimension is symbolic, written -1."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    def __post_init__(self) -> None:
        if not isinstance(self.shape, tuple) or not all(
            isinstance(d, int) and not isinstance(d, bool) and (d > 0 or d == -1) for d in self.shape
        ):
            raise ConfigError(f"'shape' must be a tuple of positive ints or -1 (got {describe(self.shape)})")
        if not isinstance(self.dtype, torch.dtype):
            raise ConfigError(f"'dtype' must be a torch.dtype (got {describe(self.dtype)})")

    def matches(self, tensor: torch.Tensor) -> bool:
        """True when ``tensor`` has this dtype and shape (any size where the spec says -1)."""
        return (
            tensor.dtype == self.dtype
            and tensor.dim() == len(self.shape)
            and all(want in (-1, got) for want, got in zip(self.shape, tensor.shape))
        )


@runtime_checkable
class BatchOp(Protocol):
    """A batched augmentation: float [B, C, H, W] 0..1 in, float [B, C, H', W'] out, same device."""

    def __call__(self, images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """Augment ``images`` with per-sample parameters drawn from ``gen`` (on images.device)."""
        ...

    def output_spec(self, spec: TensorSpec) -> TensorSpec:
        """The spec of the output for an input of ``spec`` (shape [-1, C, H, W])."""
        ...


def batch_generator(seed: int, epoch: int, batch_index: int, device: str | torch.device,
                    rank: int = 0) -> torch.Generator:
    """A generator on ``device`` seeded by (seed, epoch, batch_index, rank) alone.

    The same batch position in the same epoch on the same rank draws the same parameters
    however many workers produced the batches; other ranks draw their own (their batch k
    holds other samples and must not get the same crops and MixUp pairs). The seed is
    ``loaders.read.seeding.batch_seed``.
    """
    for name, value in (("seed", seed), ("epoch", epoch), ("batch_index", batch_index), ("rank", rank)):
        check_int(name, value, 0)
    generator = torch.Generator(device=device)
    # torch takes seeds below 2^63 on every device type.
    generator.manual_seed(batch_seed(seed, epoch, batch_index, rank) >> 1)
    return generator


def uniform(low: float, high: float, size: int, gen: torch.Generator) -> torch.Tensor:
    """float32 [size] uniform in [low, high) on the generator's device."""
    return torch.rand(size, generator=gen, device=gen.device).mul_(high - low).add_(low)


def describe(value: object) -> str:
    """``"-3 that is a int"``: the tail of a validation message."""
    return f"{value!r} that is a {type(value).__name__}"


def check_probability(name: str, value: object) -> float:
    """``value`` as a float in [0, 1], else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"'{name}' must be a probability in [0, 1] (got {describe(value)})")
    return float(value)


def check_range(name: str, value: object, *, positive: bool = False) -> tuple[float, float]:
    """A (low, high) pair of finite floats with 0 <= low <= high (low > 0 if ``positive``)."""
    pair = value if isinstance(value, (tuple, list)) else None
    ok = (
        pair is not None
        and len(pair) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in pair)
        and (0 < pair[0] if positive else 0 <= pair[0])
        and pair[0] <= pair[1]
    )
    if not ok:
        kind = "positive" if positive else "non-negative"
        raise ConfigError(f"'{name}' must be a ({kind} low, high) pair with low <= high (got {describe(value)})")
    return float(pair[0]), float(pair[1])  # type: ignore[index]  # a 2-sequence, checked above


def to_pair(name: str, value: object) -> tuple[int, int]:
    """An output size: an int or an (height, width) pair of positive ints."""
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    if (
        not isinstance(pair, (tuple, list))
        or len(pair) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair)
    ):
        raise ConfigError(f"'{name}' must be a positive int or a (height, width) pair of them (got {describe(value)})")
    return int(pair[0]), int(pair[1])


def check_images(images: torch.Tensor, op: str, *, channels: int | None = None) -> None:
    """Raise ConfigError unless ``images`` is floating [B, C, H, W] (with ``channels`` channels)."""
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or not images.is_floating_point():
        got = f"{images.dtype} {tuple(images.shape)}" if isinstance(images, torch.Tensor) else describe(images)
        raise ConfigError(f"{op} expects float images [B, C, H, W] in 0..1 (got {got})")
    if channels is not None and images.shape[1] != channels:
        raise ConfigError(
            f"{op} expects {channels} channels in dim 1 of [B, C, H, W] (got shape {tuple(images.shape)})"
        )
