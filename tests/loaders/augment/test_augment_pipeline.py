"""Augment: structures in and out, seeding by (seed, epoch, batch position), declared output spec."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import loaders.augment as augment
from loaders.augment import (
    Augment,
    ColorJitter,
    CutMix,
    MixUp,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    TensorSpec,
    batch_generator,
)
from loaders.errors import ConfigError

Batch = namedtuple("Batch", ["image", "label", "key"])
IMAGENET = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}


def uint8_images(batch: int = 4, height: int = 20, width: int = 24, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (batch, height, width, 3), dtype=torch.uint8, generator=gen)


def standard(**kwargs: Any) -> Augment:
    ops = [RandomResizedCrop(16), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4), RandomGrayscale(0.2)]
    return Augment(ops, **kwargs)


def test_public_api_is_pinned() -> None:
    assert augment.__all__ == [
        "Augment", "BatchOp", "ColorJitter", "CropParams", "CutMix", "CutMixParams", "JitterParams", "MixUp",
        "Normalize", "RandomGrayscale", "RandomHorizontalFlip", "RandomResizedCrop", "TensorSpec",
        "batch_generator", "grayscale", "soft_labels",
    ]
    assert augment.__all__ == sorted(augment.__all__)


def test_no_ops_converts_to_float_nchw_in_0_1() -> None:
    images = uint8_images()
    out = Augment([], channels_last=False)(images)
    assert out.dtype == torch.float32 and out.is_contiguous()
    assert torch.equal(out, images.permute(0, 3, 1, 2).float() / 255)


def test_normalize_is_applied_last_in_0_1_units() -> None:
    images = uint8_images()
    out = Augment([], **IMAGENET)(images)
    mean, std = torch.tensor(IMAGENET["mean"]).view(1, 3, 1, 1), torch.tensor(IMAGENET["std"]).view(1, 3, 1, 1)
    assert torch.allclose(out, (images.permute(0, 3, 1, 2).float() / 255 - mean) / std, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_output_dtype_layout_and_spec(dtype: torch.dtype) -> None:
    aug = standard(out_dtype=dtype, **IMAGENET)
    out = aug(uint8_images())
    assert out.is_contiguous(memory_format=torch.channels_last)
    spec = aug.output_spec(TensorSpec((-1, 20, 24, 3), torch.uint8))
    assert spec == TensorSpec((-1, 3, 16, 16), dtype) and spec.matches(out)


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 5),
    height=st.integers(2, 20),
    width=st.integers(2, 20),
    size=st.integers(1, 12),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    channels_last=st.booleans(),
)
def test_output_always_matches_the_declared_spec(
    batch: int, height: int, width: int, size: int, dtype: torch.dtype, channels_last: bool
) -> None:
    aug = standard(out_dtype=dtype, channels_last=channels_last)
    aug.ops = (RandomResizedCrop(size), *aug.ops[1:])
    out = aug(uint8_images(batch, height, width))
    assert aug.output_spec(TensorSpec((batch, height, width, 3), torch.uint8)).matches(out)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    assert out.is_contiguous(memory_format=layout)


def test_same_seed_and_position_give_the_same_output() -> None:
    images = uint8_images()
    assert torch.equal(standard(seed=7)(images), standard(seed=7)(images))
    assert not torch.equal(standard(seed=7)(images), standard(seed=8)(images))


def test_batch_position_counts_calls_since_set_epoch() -> None:
    images = uint8_images()
    aug = standard(seed=1)
    aug.set_epoch(3)
    first, second = aug(images), aug(images)
    assert not torch.equal(first, second)
    assert torch.equal(first, standard(seed=1)(images, epoch=3, batch_index=0))
    assert torch.equal(second, standard(seed=1)(images, epoch=3, batch_index=1))
    aug.set_epoch(3)
    assert torch.equal(aug(images), first)
    aug.set_epoch(3, start_index=1)  # resuming after one consumed batch
    assert torch.equal(aug(images), second)
    with pytest.raises(ConfigError, match="'start_index' must be a non-negative int"):
        aug.set_epoch(0, start_index=-1)


def test_one_instance_gives_the_same_output_whatever_order_batches_arrive_in() -> None:
    """One Augment, as the prefetcher holds it: calls in another order (more workers, skips) change nothing."""
    batches = [uint8_images(seed=k) for k in range(4)]
    aug = standard()
    aug.set_epoch(2)
    in_order = [aug(b, epoch=2, batch_index=k) for k, b in enumerate(batches)]
    aug.set_epoch(5)  # its own counter and epoch moved on: explicit keys must win
    aug(batches[0])
    shuffled = {k: aug(batches[k], epoch=2, batch_index=k) for k in (2, 0, 3, 1)}
    assert all(torch.equal(in_order[k], shuffled[k]) for k in range(4))
    assert not torch.equal(aug(batches[0], epoch=2, batch_index=0, rank=1), in_order[0])  # ranks differ


def test_dict_batch_keeps_other_keys_and_mixes_labels() -> None:
    batch = {"image": uint8_images(), "label": torch.tensor([0, 1, 2, 3]), "key": ["a", "b", "c", "d"]}
    out = standard(mixup=MixUp(0.2, num_classes=5))(batch)
    assert out["key"] is batch["key"] and out["image"].shape == (4, 3, 16, 16)
    assert out["label"].shape == (4, 5) and torch.allclose(out["label"].sum(1), torch.ones(4))
    assert batch["label"].shape == (4,)  # the input batch is not modified


def test_cls_key_and_tuple_batches() -> None:
    labels = torch.tensor([1, 0, 1, 0])
    out = standard(mixup=CutMix(1.0, num_classes=2))({"image": uint8_images(), "cls": labels})
    assert out["cls"].shape == (4, 2)
    images, soft, key = standard(mixup=CutMix(1.0, num_classes=2))(Batch(uint8_images(), labels, "k"))
    assert images.shape == (4, 3, 16, 16) and soft.shape == (4, 2) and key == "k"
    as_list = standard()([uint8_images(), labels])
    assert isinstance(as_list, list) and as_list[1] is labels  # labels untouched without mixup


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (torch.zeros(2, 3, 8, 8), r"uint8 images \[B, H, W, C\]"),
        ({"img": uint8_images()}, "needs the images under 'image'"),
        ("not a batch", "takes a uint8"),
    ],
)
def test_bad_batches_raise_config_error(batch: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        standard()(batch)


def test_mixup_without_labels_raises() -> None:
    with pytest.raises(ConfigError, match="mixup needs labels"):
        standard(mixup=MixUp(0.2, 10))(uint8_images())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ops": [lambda x: x]}, r"'ops\[0\]' must have __call__"),
        ({"ops": "flip"}, "'ops' must be a sequence"),
        ({"seed": -1}, "'seed' must be a non-negative int"),
        ({"out_dtype": torch.int32}, "'out_dtype' must be one of"),
        ({"channels_last": 1}, "'channels_last' must be a bool"),
        ({"mean": (0.5, 0.5, 0.5)}, "'mean' and 'std' must be given together"),
        ({"mixup": RandomHorizontalFlip()}, "'mixup' must be a MixUp, a CutMix or None"),
    ],
)
def test_invalid_arguments_raise_config_error(kwargs: dict[str, Any], message: str) -> None:
    ops = kwargs.pop("ops", [])
    with pytest.raises(ConfigError, match=message):
        Augment(ops, **kwargs)


def test_output_spec_rejects_a_float_input_spec() -> None:
    with pytest.raises(ConfigError, match=r"uint8 \[B, H, W, C\] spec"):
        standard().output_spec(TensorSpec((-1, 3, 8, 8), torch.float32))


def test_batch_generator_is_keyed_by_seed_epoch_and_position() -> None:
    def draw(*key: int) -> torch.Tensor:
        return torch.rand(8, generator=batch_generator(*key, "cpu"))

    assert torch.equal(draw(1, 2, 3), draw(1, 2, 3))
    assert len({tuple(draw(*key).tolist()) for key in [(1, 2, 3), (1, 3, 2), (2, 1, 3), (0, 0, 0)]}) == 4
    with pytest.raises(ConfigError, match="'epoch' must be a non-negative int"):
        batch_generator(0, -1, 0, "cpu")


def test_tensor_spec_validates_and_matches() -> None:
    spec = TensorSpec((-1, 3, 4, 4), torch.float16)
    assert spec.matches(torch.zeros(7, 3, 4, 4, dtype=torch.float16))
    assert not spec.matches(torch.zeros(7, 3, 4, 4)) and not spec.matches(torch.zeros(3, 4, 4, dtype=torch.float16))
    with pytest.raises(ConfigError, match="'shape' must be a tuple"):
        TensorSpec((0, 3), torch.float32)
    with pytest.raises(ConfigError, match="'dtype' must be a torch.dtype"):
        TensorSpec((1,), "float32")  # type: ignore[arg-type]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_pipeline_stays_on_the_device_and_matches_its_spec() -> None:
    images = uint8_images(8, 64, 64)
    aug = standard(out_dtype=torch.bfloat16, mixup=CutMix(1.0, 10), **IMAGENET)
    out = aug({"image": images.cuda(), "label": torch.arange(8).cuda()}, batch_index=0)
    assert out["image"].is_cuda and out["label"].is_cuda
    assert aug.output_spec(TensorSpec((-1, 64, 64, 3), torch.uint8)).matches(out["image"])
    assert out["image"].is_contiguous(memory_format=torch.channels_last)
