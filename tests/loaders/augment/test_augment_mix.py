"""MixUp and CutMix: per-sample weights, label mixing, CutMix weights corrected by the box area."""

from __future__ import annotations

import pytest
import torch

from loaders.augment import CutMix, MixUp, batch_generator, soft_labels
from loaders.augment.mix import beta
from loaders.errors import ConfigError


def constant_images(batch: int, height: int = 10, width: int = 14) -> torch.Tensor:
    """Sample i is filled with (i + 1) / (B + 1): every pixel tells which sample it came from."""
    values = (torch.arange(batch, dtype=torch.float32) + 1) / (batch + 1)
    return values.view(-1, 1, 1, 1).expand(batch, 3, height, width).clone()


def test_beta_has_the_mean_and_variance_of_beta_alpha_alpha() -> None:
    for alpha in (0.2, 1.0, 4.0):
        lam = beta(alpha, 20000, batch_generator(0, 0, 0, "cpu"))
        assert lam.min() >= 0 and lam.max() <= 1
        assert abs(float(lam.mean()) - 0.5) < 0.01
        expected_var = 1 / (4 * (2 * alpha + 1))
        assert abs(float(lam.var()) / expected_var - 1) < 0.05


def test_soft_labels_from_integers_and_soft_input() -> None:
    one_hot = soft_labels(torch.tensor([2, 0]), 3)
    assert one_hot.dtype == torch.float32 and one_hot.tolist() == [[0, 0, 1], [1, 0, 0]]
    soft = torch.tensor([[0.2, 0.8, 0.0]], dtype=torch.float64)
    assert soft_labels(soft, 3).dtype == torch.float32
    with pytest.raises(ConfigError, match=r"integer \[B\] or float \[B, 3\]"):
        soft_labels(torch.zeros(2, 4), 3)


def test_mixup_matches_the_per_sample_formula() -> None:
    images, labels = torch.rand(8, 3, 5, 5), torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    op = MixUp(alpha=0.4, num_classes=4)
    lam = op.sample_params(8, batch_generator(0, 0, 0, "cpu"))
    assert len(torch.unique(lam)) == 8  # per-sample weights
    mixed, targets = op.apply(images, labels, lam)
    for i in range(8):
        j = (i - 1) % 8
        assert torch.allclose(mixed[i], lam[i] * images[i] + (1 - lam[i]) * images[j], atol=1e-6)
        expected = torch.zeros(4)
        expected[labels[i]] += lam[i]
        expected[labels[j]] += 1 - lam[i]
        assert torch.allclose(targets[i], expected, atol=1e-6)
    assert torch.allclose(targets.sum(1), torch.ones(8))


def test_cutmix_pastes_the_neighbours_box_and_corrects_lambda_by_its_area() -> None:
    batch, height, width = 16, 10, 14
    images = constant_images(batch, height, width)
    op = CutMix(alpha=1.0, num_classes=batch)
    params = op.sample_params(batch, batch_generator(4, 0, 0, "cpu"), height, width)
    assert bool(((0 <= params.top) & (params.top <= params.bottom) & (params.bottom <= height)).all())
    assert bool(((0 <= params.left) & (params.left <= params.right) & (params.right <= width)).all())
    mixed, targets = op.apply(images, torch.arange(batch), params)
    for i in range(batch):
        j = (i - 1) % batch
        from_neighbour = mixed[i, 0] == images[j, 0, 0, 0]
        t, left, b, r = (int(v[i]) for v in (params.top, params.left, params.bottom, params.right))
        expected_mask = torch.zeros(height, width, dtype=torch.bool)
        expected_mask[t:b, left:r] = True
        assert torch.equal(from_neighbour, expected_mask)
        own_fraction = 1 - expected_mask.float().mean()
        assert torch.isclose(params.lam[i], own_fraction, atol=1e-6)
        assert torch.isclose(targets[i, i], own_fraction, atol=1e-6)
        assert torch.isclose(targets[i, j], 1 - own_fraction, atol=1e-6)


def test_mix_ops_are_deterministic_in_the_generator() -> None:
    images, labels = torch.rand(6, 3, 8, 8), torch.arange(6)
    for op in (MixUp(1.0, 6), CutMix(1.0, 6)):
        first = op(images, labels, batch_generator(1, 2, 3, "cpu"))
        again = op(images, labels, batch_generator(1, 2, 3, "cpu"))
        assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


@pytest.mark.parametrize("cls", [MixUp, CutMix])
def test_mismatched_label_count_raises(cls: type) -> None:
    with pytest.raises(ConfigError, match="3 labels for 4 images"):
        cls(1.0, 5)(torch.rand(4, 3, 4, 4), torch.arange(3), batch_generator(0, 0, 0, "cpu"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0.0, "num_classes": 10}, "'alpha' must be a positive float"),
        ({"alpha": float("inf"), "num_classes": 10}, "'alpha' must be a positive float"),
        ({"alpha": 1.0, "num_classes": 0}, "'num_classes' must be a positive int"),
    ],
)
@pytest.mark.parametrize("cls", [MixUp, CutMix])
def test_invalid_arguments_raise_config_error(cls: type, kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cls(**kwargs)
