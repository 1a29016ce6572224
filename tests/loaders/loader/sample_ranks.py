"""Jobs of several ranks over a sample dataset in one process, seen from the training loop.

``tiny_image_shards`` writes small tar shards with ``dataprep shard`` (every image different).
``sample_job`` makes one ``loaders.DataLoader`` per rank of a job of W ranks x B rows, the topology
given to each rank's dataset (``launch="topology"``) or read from RANK / WORLD_SIZE as a
launcher sets them (``launch="environment"``). ``sample_steps`` gives each step's global batch
as the sorted sample indices (``__index__``) every rank read, after checking that every rank
yielded the same number of batches. ``epoch_order`` is what a one-rank, one-row loader reads
in an epoch: the epoch's order of every rank, the oracle the steps are checked against
(``steps``: that order cut into global batches from a position).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from dataprep.cli import main as dataprep_main
from loaders import DataLoader, Topology
from tests.loaders.resume_harness import end_jobs, expected_steps, job_steps

SEED = 11
Job = tuple[int, int, int, str]  # world size, rows per rank, workers per rank, worker type
MakeDataset = Callable[[Topology | None], Any]


def tiny_image_shards(root: Path, count: int, per_shard: int) -> Path:
    """``count`` 16x16 JPEGs (random pixels, so no two are alike) in 4 classes, sharded ``per_shard`` a shard."""
    raw, out = root / "raw", root / "shards"
    rng = np.random.default_rng(0)
    for i in range(count):
        folder = raw / f"class{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(buffer, "JPEG", quality=90)
        (folder / f"img{i:04d}.jpg").write_bytes(buffer.getvalue())
    args = ["shard", str(raw), str(out), "--samples-per-shard", str(per_shard), "--workers", "1", "--min-side", "8"]
    assert dataprep_main(args) == 0
    return out


def sample_job(make: MakeDataset, spec: Job, *, launch: str = "topology",
               monkeypatch: pytest.MonkeyPatch | None = None, **options: Any) -> list[DataLoader[Any]]:
    """One loader per rank of a job of ``spec`` (seed ``SEED``, shuffled, unless ``options`` say otherwise)."""
    world_size, batch_size, num_workers, worker_type = spec
    options.setdefault("seed", SEED)
    options.setdefault("shuffle", True)
    loaders = []
    for rank in range(world_size):
        topology: Topology | None = Topology(rank=rank, world_size=world_size)
        if launch == "environment":
            assert monkeypatch is not None
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("WORLD_SIZE", str(world_size))
            topology = None
        loaders.append(DataLoader(make(topology), batch_size=batch_size, num_workers=num_workers,
                                  worker_type=worker_type, **options))
    if launch == "environment" and monkeypatch is not None:
        monkeypatch.delenv("RANK")
        monkeypatch.delenv("WORLD_SIZE")
    return loaders


def rows_of(batch: dict[str, Any]) -> list[int]:
    """The sample indices of a batch's rows."""
    return [int(i) for i in batch["__index__"]]


def sample_steps(batches_per_rank: Sequence[Iterable[dict[str, Any]]], count: int | None = None) -> list[list[int]]:
    """Each step's global batch (sorted sample indices) from each rank's batches (``job_steps``)."""
    return job_steps(rows_of, batches_per_rank, count)


def epoch_order(make: MakeDataset, epoch: int, **options: Any) -> list[int]:
    """The samples of ``epoch`` in the order of every rank: what one rank reading one row at a time gets."""
    options.setdefault("seed", SEED)
    options.setdefault("shuffle", True)
    loader = DataLoader(make(Topology()), batch_size=1, num_workers=0, **options)
    loader.set_epoch(epoch)
    order = [rows_of(batch)[0] for batch in loader]
    end_job([loader])
    return order


def steps(order: Sequence[int], start: int, global_batch: int, world_size: int = 1) -> list[list[int]]:
    """``order`` from ``start`` cut into global batches, each sorted; the last, shorter one padded to a multiple
    of ``world_size`` with the run's first samples, ``order[start:]`` (DistributedSampler's rule, so that every
    rank has a row; never a sample an earlier run of the epoch delivered)."""
    return expected_steps(order, start, global_batch, world_size, pads=True)


def end_job(loaders: Iterable[DataLoader[Any]]) -> None:
    """Stop each loader and let go of its dataset's shards (a job that ends: its node cache readers leave)."""
    end_jobs(loaders)


def iterate(loaders: Iterable[DataLoader[Any]]) -> list[Iterator[Any]]:
    return [iter(loader) for loader in loaders]
