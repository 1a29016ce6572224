"""The data feeds of the end-to-end run: ours (loaders.DataLoader over shards) and the stock DataLoader over raw
files."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sized
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.utils.data
from PIL import Image

from loaders.augment import Augment
from tools.common.report import ToolError
from tools.gpu.train_step import IMAGENET_MEAN, IMAGENET_STD, Sizes

# torchvision's IMG_EXTENSIONS: what ImageFolder lists (sidecars such as .txt are left out).
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"})

Prepare = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def cycled_indices(num_samples: int, count: int, seed: int = 0) -> list[int]:
    """``count`` sample indices: shuffled passes over 0..num_samples-1, one after another.

    As the sampler of part 3 it makes one epoch as long as the run, however few samples
    the shards hold: no epoch boundary (workers draining, then refilling) while timing.
    """
    if num_samples < 1:
        raise ToolError("the shards hold no samples")
    rng = np.random.default_rng(seed)
    passes = -(-count // num_samples)
    return [int(i) for _ in range(passes) for i in rng.permutation(num_samples)][:count]


@dataclasses.dataclass(frozen=True)
class Feed:
    """One data source of part 3: ``make(num_workers, samples)`` builds its loader, which
    yields (images, labels) that ``prepare`` (None: labels only) turns into step inputs;
    ``workers``: the worker counts of its rows (empty: the run's)."""

    name: str
    make: Callable[[int, int], Any]
    prepare: Prepare | None = None
    workers: tuple[int, ...] = ()


def ours_feed(name: str, shards: Path, sizes: Sizes, device: torch.device, worker_type: str = "auto",
              decode: str = "cpu", workers: tuple[int, ...] = ()) -> Feed:
    """``loaders.DataLoader(device=..., decode=...)`` over dataprep shards: the random crop + flip
    (``RandomResizedCropDecode``) decoded on the CPU in the workers (``decode="cpu"``, the fused
    decode) or on the device (``decode="device"``: the workers draw the crop, the device decodes
    the batch), uint8 on the device, normalised there to bf16 channels_last (``Augment`` with no
    ops): the stock feed's transforms, split."""
    from loaders import DataLoader, RandomResizedCropDecode, ShardDataset

    def make(num_workers: int, samples: int) -> Any:
        dataset = ShardDataset(shards, transform=RandomResizedCropDecode(sizes.side))
        augment = Augment([], out_dtype=torch.bfloat16, mean=IMAGENET_MEAN, std=IMAGENET_STD)
        # drop_last: a short last batch would be a new shape for cuDNN to autotune.
        return DataLoader(dataset, batch_size=sizes.batch, num_workers=num_workers, device=str(device),
                          sampler=cycled_indices(len(dataset), samples), drop_last=True, device_transform=augment,
                          worker_type=worker_type, decode=decode)

    return Feed(name, make, workers=workers)


class RawImageFolder(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """torchvision's ``ImageFolder`` with RandomResizedCrop, RandomHorizontalFlip, ToTensor and
    Normalize, written with Pillow for machines without torchvision: float32 [3, side, side]
    on the CPU and the class index. Randomness from ``random``, which torch seeds per worker."""

    def __init__(self, root: Path, side: int) -> None:
        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.files = [(path, label) for label, name in enumerate(classes) for path in sorted((root / name).iterdir())
                      if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES]
        if not self.files:
            raise ToolError(f"no image files in the class folders of {root}")
        self.side = side
        self.mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.files[index]
        with Image.open(path) as img:
            rgb = img.convert("RGB")
        box = _crop_box(*rgb.size)
        out = rgb.resize((self.side, self.side), Image.Resampling.BILINEAR, box=box)
        if random.random() < 0.5:
            out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        floats = torch.from_numpy(np.asarray(out, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return (floats - self.mean) / self.std, label


def _crop_box(width: int, height: int) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop box (scale 0.08-1, ratio 3/4-4/3, 10 tries, then central)."""
    area = width * height
    for _ in range(10):
        target = area * random.uniform(0.08, 1.0)
        aspect = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left, top = random.randint(0, width - w), random.randint(0, height - h)
            return left, top, left + w, top + h
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    return left, top, left + side, top + side


def stock_dataset(raw_images: Path, side: int) -> tuple[torch.utils.data.Dataset[Any], str]:
    """(the stock pipeline's dataset over an image-folder tree, which implementation):
    torchvision's ImageFolder and transforms when importable, else ``RawImageFolder``."""
    try:
        import torchvision
        from torchvision import transforms as tv
    except ImportError:
        return RawImageFolder(raw_images, side), "pillow (torchvision not importable)"
    transform = tv.Compose([tv.RandomResizedCrop(side), tv.RandomHorizontalFlip(), tv.ToTensor(),
                            tv.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    return torchvision.datasets.ImageFolder(str(raw_images), transform=transform), "torchvision"


def stock_feed(name: str, raw_images: Path, sizes: Sizes, device: torch.device, workers: tuple[int, ...] = ()) -> Feed:
    """``torch.utils.data.DataLoader`` over the raw files with float32 transforms on the CPU
    (worker processes, pinned batches), copied and cast to bf16 channels_last by the step."""
    dataset, _ = stock_dataset(raw_images, sizes.side)

    def make(num_workers: int, samples: int) -> Any:
        return torch.utils.data.DataLoader(dataset, batch_size=sizes.batch, num_workers=num_workers,
                                           sampler=cycled_indices(len(cast(Sized, dataset)), samples),
                                           drop_last=True,
                                           pin_memory=device.type == "cuda")

    def prepare(images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        images = images.to(device, non_blocking=True).to(torch.bfloat16, memory_format=torch.channels_last)
        return images, (labels.to(device, non_blocking=True) % 1000).long()

    return Feed(name, make, prepare, workers)
