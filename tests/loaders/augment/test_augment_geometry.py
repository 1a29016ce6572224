"""RandomResizedCrop and RandomHorizontalFlip against per-sample reference loops."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from loaders.augment import RandomHorizontalFlip, RandomResizedCrop, TensorSpec, batch_generator
from loaders.errors import ConfigError
from tests.loaders.helpers import smooth_images


def reference_rrc_params(height: int, width: int, count: int, seed: int) -> torch.Tensor:
    """torchvision's RandomResizedCrop.get_params loop, one sample at a time: [count, 2] (area, log ratio)."""
    gen = torch.Generator().manual_seed(seed)
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    rows = []
    for _ in range(count):
        for _attempt in range(10):
            area = height * width * float(torch.empty(1).uniform_(*scale, generator=gen))
            log_r = float(torch.empty(1).uniform_(math.log(ratio[0]), math.log(ratio[1]), generator=gen))
            w = int(round(math.sqrt(area * math.exp(log_r))))
            h = int(round(math.sqrt(area / math.exp(log_r))))
            if 0 < w <= width and 0 < h <= height:
                rows.append((w * h / (height * width), math.log(w / h)))
                break
        else:
            rows.append((1.0, 0.0))
    return torch.tensor(rows)


def test_crop_params_respect_bounds_scale_and_ratio() -> None:
    op = RandomResizedCrop(16, scale=(0.2, 0.9), ratio=(0.5, 2.0))
    params = op.sample_params(4000, batch_generator(0, 0, 0, "cpu"), 48, 64)
    assert params.top.dtype == torch.int64
    assert bool(((params.height >= 1) & (params.top >= 0) & (params.top + params.height <= 48)).all())
    assert bool(((params.width >= 1) & (params.left >= 0) & (params.left + params.width <= 64)).all())
    area = (params.height * params.width).double() / (48 * 64)
    aspect = params.width.double() / params.height
    # Rounding the sides to whole pixels moves area and aspect slightly past the ranges.
    assert area.min() > 0.2 * 0.9 and area.max() < 0.9 * 1.1
    assert aspect.min() > 0.5 * 0.9 and aspect.max() < 2.0 * 1.1
    boxes = torch.stack([params.top, params.left, params.height, params.width], dim=1)
    assert len(torch.unique(boxes, dim=0)) > 3900  # samples in one batch get their own boxes


def test_crop_distribution_matches_torchvisions_sequential_sampler() -> None:
    params = RandomResizedCrop(8).sample_params(4000, batch_generator(1, 0, 0, "cpu"), 40, 60)
    ours = torch.stack(
        [(params.height * params.width).double() / 2400, (params.width.double() / params.height).log()], dim=1
    )
    reference = reference_rrc_params(40, 60, 4000, seed=1).double()
    assert torch.allclose(ours.mean(0), reference.mean(0), atol=0.02)
    assert torch.allclose(ours.std(0), reference.std(0), atol=0.02)


def test_crop_falls_back_to_a_central_box_when_no_candidate_fits() -> None:
    op = RandomResizedCrop(8, scale=(0.9, 1.0), ratio=(4.0, 5.0))  # 4:1 at 90 % of a square never fits
    params = op.sample_params(5, batch_generator(0, 0, 0, "cpu"), 32, 32)
    assert params.width.tolist() == [32] * 5 and params.height.tolist() == [8] * 5
    assert params.top.tolist() == [12] * 5 and params.left.tolist() == [0] * 5


def test_batched_crop_matches_per_sample_crop_and_interpolate() -> None:
    images = smooth_images(12, 64, 72)
    op = RandomResizedCrop((24, 32))
    params = op.sample_params(12, batch_generator(2, 0, 0, "cpu"), 64, 72)
    out = op.apply(images, params)
    assert out.shape == (12, 3, 24, 32)
    for i in range(12):
        t, left, h, w = (int(v[i]) for v in (params.top, params.left, params.height, params.width))
        crop = images[i : i + 1, :, t : t + h, left : left + w]
        ref = F.interpolate(crop, size=(24, 32), mode="bilinear", align_corners=False)[0]
        diff = (out[i] - ref).abs()
        # Same bilinear weights inside; at the crop edge grid_sample may read the pixel just
        # outside the box where interpolate clamps to the box.
        assert diff[:, 2:-2, 2:-2].max() < 1e-5
        assert diff.mean() < 2e-3


