"""Geometric batch ops: random resized crop (one batched grid_sample) and horizontal flip."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from loaders.augment.base import TensorSpec, check_images, check_probability, check_range, describe, to_pair, uniform
from loaders.errors import ConfigError
from loaders.validate import check_int

__all__ = ["CropParams", "RandomHorizontalFlip", "RandomResizedCrop"]


@dataclass(frozen=True)
class CropParams:
    """Per-sample crop boxes in input pixels: int64 [B] each, on the device."""

    top: torch.Tensor
    left: torch.Tensor
    height: torch.Tensor
    width: torch.Tensor


@dataclass(frozen=True)
class RandomResizedCrop:
    """Crop a random area and aspect ratio per sample, resize to ``size``; torchvision's distribution.

    Area fraction uniform in ``scale``, log aspect ratio (width / height) uniform in
    log(``ratio``). torchvision retries up to 10 times and falls back to a central crop;
    here ``num_candidates`` candidates are drawn per sample at once and the first that
    fits is kept, which is the same distribution. Resizing is bilinear with
    ``align_corners=False`` (pixel centres, as ``F.interpolate``) and no antialiasing, so
    strong downscaling aliases; samples near the crop edge may read the neighbouring
    pixel outside the crop (``F.interpolate`` on a cropped tensor clamps instead).
    """

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    num_candidates: int = 10
    out_size: tuple[int, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_size", to_pair("size", self.size))
        low, high = check_range("scale", self.scale, positive=True)
        if high > 1.0:
            raise ConfigError(f"'scale' must lie within (0, 1] (got {describe(self.scale)})")
        check_range("ratio", self.ratio, positive=True)
        check_int("num_candidates", self.num_candidates, 1)

    def sample_params(self, batch_size: int, gen: torch.Generator, height: int, width: int) -> CropParams:
        """Crop boxes for ``batch_size`` images of ``height`` x ``width`` pixels, drawn on gen.device."""
        shape = (batch_size, self.num_candidates)
        area = float(height * width)
        scale = uniform(self.scale[0], self.scale[1], batch_size * self.num_candidates, gen).view(shape)
        log_low, log_high = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = uniform(log_low, log_high, batch_size * self.num_candidates, gen).view(shape).exp_()
        target = scale.mul_(area)
        widths = torch.sqrt(target * aspect).round_()
        heights = torch.sqrt(target / aspect).round_()
        fits = (widths >= 1) & (widths <= width) & (heights >= 1) & (heights <= height)
        first = fits.to(torch.uint8).argmax(dim=1, keepdim=True)  # first fitting candidate (0 if none)
        crop_w = widths.gather(1, first).squeeze(1)
        crop_h = heights.gather(1, first).squeeze(1)
        fallback_h, fallback_w = self._central_box(height, width)
        found = fits.any(dim=1)
        crop_w = torch.where(found, crop_w, torch.full_like(crop_w, fallback_w))
        crop_h = torch.where(found, crop_h, torch.full_like(crop_h, fallback_h))
        u_top = torch.rand(batch_size, generator=gen, device=gen.device)
        u_left = torch.rand(batch_size, generator=gen, device=gen.device)
        # floor(u * n) is uniform over 0..n-1 like randint; the fallback box is centred.
        top = torch.where(found, (u_top * (height - crop_h + 1)).floor_(), ((height - crop_h) / 2).floor_())
        left = torch.where(found, (u_left * (width - crop_w + 1)).floor_(), ((width - crop_w) / 2).floor_())
        top = torch.minimum(top, height - crop_h)  # guards u * n rounding up to n in float32
        left = torch.minimum(left, width - crop_w)
        as_int = torch.int64
        return CropParams(top.to(as_int), left.to(as_int), crop_h.to(as_int), crop_w.to(as_int))

    def _central_box(self, height: int, width: int) -> tuple[int, int]:
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            return int(round(width / self.ratio[0])), width
        if in_ratio > self.ratio[1]:
            return height, int(round(height * self.ratio[1]))
        return height, width

    def apply(self, images: torch.Tensor, params: CropParams, flip: torch.Tensor | None = None) -> torch.Tensor:
        """Resample each image's box to ``out_size``: float [B, C, H, W] -> float [B, C, h, w].

        ``flip`` (bool [B], optional) mirrors the samples where it is True in the same
        resampling, by negating the horizontal scale of their affine map: one pass over the
        batch instead of a crop followed by ``RandomHorizontalFlip.apply``, same values.
        """
        batch, _, height, width = images.shape
        box_h = params.height.to(images.dtype)
        box_w = params.width.to(images.dtype)
        # Affine map from output to input in normalised coordinates (align_corners=False):
        # x_in = (w / W) * x_out + (2 * left + w) / W - 1, likewise for y. A flipped sample
        # reads x_out's mirror -x_out: the same map with the x scale negated. The map is
        # axis-aligned, so the grid is built from one row of x and one column of y per sample
        # (affine_grid would spend a batched matrix product with K=3 on it).
        scale_x = box_w / width
        if flip is not None:
            scale_x = torch.where(flip, -scale_x, scale_x)
        offset_x = (2 * params.left.to(images.dtype) + box_w) / width - 1
        offset_y = (2 * params.top.to(images.dtype) + box_h) / height - 1
        out_h, out_w = self.out_size
        grid_x = torch.addcmul(offset_x[:, None], scale_x[:, None], _pixel_centres(out_w, images)[None, :])
        grid_y = torch.addcmul(offset_y[:, None], (box_h / height)[:, None], _pixel_centres(out_h, images)[None, :])
        grid = torch.stack((grid_x[:, None, :].expand(batch, out_h, out_w),
                            grid_y[:, :, None].expand(batch, out_h, out_w)), dim=-1)
        return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)

    def __call__(self, images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """float [B, C, H, W] 0..1 -> float [B, C, size[0], size[1]] 0..1, same device."""
        check_images(images, "RandomResizedCrop")
        params = self.sample_params(images.shape[0], gen, images.shape[2], images.shape[3])
        return self.apply(images, params)

    def output_spec(self, spec: TensorSpec) -> TensorSpec:
        return TensorSpec((*spec.shape[:-2], *self.out_size), spec.dtype)


def _pixel_centres(size: int, like: torch.Tensor) -> torch.Tensor:
    """[size] normalised coordinates of pixel centres, affine_grid's (align_corners=False):
    symmetric about 0 to the bit (linspace computes each half from its own end)."""
    return torch.linspace(-1.0, 1.0, size, dtype=like.dtype, device=like.device) * ((size - 1) / size)


@dataclass(frozen=True)
class RandomHorizontalFlip:
    """Mirror each image left-right with probability ``p``, independently per sample."""

    p: float = 0.5

    def __post_init__(self) -> None:
        check_probability("p", self.p)

    def sample_params(self, batch_size: int, gen: torch.Generator) -> torch.Tensor:
        """bool [B] on gen.device: True where the sample is flipped."""
        return torch.rand(batch_size, generator=gen, device=gen.device) < self.p

    def apply(self, images: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
        """Flip along W the samples where ``flip`` (bool [B]) is True."""
        return torch.where(flip.view(-1, 1, 1, 1), images.flip(-1), images)

    def __call__(self, images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """float [B, C, H, W] -> float [B, C, H, W], same device."""
        check_images(images, "RandomHorizontalFlip")
        return self.apply(images, self.sample_params(images.shape[0], gen))

    def output_spec(self, spec: TensorSpec) -> TensorSpec:
        return spec
