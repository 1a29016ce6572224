"""End-to-end training fed by loaders vs the ceiling (data already on the device): img/s, data wait, GPU idle
(gpu_bench part 3)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any, TypedDict

import torch

from tools.common.report import ToolError
from tools.gpu.feeds import Feed, Prepare
from tools.gpu.timing import StepTimer, synchronize
from tools.gpu.train_step import Sizes, synthetic_batch

BUDGET_SPENT = "the time budget was spent"  # why a row or step past its deadline did not run


class FedRun(TypedDict):
    """What ``run_fed`` measured (see there)."""

    img_s: float
    wait_fraction: float
    gpu_idle_fraction: float | None


def _split(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(batch, dict):
        labels = batch.get("label", batch.get("cls"))
        if labels is None:
            raise ToolError(f"a batch has no 'label' or 'cls' field (fields: {sorted(batch)})")
        return batch["image"], labels
    return batch[0], batch[1]


def _forever(loader: Any) -> Generator[Any, None, None]:
    epoch = 0
    while True:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def _labels_only(images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return images, (labels % 1000).long()


def run_fed(loader: Iterable[Any], step: Callable[..., None], device: torch.device, steps: int,
            warmup: int = 3, prepare: Prepare | None = None) -> FedRun:
    """Train ``steps`` steps fed by ``loader`` after ``warmup`` steps: img/s, data wait, GPU idle.

    prepare: turns a loaded (images, labels) into the step's inputs (default: labels mod
        1000 as int64); the stock loader's host-to-device copy and bf16 cast go here. Its
        GPU work runs on the step's stream outside the timed steps, so it counts as idle.
    img_s: images over the host clock between two ``torch.cuda.synchronize()``.
    wait_fraction: host time in ``next()`` and ``prepare`` (the host otherwise runs ahead of
        the GPU, so time there is time the GPU can starve).
    gpu_idle_fraction: share of the GPU-clock window (first step's start to last step's
        end, CUDA events on the step's stream) in which that stream ran no training step:
        waiting for data, or copying it on that stream. None off CUDA.
    """
    prepare = prepare or _labels_only
    batches = _forever(loader)
    for _ in range(warmup):
        step(*prepare(*_split(next(batches))))
    synchronize(device)
    timer = StepTimer(device)
    wait_s, seen, start_s = 0.0, 0, time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        images, labels = prepare(*_split(next(batches)))
        wait_s += time.perf_counter() - t0
        with timer.step():
            step(images, labels)
        seen += images.shape[0]
    synchronize(device)
    total_s = time.perf_counter() - start_s
    batches.close()
    return {"img_s": seen / total_s, "wait_fraction": wait_s / total_s,
            "gpu_idle_fraction": timer.idle_fraction()}


def fed_steps(sizes: Sizes, num_workers: int) -> tuple[int, int]:
    """(warm-up, timed) steps for ``num_workers`` workers: enough warm-up for the workers'
    first burst (one batch each) to be consumed, and enough timed steps to average bursts."""
    return num_workers + 3, max(sizes.steps, sizes.fed_steps_per_worker * num_workers)


def measure_ceiling(device: torch.device, sizes: Sizes, step: Callable[..., None]) -> dict[str, Any]:
    """The same step on one batch already on the device, timed as the fed runs are."""
    batch, labels = synthetic_batch(device, sizes)
    fed = run_fed(itertools.repeat((batch, labels)), step, device, sizes.steps, warmup=3)
    return {"img_s": fed["img_s"], "gpu_idle_fraction": fed["gpu_idle_fraction"]}


def fed_row(device: torch.device, sizes: Sizes, step: Callable[..., None], feed: Feed, num_workers: int,
            ceiling_img_s: float) -> dict[str, Any]:
    """One row of part 3: ``feed`` with ``num_workers`` workers, its rates and ratio to the
    ceiling, or the error that stopped it."""
    row: dict[str, Any] = {"feed": feed.name, "num_workers": num_workers}
    warmup, steps = fed_steps(sizes, num_workers)
    try:
        loader = feed.make(num_workers, (warmup + steps) * sizes.batch)
        if getattr(loader, "decode", None) is not None:  # where ours decoded ("auto" resolved)
            row["decode"] = str(loader.decode)
        try:
            fed = run_fed(loader, step, device, steps, warmup, feed.prepare)
        finally:
            close = getattr(loader, "close", None)
            if callable(close):
                close()
            del loader
    # A measuring tool: one failing row (a worker crash, an unreadable file) is
    # recorded with its cause and the other rows still run.
    except Exception as err:  # noqa: BLE001
        row["error"] = f"{type(err).__name__}: {err}"
    else:
        row.update(steps=steps, **fed, ratio_to_ceiling=fed["img_s"] / ceiling_img_s)
    return row


def measure_end_to_end(device: torch.device, sizes: Sizes, step: Callable[..., None], feeds: Sequence[Feed],
                       workers: Sequence[int], *, deadline: float | None = None,
                       on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Part 3: the ceiling (data already on the device) vs each feed at each worker count
    (``workers``, or the feed's own ``Feed.workers``).

    deadline: a ``time.monotonic()`` past which the remaining rows are skipped (recorded
    so); on_row: called with the results so far after each row (to save them at once).
    """
    ceiling = measure_ceiling(device, sizes, step)
    out: dict[str, Any] = {"ceiling_img_s": ceiling["img_s"], "ceiling_gpu_idle_fraction": ceiling["gpu_idle_fraction"],
                           "fed": []}
    for feed, num_workers in ((f, n) for f in feeds for n in (f.workers or workers)):
        if deadline is not None and time.monotonic() > deadline:
            row = {"feed": feed.name, "num_workers": num_workers, "skipped": BUDGET_SPENT}
        else:
            row = fed_row(device, sizes, step, feed, num_workers, ceiling["img_s"])
        out["fed"].append(row)
        if on_row is not None:
            on_row(out)
    return out
