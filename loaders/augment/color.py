"""Colour batch ops on RGB float [B, 3, H, W] in 0..1: jitter, random grayscale, normalise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from loaders.augment.base import TensorSpec, check_images, check_probability, describe, uniform
from loaders.errors import ConfigError

__all__ = ["ColorJitter", "JitterParams", "Normalize", "RandomGrayscale", "grayscale"]

# ITU-R 601-2 luma, the weights torchvision's rgb_to_grayscale uses.
_LUMA = (0.2989, 0.587, 0.114)


def grayscale(images: torch.Tensor) -> torch.Tensor:
    """Luma of RGB float [B, 3, H, W] -> [B, 1, H, W], same dtype and device."""
    red, green, blue = images.unbind(dim=1)
    # Three kernels on single-channel planes: this runs several times per batch.
    luma = red * _LUMA[0]
    luma.add_(green, alpha=_LUMA[1]).add_(blue, alpha=_LUMA[2])
    return luma.unsqueeze(1)


def _blend(images: torch.Tensor, other: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """torchvision's _blend: clamp(factor * images + (1 - factor) * other, 0, 1); factor [B].

    Written as one ``lerp`` (other + factor * (images - other)) and an in-place clamp: two
    passes over the batch instead of four.
    """
    weight = factor.view(-1, 1, 1, 1).to(images.dtype)
    return torch.lerp(other.expand_as(images), images, weight).clamp_(0.0, 1.0)


@dataclass(frozen=True)
class JitterParams:
    """Per-sample jitter factors, float32 [B] on the device (1.0 = unchanged)."""

    brightness: torch.Tensor
    contrast: torch.Tensor
    saturation: torch.Tensor


@dataclass(frozen=True)
class ColorJitter:
    """Random brightness, contrast and saturation per sample, with torchvision's semantics.

    Each factor is uniform in [max(0, 1 - x), 1 + x] for x = brightness, contrast,
    saturation (0 leaves that property unchanged). Brightness scales the image, contrast
    blends it with the mean of its grayscale, saturation blends it with its grayscale; each
    step clamps to [0, 1]. Unlike torchvision the order is fixed (brightness, contrast,
    saturation) instead of shuffled per call. Hue is not supported.
    """

    brightness: float = 0.0
    contrast: float = 0.0
    saturation: float = 0.0

    def __post_init__(self) -> None:
        for name in ("brightness", "contrast", "saturation"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < float("inf"):
                raise ConfigError(f"'{name}' must be a non-negative float (got {describe(value)})")

    def sample_params(self, batch_size: int, gen: torch.Generator) -> JitterParams:
        """Factors for ``batch_size`` samples, drawn on gen.device (always three draws, so
        adding one property does not change the others' streams)."""
        brightness, contrast, saturation = (
            uniform(max(0.0, 1.0 - x), 1.0 + x, batch_size, gen)
            for x in (self.brightness, self.contrast, self.saturation)
        )
        return JitterParams(brightness, contrast, saturation)

    def apply(self, images: torch.Tensor, params: JitterParams) -> torch.Tensor:
        """Apply the factors in the fixed order: RGB float [B, 3, H, W] -> same shape."""
        if self.brightness > 0:
            images = torch.mul(images, params.brightness.view(-1, 1, 1, 1).to(images.dtype)).clamp_(0.0, 1.0)
        if self.contrast > 0:
            mean = grayscale(images).mean(dim=(1, 2, 3), keepdim=True)
            images = _blend(images, mean, params.contrast)
        if self.saturation > 0:
            images = _blend(images, grayscale(images), params.saturation)
        return images

    def __call__(self, images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """RGB float [B, 3, H, W] 0..1 -> same shape, dtype and device."""
        check_images(images, "ColorJitter", channels=3)
        return self.apply(images, self.sample_params(images.shape[0], gen))

    def output_spec(self, spec: TensorSpec) -> TensorSpec:
        return spec


@dataclass(frozen=True)
class RandomGrayscale:
    """Replace each image by its luma (repeated over the 3 channels) with probability ``p``."""

    p: float = 0.1

    def __post_init__(self) -> None:
        check_probability("p", self.p)

    def sample_params(self, batch_size: int, gen: torch.Generator) -> torch.Tensor:
        """bool [B] on gen.device: True where the sample becomes gray."""
        return torch.rand(batch_size, generator=gen, device=gen.device) < self.p

    def apply(self, images: torch.Tensor, gray: torch.Tensor) -> torch.Tensor:
        """RGB float [B, 3, H, W] -> same shape; samples where ``gray`` (bool [B]) become luma."""
        return torch.where(gray.view(-1, 1, 1, 1), grayscale(images).expand_as(images), images)

    def __call__(self, images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        check_images(images, "RandomGrayscale", channels=3)
        return self.apply(images, self.sample_params(images.shape[0], gen))

    def output_spec(self, spec: TensorSpec) -> TensorSpec:
        return spec


@dataclass(frozen=True)
class Normalize:
    """(x - mean) / std per channel, for float [B, C, H, W] in 0..1.

    ``mean`` and ``std`` are in the same 0..1 units as the input (ImageNet:
    (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), not 0..255. Deterministic: ``gen`` is
    ignored.
    """

    mean: Sequence[float]
    std: Sequence[float]
    # (device, dtype) -> (-mean / std, 1 / std) as [1, C, 1, 1]: built once, not copied per batch.
    _constants: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        mean, std = _floats("mean", self.mean), _floats("std", self.std)
        if len(mean) != len(std):
            raise ConfigError(f"'mean' and 'std' must have one value per channel each (got {len(mean)} and {len(std)})")
        if any(s <= 0 for s in std):
            raise ConfigError(f"'std' must be positive (got {describe(self.std)})")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)

    def apply(self, images: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """float [B, C, H, W] -> normalised float [B, C, H, W], same dtype and device.

        Computed as ``images * (1 / std) + (-mean / std)`` in one pass; ``out`` (same
        shape, any floating dtype and memory format) receives it cast on the way, so a
        cast to the model's dtype and layout costs no pass of its own.
        """
        if images.shape[1] != len(self.mean):
            raise ConfigError(f"Normalize has {len(self.mean)} channels but images have shape {tuple(images.shape)}")
        key = (images.device, images.dtype)
        if key not in self._constants:
            inv_std = torch.tensor([1.0 / s for s in self.std], dtype=torch.float64)
            bias = -torch.tensor(self.mean, dtype=torch.float64) * inv_std
            self._constants[key] = (bias.to(images.dtype).view(1, -1, 1, 1).to(images.device),
                                    inv_std.to(images.dtype).view(1, -1, 1, 1).to(images.device))
        bias, inv_std = self._constants[key]
        if out is None:
            return torch.addcmul(bias, images, inv_std)
        return torch.addcmul(bias, images, inv_std, out=out)

    def __call__(self, images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        check_images(images, "Normalize")
        return self.apply(images)

    def output_spec(self, spec: TensorSpec) -> TensorSpec:
        return spec


def _floats(name: str, values: object) -> tuple[float, ...]:
    if (
        isinstance(values, (str, bytes))
        or not isinstance(values, Sequence)
        or not values
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    ):
        raise ConfigError(f"'{name}' must be a non-empty sequence of floats, one per channel (got {describe(values)})")
    return tuple(float(v) for v in values)
