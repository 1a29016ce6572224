"""Train a small image classifier with DistributedDataParallel, ``loaders.DataLoader`` as its data path.

    dataprep shard raw/ shards/ --resize-short 64
    torchrun --standalone --nproc_per_node 2 examples/train_ddp.py shards --steps 20 --checkpoint ckpt.pt
    torchrun --standalone --nproc_per_node 1 examples/train_ddp.py shards --steps 40 --checkpoint ckpt.pt --resume

Runs on CPUs (gloo backend) or GPUs (nccl, one GPU per process); ``python examples/train_ddp.py ...``
without torchrun trains in a single process. What changes from the stock DDP recipe:

- keep ``init_process_group``, ``DistributedDataParallel(model)`` and, on GPUs,
  ``torch.cuda.set_device(LOCAL_RANK)`` *before* the loader is built: its pinned buffers
  and copy stream belong to the current device;
- drop ``DistributedSampler`` and ``sampler.set_epoch(epoch)``: given no sampler, the loader
  splits each epoch's order between the ranks itself (rank and world size from
  torch.distributed), every rank the same number of batches, and it owns the epoch
  (the next pass over it reads the next epoch);
- the checkpoint: rank 0 saves the model (``model.module``), the optimizer and
  ``loader.state_dict()`` together in one file, atomically (a temporary file, then
  ``os.replace``), after a barrier. The loader's state is a global position in the epoch's
  order, the same on every rank, so rank 0's resumes a job of any number of processes (or
  of another ``--batch-size``); every rank loads the same file.

``--steps`` counts optimizer steps of the whole job, those before a resume included; the run
also stops after ``--epochs`` epochs. ``--log-keys DIR``: each rank appends one JSON line per step,
``{"step": 3, "epoch": 0, "keys": [...]}``, to ``DIR/rank-R.jsonl`` (the sample keys it trained
on; the tests check from them that a job killed and resumed on another number of processes
trains on every sample of the epoch exactly once).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from loaders import DataLoader, RandomResizedCropDecode, ShardDataset

FIELDS = ("jpg", "cls")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("shards", type=Path, help="dataprep output directory (tar shards + manifest)")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps of the whole job")
    parser.add_argument("--epochs", type=int, default=10, help="stop after this many epochs, whatever --steps")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per step on each process")
    parser.add_argument("--image-size", type=int, default=32, help="training crop side in pixels")
    parser.add_argument("--workers", type=int, default=None,
                        help="loader workers per process (default: the loader's, from the cores per process)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights, the order and the crops")
    parser.add_argument("--checkpoint", type=Path, help="file for the model, optimizer and loader state")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="save --checkpoint every N steps")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument("--log-keys", type=Path, metavar="DIR", help="log each step's sample keys per rank")
    args = parser.parse_args(argv)
    if args.resume and (args.checkpoint is None or not args.checkpoint.is_file()):
        parser.error(f"--resume needs an existing --checkpoint (got {args.checkpoint})")
    for name in ("steps", "epochs", "batch_size", "image_size", "checkpoint_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    return args


def start_process_group() -> tuple[int, int, torch.device]:
    """(rank, world_size, device): joins torchrun's process group (gloo on CPUs, nccl on GPUs) where
    torchrun started this process; a single process otherwise."""
    if "LOCAL_RANK" not in os.environ:
        return 0, 1, torch.device("cuda" if torch.cuda.is_available() else "cpu")
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)  # before the loader: its pinned memory and streams go to this GPU
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size(), device


def build_model(num_classes: int) -> nn.Module:
    """Two strided conv-BN-ReLU blocks, global average pool, linear: float32 [B, 3, S, S] -> [B, num_classes]."""
    return nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))


def make_loader(dataset: ShardDataset, args: argparse.Namespace, device: torch.device) -> DataLoader[Any]:
    """Batches {"image": uint8 [B, S, S, 3], "cls": int64 [B], "__key__": list[str], ...} on ``device``.

    No sampler: the loader gives this rank its share of each epoch (global positions rank, rank + W, ...).
    """
    # num_workers None: the loader's default, from the cores this rank may use (cgroup quota included)
    return DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, seed=args.seed,
                      device=device)


class Job:
    """The model (wrapped in DDP when distributed), its optimizer, the loader and the step count."""

    def __init__(self, args: argparse.Namespace, rank: int, world_size: int, device: torch.device) -> None:
        self.args, self.rank, self.world_size, self.device = args, rank, world_size, device
        self.dataset = ShardDataset(args.shards, fields=FIELDS, transform=RandomResizedCropDecode(args.image_size),
                                    seed=args.seed)
        self.loader = make_loader(self.dataset, args, device)
        label_map = self.dataset.label_map
        if not label_map:
            raise SystemExit(f"error: {args.shards}/manifest.json has no label map (shard an image-folder tree)")
        torch.manual_seed(args.seed)  # the same initial weights on every rank and in every run
        self.model = build_model(len(label_map)).to(device)
        self.ddp: nn.Module = DistributedDataParallel(self.model) if world_size > 1 else self.model
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9)
        self.step = 0

    def train_step(self, batch: dict[str, Any]) -> float:
        images = batch["image"].permute(0, 3, 1, 2).float().div_(255.0)
        loss = nn.functional.cross_entropy(self.ddp(images), batch["cls"])
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP averages the gradients of all ranks here
        self.optimizer.step()
        self.step += 1
        return float(loss.item())

    def save(self, path: Path) -> None:
        """Rank 0 writes model, optimizer, loader state and step in one file, atomically; the others wait."""
        if self.world_size > 1:
            dist.barrier()  # every rank has finished (and logged) this step
        if self.rank == 0:
            state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "loader": self.loader.state_dict(), "step": self.step, "world_size": self.world_size}
            partial = path.with_name(path.name + ".partial")
            torch.save(state, partial)
            os.replace(partial, path)  # a kill mid-save leaves the previous checkpoint whole

    def load(self, path: Path) -> None:
        state = torch.load(path, map_location=self.device, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.loader.load_state_dict(state["loader"])  # saved on rank 0 of any world size: fine on every rank
        self.step = int(state["step"])

    def is_done(self) -> bool:
        return self.step >= self.args.steps or self.loader.epoch >= self.args.epochs


def log_keys(log: TextIO | None, step: int, epoch: int, batch: dict[str, Any]) -> None:
    if log is not None:
        log.write(json.dumps({"step": step, "epoch": epoch, "keys": list(batch["__key__"])}) + "\n")
        log.flush()


def train(job: Job, log: TextIO | None) -> None:
    """Steps until --steps or --epochs; a checkpoint every --checkpoint-every steps and at the end."""
    args, loader = job.args, job.loader
    while not job.is_done():
        epoch = loader.epoch
        for batch in loader:
            loss = job.train_step(batch)
            log_keys(log, job.step, epoch, batch)
            if args.checkpoint is not None and job.step % args.checkpoint_every == 0:
                job.save(args.checkpoint)
            if job.rank == 0 and job.step % 10 == 0:
                print(f"step {job.step}: epoch {epoch}, loss {loss:.4f}", flush=True)
            if job.step >= args.steps:
                break
    if args.checkpoint is not None and job.step % args.checkpoint_every != 0:
        job.save(args.checkpoint)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world_size, device = start_process_group()
    job = Job(args, rank, world_size, device)
    if args.resume:
        job.load(args.checkpoint)
    if rank == 0:
        print(f"rank 0 of {world_size} on {device}: {len(job.dataset)} samples, {len(job.loader)} steps per "
              f"epoch of {args.batch_size} per process; from epoch {job.loader.epoch}, step {job.step}", flush=True)
    log = None
    if args.log_keys is not None:
        args.log_keys.mkdir(parents=True, exist_ok=True)
        log = open(args.log_keys / f"rank-{rank}.jsonl", "a", encoding="utf-8")  # noqa: SIM115  # closed below
    try:
        train(job, log)
    finally:
        if log is not None:
            log.close()
        job.loader.close()
    if rank == 0:
        print(f"done at step {job.step}: epoch {job.loader.epoch}, batch {job.loader.batches_consumed}", flush=True)
    if world_size > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
