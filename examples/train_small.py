"""Train a small CNN end to end from dataprep shards: the whole loaders data path in one script.

    python -m dataprep.synthetic raw
    dataprep shard raw/images shards --resize-short 80
    python examples/train_small.py shards                                  # 2 epochs, CPU or --device cuda
    python examples/train_small.py shards --steps 5 --checkpoint ckpt.pt   # stop mid-epoch, save
    python examples/train_small.py shards --checkpoint ckpt.pt --resume    # continue exactly there

Data path: worker threads decode a random crop of each JPEG straight to uint8 [H, W, 3]
at --image-size (``RandomResizedCropDecode``); the DataLoader copies each uint8 batch to
--device on a side stream and runs ``Augment`` there (flip, colour jitter, normalise,
channels_last; bfloat16 or float16 under autocast on CUDA, float32 on CPU), so the loop
uses the batches as they arrive. Per epoch it prints the mean loss and accuracy over the
training batches, img/s, and the data wait: time blocked in ``next()`` / step time (near
0: the model is the bottleneck; near 1: the input pipeline is).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from loaders import CenterCropDecode, DataLoader, RandomResizedCropDecode, ShardDataset, default_num_workers
from loaders.augment import Augment, ColorJitter, RandomHorizontalFlip

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet's, in 0..1 units
FIELDS = ("jpg", "cls")


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {text})")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shards", type=Path, help="dataprep output directory (tar shards + manifest)")
    parser.add_argument("--val", type=Path, help="validation shards, evaluated after each epoch")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--epochs", type=positive, default=2)
    parser.add_argument("--batch-size", type=positive, default=64)
    parser.add_argument("--workers", type=int, default=default_num_workers(), help="decode threads (default: per CPU)")
    parser.add_argument("--image-size", type=positive, default=64, help="training crop side in pixels")
    parser.add_argument("--steps", type=positive, help="stop after this many steps in all (then save --checkpoint)")
    parser.add_argument("--checkpoint", type=Path, help="where to save model, optimizer and loader state")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint where it stopped")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights, the order and the augmentation")
    args = parser.parse_args(argv)
    if args.resume and args.checkpoint is None:
        parser.error("--resume needs --checkpoint")
    if args.resume and not args.checkpoint.is_file():
        parser.error(f"--resume: no checkpoint at {args.checkpoint}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available")
    return args


def build_model(num_classes: int) -> nn.Module:
    """Four conv-BN-ReLU blocks (stride 2 after the first), global average pool, linear."""
    layers: list[nn.Module] = []
    channels = [3, 32, 64, 128, 256]
    for i, (c_in, c_out) in enumerate(zip(channels, channels[1:])):
        layers += [nn.Conv2d(c_in, c_out, 3, stride=1 if i == 0 else 2, padding=1, bias=False),
                   nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels[-1], num_classes))


def make_loader(path: Path, args: argparse.Namespace, out_dtype: torch.dtype, *, train: bool) -> DataLoader[Any]:
    """Batches {"image": out_dtype [B, 3, S, S] channels_last, "cls": int64 [B]} on args.device."""
    if train:  # the CPU only crops; flipping is cheaper on the device, in the batched Augment
        decode: Any = RandomResizedCropDecode(args.image_size, flip_p=0.0)
        ops: list[Any] = [RandomHorizontalFlip(), ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3)]
    else:
        decode, ops = CenterCropDecode(args.image_size), []
    dataset = ShardDataset(path, fields=FIELDS, transform=decode, seed=args.seed)
    augment = Augment(ops, seed=args.seed, out_dtype=out_dtype, mean=MEAN, std=STD, channels_last=True)
    return DataLoader(dataset, batch_size=args.batch_size, shuffle=train, num_workers=args.workers,
                      seed=args.seed, device=args.device, device_transform=augment)


def timed(batches: Iterable[Any]) -> Iterator[tuple[Any, float]]:
    """Yield (batch, seconds blocked in next() for it)."""
    iterator = iter(batches)
    while True:
        start = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        yield batch, time.perf_counter() - start


class Trainer:
    """Model, optimizer and loader; counts steps and saves/restores all three."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device(args.device)
        cuda = self.device.type == "cuda"
        bf16 = cuda and torch.cuda.is_bf16_supported()
        self.amp_dtype = torch.bfloat16 if bf16 else torch.float16 if cuda else torch.float32
        self.loader = make_loader(args.shards, args, self.amp_dtype, train=True)
        self.val_loader = make_loader(args.val, args, self.amp_dtype, train=False) if args.val else None
        label_map = self.loader.dataset.label_map
        if not label_map:
            raise SystemExit(f"error: {args.shards}/manifest.json has no label map (shard an image-folder tree)")
        torch.manual_seed(args.seed)  # the same initial weights in every run
        self.model = build_model(len(label_map)).to(self.device, memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
        # float16 needs loss scaling against underflow; bfloat16 and float32 do not.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp_dtype == torch.float16)
        self.step = 0

    def autocast(self) -> torch.autocast:
        return torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.device.type == "cuda")

    def is_stopped(self) -> bool:
        """True once --steps steps have run (counting those before a resume)."""
        return self.args.steps is not None and self.step >= self.args.steps

    def train_epoch(self) -> None:
        """Train on the (rest of the) current epoch, or until --steps; prints its metrics."""
        epoch, loader = self.loader.epoch, self.loader
        first = loader.batches_consumed  # > 0 after a mid-epoch resume
        self.model.train()
        batches = samples = correct = 0
        loss_sum = wait_s = 0.0
        start = time.perf_counter()
        for batch, waited in timed(loader):
            images, labels = batch["image"], batch["cls"]
            with self.autocast():
                logits = self.model(images)
                loss = nn.functional.cross_entropy(logits, labels)
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.step += 1
            # .item() waits for the device, so time in next() is real waiting, not queued GPU work.
            loss_sum += loss.item() * len(labels)
            correct += int((logits.argmax(1) == labels).sum().item())
            batches, samples, wait_s = batches + 1, samples + len(labels), wait_s + waited
            if self.is_stopped():
                break
        elapsed = time.perf_counter() - start
        print(f"epoch {epoch}: loss {loss_sum / max(samples, 1):.4f}  acc {correct / max(samples, 1):.3f}  "
              f"{samples / elapsed:.1f} img/s  data wait {wait_s / elapsed:.1%}  "
              f"(batches {first}..{first + batches - 1} of {len(loader)}, {samples} samples)", flush=True)

    @torch.no_grad()
    def evaluate(self) -> None:
        if self.val_loader is None:
            return
        self.model.eval()
        samples = correct = 0
        for batch in self.val_loader:
            with self.autocast():
                logits = self.model(batch["image"])
            correct += int((logits.argmax(1) == batch["cls"]).sum().item())
            samples += len(batch["cls"])
        print(f"  val acc {correct / max(samples, 1):.3f} ({samples} samples)", flush=True)

    def save(self, path: Path) -> None:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scaler": self.scaler.state_dict(), "loader": self.loader.state_dict(), "step": self.step}
        partial = path.with_name(path.name + ".partial")
        torch.save(state, partial)
        os.replace(partial, path)  # a crash mid-save leaves the previous checkpoint intact

    def load(self, path: Path) -> None:
        state = torch.load(path, map_location=self.device, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.loader.load_state_dict(state["loader"])
        self.step = int(state["step"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    trainer = Trainer(args)
    if args.resume:
        trainer.load(args.checkpoint)
        print(f"resumed from {args.checkpoint}: epoch {trainer.loader.epoch}, batch "
              f"{trainer.loader.batches_consumed}, step {trainer.step}", flush=True)
    loader = trainer.loader
    print(f"{len(loader.dataset)} samples, {len(loader)} batches of {args.batch_size}, {loader.num_workers} "
          f"{loader.worker_type} workers, device {args.device} ({trainer.amp_dtype})", flush=True)
    while loader.epoch < args.epochs and not trainer.is_stopped():
        epoch = loader.epoch
        trainer.train_epoch()
        if loader.epoch > epoch:  # finished, not stopped mid-way
            trainer.evaluate()
    if trainer.is_stopped():
        print(f"stopped at step {trainer.step}: epoch {loader.epoch}, batch "
              f"{loader.batches_consumed} of {len(loader)}", flush=True)
    if args.checkpoint is not None:
        trainer.save(args.checkpoint)
        print(f"checkpoint saved to {args.checkpoint} (step {trainer.step})", flush=True)
    for part in (loader, trainer.val_loader):
        if part is not None:
            part.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