def test_full_image_box_at_input_size_is_the_identity() -> None:
    images = smooth_images(3, 20, 30)
    op = RandomResizedCrop((20, 30), scale=(1.0, 1.0), ratio=(1.5, 1.5))
    params = op.sample_params(3, batch_generator(0, 0, 0, "cpu"), 20, 30)
    assert params.height.tolist() == [20] * 3 and params.width.tolist() == [30] * 3
    assert torch.allclose(op.apply(images, params), images, atol=1e-5)


def test_crop_is_deterministic_in_the_generator_and_declares_its_output() -> None:
    images = smooth_images(4, 32, 32)
    op = RandomResizedCrop(16)
    first = op(images, batch_generator(5, 1, 2, "cpu"))
    again = op(images, batch_generator(5, 1, 2, "cpu"))
    other = op(images, batch_generator(5, 1, 3, "cpu"))
    assert torch.equal(first, again) and not torch.equal(first, other)
    spec = op.output_spec(TensorSpec((-1, 3, 32, 32), torch.float32))
    assert spec == TensorSpec((-1, 3, 16, 16), torch.float32) and spec.matches(first)


def test_flip_matches_a_per_sample_loop_exactly() -> None:
    images = smooth_images(64, 8, 10)
    op = RandomHorizontalFlip(0.5)
    flip = op.sample_params(64, batch_generator(0, 0, 0, "cpu"))
    assert flip.dtype == torch.bool and 0 < int(flip.sum()) < 64
    out = op.apply(images, flip)
    for i in range(64):
        expected = images[i].flip(-1) if flip[i] else images[i]
        assert torch.equal(out[i], expected)


@pytest.mark.parametrize("size", [(12, 16), (9, 13)])
def test_a_flip_folded_into_the_crop_equals_the_crop_then_the_flip(size: tuple[int, int]) -> None:
    images = smooth_images(32, 20, 24, seed=3)
    crop, flip = RandomResizedCrop(size), RandomHorizontalFlip()
    gen = batch_generator(1, 0, 0, "cpu")
    params, flips = crop.sample_params(32, gen, 20, 24), flip.sample_params(32, gen)
    assert 0 < int(flips.sum()) < 32
    folded = crop.apply(images, params, flip=flips)
    separate = flip.apply(crop.apply(images, params), flips)
    # Even widths mirror every grid coordinate exactly; an odd width's middle column may
    # differ by the rounding of its (near-zero) coordinate.
    assert torch.allclose(folded, separate, atol=1e-6, rtol=0)
    if size[1] % 2 == 0:
        assert torch.equal(folded, separate)


@pytest.mark.parametrize(("p", "flipped"), [(0.0, 0), (1.0, 16)])
def test_flip_probability_extremes(p: float, flipped: int) -> None:
    assert int(RandomHorizontalFlip(p).sample_params(16, batch_generator(0, 0, 0, "cpu")).sum()) == flipped


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RandomResizedCrop(-3), "'size' must be a positive int"),
        (lambda: RandomResizedCrop((4, 0)), "'size' must be a positive int"),
        (lambda: RandomResizedCrop(8, scale=(0.5, 0.1)), "'scale' must be"),
        (lambda: RandomResizedCrop(8, scale=(0.5, 1.5)), "'scale' must lie within"),
        (lambda: RandomResizedCrop(8, ratio=(0.0, 1.0)), "'ratio' must be"),
        (lambda: RandomResizedCrop(8, num_candidates=0), "'num_candidates' must be a positive int"),
        (lambda: RandomHorizontalFlip(1.5), "'p' must be a probability"),
    ],
)
def test_invalid_arguments_raise_config_error(make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()  # type: ignore[operator]


def test_uint8_input_is_rejected_with_the_expected_layout() -> None:
    with pytest.raises(ConfigError, match=r"float images \[B, C, H, W\]"):
        RandomResizedCrop(8)(torch.zeros(2, 8, 8, 3, dtype=torch.uint8), batch_generator(0, 0, 0, "cpu"))
