"""One device_suite run: its sizes (``Plan``), its state (``Suite``) and what its steps share."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import torch

from tools.common.report import ToolError, write_json
from tools.gpu.train_step import Sizes


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes of one run: full (a GPU machine) or smoke (seconds on a CPU).

    bench: the GPU measurements' sizes; raw_images / decode_images: synthetic images made
    for part 2 / for the decode step; e2e_workers, scale_workers, writer_processes,
    writer_workers: what the rows of part 2 sweep (writer_workers: ``dataprep shard --workers``
    of the shard_writers step, over the photos and ``writer_rows`` JSON lines);
    device_decode_workers / cpu_decode_workers: the worker counts of end_to_end_decode's
    decode="device" rows / of its CPU-decoding rows (ours in processes, stock); loader_batch,
    loader_epochs: batch size and epochs (persistent workers, each epoch's first batch left out
    of the rate) of the scaling loader rows;
    pytest_targets: what ``pytest -m gpu`` collects; pytest_timeout_s: its limit.
    """

    bench: Sizes
    raw_images: int
    decode_images: int
    e2e_workers: tuple[int, ...]
    device_decode_workers: tuple[int, ...]
    cpu_decode_workers: tuple[int, ...]
    scale_workers: tuple[int, ...]
    writer_processes: tuple[int, ...]
    writer_workers: tuple[int, ...]
    writer_rows: int
    loader_batch: int
    loader_epochs: int
    pytest_targets: tuple[str, ...]
    pytest_timeout_s: float


@dataclasses.dataclass
class Suite:
    """One run's state: where results go, the device, the plan, the scratch directory, the
    deadline (``time.monotonic()``) and what earlier steps left for later ones."""

    out: Path
    part: str
    device: torch.device
    plan: Plan
    scratch: Path
    deadline: float
    smoke: bool
    document: dict[str, Any]
    data: dict[str, Path] = dataclasses.field(default_factory=dict)

    @property
    def json_path(self) -> Path:
        return self.out / f"part{self.part}.json"

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()

    def save(self) -> None:
        write_json(os.fspath(self.json_path), self.document)


def need(suite: Suite, *names: str) -> list[Path]:
    """The paths that the data step left in ``suite.data`` under ``names`` (ToolError naming the missing)."""
    missing = [n for n in names if n not in suite.data]
    if missing:
        raise ToolError(f"needs the data step's {', '.join(missing)}, which did not complete")
    return [suite.data[n] for n in names]


def free_gpu(device: torch.device) -> None:
    """Wait for ``device`` and return its cached memory, so that the next step starts clean."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
