"""Label-mixing batch ops: MixUp and CutMix with per-sample mixing weights.

Each sample i is mixed with its neighbour ``(i - 1) mod B`` (the batch rolled by one, as
torchvision does). The weight lambda is drawn per sample from Beta(alpha, alpha), not
once per batch (timm's ``mode="elem"``, not its default ``"batch"``): it costs the same
vectorised, and every sample gets its own mix. Integer labels become one-hot soft labels,
float32 [B, num_classes]; soft labels of that shape are mixed as given.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from loaders.augment.base import check_images, describe
from loaders.errors import ConfigError
from loaders.validate import check_int

__all__ = ["CutMix", "CutMixParams", "MixUp", "beta", "soft_labels"]


def beta(alpha: float, batch_size: int, gen: torch.Generator) -> torch.Tensor:
    """float32 [B] from Beta(alpha, alpha), drawn on gen.device.

    Beta(a, a) = X / (X + Y) with X, Y ~ Gamma(a). ``torch.distributions`` takes no
    generator, so this calls the kernel it uses, ``torch._standard_gamma``, with one.
    """
    concentration = torch.full((2, batch_size), float(alpha), device=gen.device)
    gammas = torch._standard_gamma(concentration, generator=gen)
    total = gammas.sum(dim=0)
    # Both draws can underflow to 0 for tiny alpha; either side is then equally likely.
    return torch.where(total > 0, gammas[0] / total, torch.full_like(total, 0.5))


def soft_labels(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Integer [B] -> one-hot float32 [B, num_classes]; float [B, num_classes] -> float32 as is."""
    if labels.dim() == 1 and not labels.is_floating_point():
        # On CUDA, F.one_hot checks the range with a device assert, not a host sync.
        return F.one_hot(labels.long(), num_classes).to(torch.float32)
    if labels.dim() == 2 and labels.shape[1] == num_classes:
        return labels.to(torch.float32)
    raise ConfigError(
        f"labels must be integer [B] or float [B, {num_classes}] (got {labels.dtype} {tuple(labels.shape)})"
    )


def _check_mix_args(alpha: object, num_classes: object) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < float("inf"):
        raise ConfigError(f"'alpha' must be a positive float (got {describe(alpha)})")
    check_int("num_classes", num_classes, 1)


def _check_batch(images: torch.Tensor, labels: torch.Tensor, op: str) -> None:
    check_images(images, op)
    if labels.shape[0] != images.shape[0]:
        raise ConfigError(f"{op}: {labels.shape[0]} labels for {images.shape[0]} images")


def _mix_labels(targets: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    lam = lam.view(-1, 1).to(targets.dtype)
    return lam * targets + (1.0 - lam) * targets.roll(1, dims=0)


@dataclass(frozen=True)
class MixUp:
    """x_i <- lam_i x_i + (1 - lam_i) x_{i-1}, labels likewise; lam_i ~ Beta(alpha, alpha)."""

    alpha: float = 0.2
    num_classes: int = 1000

    def __post_init__(self) -> None:
        _check_mix_args(self.alpha, self.num_classes)

    def sample_params(self, batch_size: int, gen: torch.Generator) -> torch.Tensor:
        """lam, float32 [B] in [0, 1] on gen.device: the weight of each sample's own image."""
        return beta(self.alpha, batch_size, gen)

    def apply(self, images: torch.Tensor, labels: torch.Tensor, lam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """float [B, C, H, W], labels [B] or [B, K], lam [B] -> (mixed images, float32 [B, K])."""
        weight = lam.view(-1, 1, 1, 1).to(images.dtype)
        mixed = weight * images + (1.0 - weight) * images.roll(1, dims=0)
        return mixed, _mix_labels(soft_labels(labels, self.num_classes), lam)

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mix a batch: float [B, C, H, W] 0..1 and labels -> (same shape, soft labels float32 [B, K])."""
        _check_batch(images, labels, "MixUp")
        return self.apply(images, labels, self.sample_params(images.shape[0], gen))


@dataclass(frozen=True)
class CutMixParams:
    """Per-sample boxes pasted from the neighbour, int64 [B] each (rows top..bottom-1,
    columns left..right-1), and ``lam`` float32 [B]: the fraction of the sample's own
    pixels left, i.e. 1 - box area / image area (the corrected weight of its label)."""

    top: torch.Tensor
    left: torch.Tensor
    bottom: torch.Tensor
    right: torch.Tensor
    lam: torch.Tensor


@dataclass(frozen=True)
class CutMix:
    """Paste a box of the neighbour into each sample; labels mixed by the box's actual area.

    Box as in torchvision: centre uniform over the image, half-sides
    floor(sqrt(1 - lam) / 2 * side) for lam ~ Beta(alpha, alpha), clipped to the image, so
    the label weight is corrected for the clipped area.
    """

    alpha: float = 1.0
    num_classes: int = 1000

    def __post_init__(self) -> None:
        _check_mix_args(self.alpha, self.num_classes)

    def sample_params(self, batch_size: int, gen: torch.Generator, height: int, width: int) -> CutMixParams:
        """Boxes and corrected weights for ``batch_size`` images of height x width, on gen.device."""
        lam = beta(self.alpha, batch_size, gen)
        centre_y = (torch.rand(batch_size, generator=gen, device=gen.device) * height).floor_().clamp_(max=height - 1)
        centre_x = (torch.rand(batch_size, generator=gen, device=gen.device) * width).floor_().clamp_(max=width - 1)
        half = 0.5 * torch.sqrt(1.0 - lam)
        half_h, half_w = (half * height).floor_(), (half * width).floor_()
        top = (centre_y - half_h).clamp_(min=0)
        bottom = (centre_y + half_h).clamp_(max=height)
        left = (centre_x - half_w).clamp_(min=0)
        right = (centre_x + half_w).clamp_(max=width)
        corrected = 1.0 - (bottom - top) * (right - left) / float(height * width)
        as_int = torch.int64
        return CutMixParams(top.to(as_int), left.to(as_int), bottom.to(as_int), right.to(as_int), corrected)

    def box_mask(self, params: CutMixParams, height: int, width: int) -> torch.Tensor:
        """bool [B, 1, H, W] on the params' device: True inside each sample's box."""
        rows = torch.arange(height, device=params.top.device).view(1, -1, 1)
        cols = torch.arange(width, device=params.top.device).view(1, 1, -1)
        inside_rows = (rows >= params.top.view(-1, 1, 1)) & (rows < params.bottom.view(-1, 1, 1))
        inside_cols = (cols >= params.left.view(-1, 1, 1)) & (cols < params.right.view(-1, 1, 1))
        return (inside_rows & inside_cols).unsqueeze(1)

    def apply(
        self, images: torch.Tensor, labels: torch.Tensor, params: CutMixParams
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """float [B, C, H, W], labels [B] or [B, K] -> (images with boxes pasted, float32 [B, K])."""
        mask = self.box_mask(params, images.shape[2], images.shape[3])
        mixed = torch.where(mask, images.roll(1, dims=0), images)
        return mixed, _mix_labels(soft_labels(labels, self.num_classes), params.lam)

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mix a batch: float [B, C, H, W] 0..1 and labels -> (same shape, soft labels float32 [B, K])."""
        _check_batch(images, labels, "CutMix")
        params = self.sample_params(images.shape[0], gen, images.shape[2], images.shape[3])
        return self.apply(images, labels, params)
