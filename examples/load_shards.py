"""Load dataprep shards with loaders.DataLoader and print throughput.

    python examples/load_shards.py SHARD_DIR [--raw RAW_IMAGE_TREE] [--batch-size 64] [--workers N] [--epochs 1]

With ``--raw``, also times the classic path on the same machine, side by side: a stock
``torch.utils.data.DataLoader`` over one-file-per-image (PIL decode + RandomResizedCrop,
float32 tensors), as an ImageFolder-style training script would do it.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.utils.data
from PIL import Image

from loaders import DataLoader, ShardDataset, cpus_available
from loaders.read.topology import default_num_workers
from loaders.read.transforms import RandomResizedCropDecode


class RawImageFolder(torch.utils.data.Dataset):
    """The baseline: RAW/<class>/<file>, PIL decode at full size, crop, resize, float32 CHW."""

    def __init__(self, root: Path, size: int) -> None:
        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.items = [(p, i) for i, c in enumerate(classes) for p in sorted((root / c).iterdir())
                      if p.suffix.lower() in (".jpg", ".jpeg", ".png")]
        self.size = size

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[i]
        try:
            img = Image.open(path).convert("RGB")
        except OSError:
            img = Image.new("RGB", (self.size, self.size))  # broken demo files: keep the timing honest
        w, h = img.size
        side = int(min(w, h) * random.uniform(0.3, 1.0))
        left, top = random.randint(0, w - side), random.randint(0, h - side)
        img = img.resize((self.size, self.size), Image.BILINEAR, box=(left, top, left + side, top + side))
        arr = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return arr, label


def time_epoch(loader: torch.utils.data.DataLoader | DataLoader, label: str) -> float:
    start = time.perf_counter()
    first = None
    samples = 0
    for batch in loader:
        images = batch["image"] if isinstance(batch, dict) else batch[0]
        samples += images.shape[0]
        if first is None:
            first = time.perf_counter() - start
    elapsed = time.perf_counter() - start
    rate = samples / elapsed
    print(f"{label:<46} {samples:>6} images  {elapsed:6.2f} s  {rate:8.1f} img/s  first batch {first or 0:.2f} s")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shards", type=Path)
    parser.add_argument("--raw", type=Path, help="raw image-folder tree to compare against")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--workers", type=int, default=default_num_workers())
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()

    dataset = ShardDataset(args.shards, fields=("jpg", "cls"), transform=RandomResizedCropDecode(args.size))
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    print(f"{len(dataset)} samples in {len(dataset.shards.shard_names)} shards, {args.workers} workers "
          f"({loader.worker_type} mode), batch {args.batch_size}, {cpus_available()} CPUs")
    batch = next(iter(loader))
    image, cls = batch["image"], batch["cls"]
    print(f"batch: image {tuple(image.shape)} {image.dtype}, cls {tuple(cls.shape)} {cls.dtype}")
    rates = [time_epoch(loader, f"loaders.DataLoader, shards, epoch {e}") for e in range(args.epochs)]
    if args.raw:
        stock = torch.utils.data.DataLoader(RawImageFolder(args.raw, args.size), batch_size=args.batch_size,
                                            shuffle=True, num_workers=args.workers)
        base = time_epoch(stock, "torch DataLoader, raw files, float32")
        print(f"speed-up: {rates[-1] / base:.2f}x (same machine, same run)")


if __name__ == "__main__":
    main()
