"""What-ifs: the wait share and samples/s a change would give, estimated from one loader's measured costs.

A pure model of the pipeline in steady state (Plumber's rate model, reduced to what ``stats()``
measures): workers build a batch in ``build_s`` (the dataset's ``__getitem__`` for its samples, then
collate) and ``w`` of them run side by side, as many as the CPUs let run at once
(``effective_workers``: CPU-bound work stops scaling at the CPUs, work that waits on reads scales
past them); the loop takes a batch every ``max(step_s, supply_s)`` and waits the difference.
``supply_s`` is taken from the measured loop when the loop waits (its period then is the data's),
else from the stage costs. Each ``WhatIf`` names the change, how to make it, and its estimate;
estimates are a model's, meant to rank the changes, not to promise a figure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from loaders.loader.advice import WAIT_TARGET

__all__ = ["Costs", "WhatIf", "effective_workers", "what_ifs", "workers_needed"]

MAX_WORKERS = 32  # the largest worker count a what-if considers
DECODE_SAVING = 0.5  # share of decode time a pre-resized shard saves (decode cost follows the pixels: half of them)


@dataclass(frozen=True, kw_only=True)
class Costs:
    """One loader's measured costs (seconds per batch) and settings: what the model reads.

    wait_s, step_s: the loop's wait in ``next()`` and its step. build_s: a worker's time per batch
    (dataset + collate). decode_s: the part of it spent decoding (0 when the dataset does not report
    it). cpu_share: CPU s / wall s inside the dataset (1: CPU-bound; low: reads wait). workers: the
    worker count; worker_type: "thread" or "process"; cpus: CPUs of this rank; decode_mode: "cpu" or
    "device"; samples_per_s: measured; map_style: not an IterableDataset (which only processes can read).
    """

    wait_s: float
    step_s: float
    build_s: float
    decode_s: float
    cpu_share: float
    workers: int
    worker_type: str
    cpus: int
    decode_mode: str
    samples_per_s: float
    map_style: bool = True


@dataclass(frozen=True, kw_only=True)
class WhatIf:
    """One change: what (``change``), how to make it (``how``), and the estimate (None: not estimated,
    ``note`` says why)."""

    change: str
    how: str
    wait_fraction: float | None
    samples_per_s: float | None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def effective_workers(workers: int, cpu_share: float, cpus: int) -> float:
    """Workers that make progress at once: each needs ``cpu_share`` of a core, ``cpus`` cores in all."""
    return max(1.0, min(float(max(workers, 1)), cpus / max(cpu_share, 1.0 / MAX_WORKERS)))


def _supply_s(costs: Costs) -> float:
    """Seconds between batches the workers can supply now."""
    if costs.wait_s > 0:
        return costs.step_s + costs.wait_s
    return costs.build_s / effective_workers(costs.workers, costs.cpu_share, costs.cpus)


def _predict(costs: Costs, supply_s: float) -> tuple[float, float]:
    """(wait share, samples/s) with the workers supplying a batch every ``supply_s``."""
    wait_s = max(0.0, supply_s - costs.step_s)
    period = costs.step_s + wait_s
    share = wait_s / period if period > 0 else 0.0
    now = costs.step_s + costs.wait_s
    return share, costs.samples_per_s * now / period if period > 0 else 0.0


def _supply_with(costs: Costs, workers: int, build_s: float | None = None) -> float:
    """supply_s with ``workers`` workers and (optionally) a new per-batch build time."""
    now = effective_workers(costs.workers, costs.cpu_share, costs.cpus)
    new = effective_workers(workers, costs.cpu_share, costs.cpus)
    ratio = 1.0 if build_s is None or costs.build_s <= 0 else build_s / costs.build_s
    return _supply_s(costs) * now / new * ratio


def workers_needed(costs: Costs) -> int | None:
    """The fewest workers whose estimated wait share is at most WAIT_TARGET (None: none up to MAX_WORKERS)."""
    for workers in range(1, MAX_WORKERS + 1):
        if _predict(costs, _supply_with(costs, workers))[0] <= WAIT_TARGET:
            return workers
    return None


def what_ifs(costs: Costs) -> list[WhatIf]:
    """The what-ifs for one loader: more workers, pre-resized shards, device decode."""
    return [_more_workers(costs), _resized(costs), _device_decode(costs)]


def _more_workers(costs: Costs) -> WhatIf:
    needed = workers_needed(costs)
    if costs.wait_s <= WAIT_TARGET * (costs.wait_s + costs.step_s):  # the step sets the pace now
        if needed is not None and needed < costs.workers:
            share, rate = _predict(costs, _supply_with(costs, needed))
            return WhatIf(change=f"num_workers {costs.workers} -> {needed}", how=f"DataLoader(num_workers={needed})",
                          wait_fraction=share, samples_per_s=rate,
                          note="the step sets the pace: fewer workers keep up, with less CPU and memory")
        return WhatIf(change="more workers", how="", wait_fraction=None, samples_per_s=None,
                      note="the step sets the pace: more workers would not make the loop faster")
    waits = costs.cpu_share < 0.5  # reads that wait: workers scale past the CPUs, threads at the least cost
    cap = MAX_WORKERS if waits else max(costs.cpus, costs.workers)
    more = needed if needed is not None else cap
    threads = waits and costs.map_style
    kind = "thread" if threads else costs.worker_type
    how = f"DataLoader(num_workers={more}" + (", worker_type='thread')" if kind != costs.worker_type else ")")
    if more <= costs.workers:
        return WhatIf(change="more workers", how="", wait_fraction=None, samples_per_s=None,
                      note=f"the work is CPU-bound and {costs.workers} workers already fill the {costs.cpus} CPUs")
    share, rate = _predict(costs, _supply_with(costs, more))
    fits = (f"the fewest workers that keep the wait under {WAIT_TARGET:.0%}" if needed is not None else
            f"no worker count keeps the wait under {WAIT_TARGET:.0%}; {more} is the most that help")
    return WhatIf(change=f"num_workers {costs.workers} -> {more}", how=how, wait_fraction=share, samples_per_s=rate,
                  note=fits + ("; the reads wait, so workers scale past the CPUs" if waits else ""))


def _resized(costs: Costs) -> WhatIf:
    how = "dataprep shard --resize-short N (N near the training resolution), then train on the new shards"
    if costs.decode_s <= 0:
        return WhatIf(change="pre-resized shards", how=how, wait_fraction=None, samples_per_s=None,
                      note="not estimated: the dataset reports no decode time")
    build = costs.build_s - DECODE_SAVING * costs.decode_s
    share, rate = _predict(costs, _supply_with(costs, costs.workers, build))
    return WhatIf(change="pre-resized shards", how=how, wait_fraction=share, samples_per_s=rate,
                  note=f"decode {costs.decode_s * 1e3:.1f} ms of {costs.build_s * 1e3:.1f} ms a batch; "
                       f"estimated at {DECODE_SAVING:.0%} less decode (half the pixels)")


def _device_decode(costs: Costs) -> WhatIf:
    how = "DataLoader(..., device='cuda', decode='device') with a ShardDataset and loaders' decode transforms"
    if costs.decode_mode == "device":
        return WhatIf(change="decode on the device", how=how, wait_fraction=None, samples_per_s=None,
                      note="already decoding on the device")
    if costs.decode_s <= 0:
        return WhatIf(change="decode on the device", how=how, wait_fraction=None, samples_per_s=None,
                      note="not estimated: the dataset reports no decode time")
    share, rate = _predict(costs, _supply_with(costs, costs.workers, costs.build_s - costs.decode_s))
    return WhatIf(change="decode on the device", how=how, wait_fraction=share, samples_per_s=rate,
                  note="the workers' decode time removed; the device's own decode time is not counted (needs CUDA)")

