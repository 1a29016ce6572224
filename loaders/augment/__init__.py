"""Batched augmentation on the device: per-sample random parameters, no per-sample Python loop.

Images arrive as collated uint8 [B, H, W, C]; ``Augment`` converts them to float
[B, C, H, W] in 0..1, runs the ops, optionally MixUp/CutMix and Normalize, and returns
``out_dtype`` in channels_last. Parameters come from ``batch_generator(seed, epoch,
batch_index, device)``, so results do not depend on how many workers made the batches.
"""

from __future__ import annotations

from loaders.augment.base import BatchOp, TensorSpec, batch_generator
from loaders.augment.color import ColorJitter, JitterParams, Normalize, RandomGrayscale, grayscale
from loaders.augment.geometry import CropParams, RandomHorizontalFlip, RandomResizedCrop
from loaders.augment.mix import CutMix, CutMixParams, MixUp, soft_labels
from loaders.augment.pipeline import Augment

__all__ = [
    "Augment",
    "BatchOp",
    "ColorJitter",
    "CropParams",
    "CutMix",
    "CutMixParams",
    "JitterParams",
    "MixUp",
    "Normalize",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "TensorSpec",
    "batch_generator",
    "grayscale",
    "soft_labels",
]
