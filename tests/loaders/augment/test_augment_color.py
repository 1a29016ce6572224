"""ColorJitter, RandomGrayscale and Normalize against per-sample formulas and Pillow."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance

from loaders.augment import (
    ColorJitter,
    JitterParams,
    Normalize,
    RandomGrayscale,
    TensorSpec,
    batch_generator,
    grayscale,
)
from loaders.errors import ConfigError
from tests.loaders.helpers import smooth_images


def reference_jitter(image: torch.Tensor, b: float, c: float, s: float) -> torch.Tensor:
    """torchvision's adjust_brightness, adjust_contrast, adjust_saturation on one [3, H, W] image."""
    def gray(x: torch.Tensor) -> torch.Tensor:
        return (0.2989 * x[0] + 0.587 * x[1] + 0.114 * x[2]).unsqueeze(0)

    image = (b * image).clamp(0, 1)
    image = (c * image + (1 - c) * gray(image).mean()).clamp(0, 1)
    return (s * image + (1 - s) * gray(image)).clamp(0, 1)


def to_pil(image: torch.Tensor) -> Image.Image:
    return Image.fromarray((image.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy())


def from_pil(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(image)).permute(2, 0, 1).float() / 255


def test_jitter_factors_lie_in_their_ranges_and_differ_per_sample() -> None:
    params = ColorJitter(0.4, 1.5, 0.2).sample_params(2000, batch_generator(0, 0, 0, "cpu"))
    ranges = ((params.brightness, 0.6, 1.4), (params.contrast, 0.0, 2.5), (params.saturation, 0.8, 1.2))
    for factors, low, high in ranges:
        assert factors.min() >= low and factors.max() <= high
        assert factors.min() < low + 0.01 and factors.max() > high - 0.01
        assert len(torch.unique(factors)) > 1900


def test_jitter_matches_the_per_sample_formula() -> None:
    images = smooth_images(16, 12, 16)
    op = ColorJitter(0.5, 0.5, 0.5)
    params = op.sample_params(16, batch_generator(3, 0, 0, "cpu"))
    out = op.apply(images, params)
    for i in range(16):
        b, c, s = float(params.brightness[i]), float(params.contrast[i]), float(params.saturation[i])
        assert torch.allclose(out[i], reference_jitter(images[i], b, c, s), atol=1e-6)


def test_zero_strength_jitter_is_the_identity() -> None:
    images = smooth_images(4, 12, 16)
    assert torch.equal(ColorJitter()(images, batch_generator(0, 0, 0, "cpu")), images)


@pytest.mark.parametrize("prop", ["brightness", "saturation"])
def test_jitter_agrees_with_pillow_image_enhance(prop: str) -> None:
    images = (smooth_images(6, 12, 16) * 255).round() / 255  # exactly representable in uint8
    factors = torch.tensor([0.3, 0.7, 1.0, 1.2, 1.5, 1.9])
    ones = torch.ones(6)
    params = JitterParams(factors, ones, ones) if prop == "brightness" else JitterParams(ones, ones, factors)
    op = ColorJitter(brightness=1.0 if prop == "brightness" else 0.0, saturation=1.0 if prop == "saturation" else 0.0)
    out = op.apply(images, params)
    enhancer = ImageEnhance.Brightness if prop == "brightness" else ImageEnhance.Color
    for i in range(6):
        expected = from_pil(enhancer(to_pil(images[i])).enhance(float(factors[i])))
        assert (out[i] - expected).abs().max() <= 2.5 / 255  # Pillow rounds to uint8 at each step


def test_grayscale_matches_the_per_sample_formula_and_keeps_others() -> None:
    images = smooth_images(32, 12, 16)
    op = RandomGrayscale(0.5)
    gray = op.sample_params(32, batch_generator(0, 0, 0, "cpu"))
    assert 0 < int(gray.sum()) < 32
    out = op.apply(images, gray)
    for i in range(32):
        if gray[i]:
            luma = 0.2989 * images[i, 0] + 0.587 * images[i, 1] + 0.114 * images[i, 2]
            assert torch.allclose(out[i], luma.expand(3, -1, -1), atol=1e-6)
        else:
            assert torch.equal(out[i], images[i])
    assert grayscale(images).shape == (32, 1, 12, 16)


def test_normalize_matches_the_formula_and_keeps_dtype() -> None:
    images = smooth_images(2, 12, 16)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    out = Normalize(mean, std)(images, batch_generator(0, 0, 0, "cpu"))
    expected = (images - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    assert torch.allclose(out, expected, atol=1e-5) and out.dtype == images.dtype
    assert Normalize(mean, std).output_spec(TensorSpec((-1, 3, 12, 16), torch.float32)).matches(out)


def test_color_ops_reject_non_rgb_images() -> None:
    with pytest.raises(ConfigError, match="3 channels"):
        ColorJitter(0.1)(torch.rand(2, 1, 4, 4), batch_generator(0, 0, 0, "cpu"))
    with pytest.raises(ConfigError, match="Normalize has 3 channels"):
        Normalize((0.5,) * 3, (0.5,) * 3).apply(torch.rand(2, 1, 4, 4))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ColorJitter(brightness=-0.1), "'brightness' must be a non-negative float"),
        (lambda: ColorJitter(contrast="0.4"), "'contrast' must be a non-negative float"),
        (lambda: RandomGrayscale(-0.5), "'p' must be a probability"),
        (lambda: Normalize((0.5, 0.5), (0.5,)), "one value per channel"),
        (lambda: Normalize((0.5,), (0.0,)), "'std' must be positive"),
        (lambda: Normalize("abc", (0.5,)), "'mean' must be a non-empty sequence"),
    ],
)
def test_invalid_arguments_raise_config_error(make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()  # type: ignore[operator]
