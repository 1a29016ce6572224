"""Which stage sets the pace, and what to do about it: ``diagnose(window, knobs, cpus)``, a pure function.

The training step sets the pace when the loop waits at most ``WAIT_TARGET`` (5%) of its time
in ``next()`` (the PyTorch profiler's rule is the same 5%). Otherwise the bottleneck is the
data stage that costs most per batch: the parts a dataset reports of its ``__getitem__``
(``read``, ``decode``, ``transform``: ``loaders.stage_clock``; the shard datasets report all three)
when they account for most of it, else ``dataset`` as a whole; ``collate``; ``transfer`` (pinning
and the host -> device copy); ``device_decode``. Each sentence of advice names an action: ``decode``
pre-resized shards or the device decoder, ``read`` the disk, the node cache or more (thread) workers.
"""

from __future__ import annotations

from loaders.loader.accounting import StatsWindow
from loaders.loader.autotune import Knobs, reads_wait

__all__ = ["WAIT_TARGET", "diagnose"]

WAIT_TARGET = 0.05

_STAGE_ADVICE = {
    "decode": ("JPEG decoding costs most: decode on the device (decode='device', nvJPEG) or pre-resize the "
               "shards (dataprep shard --resize-short)"),
    "transform": ("the CPU transform costs most: move augmentation to the device (device_transform=..., "
                  "loaders.augment) or pre-resize the shards (dataprep shard --resize-short)"),
    "collate": "collate costs most: a collate_fn that builds fewer Python objects (stack arrays, not lists)",
    "transfer": ("host -> device copies cost most: pin_memory=True, and keep images uint8 until the device "
                 "(augment there)"),
    "device_decode": "the device decode costs most: decode='cpu' with more workers, or pre-resized shards",
}


def diagnose(window: StatsWindow, knobs: Knobs, cpus: int, *, saturated: bool = False) -> tuple[str, tuple[str, ...]]:
    """(bottleneck, advice) for ``window`` under ``knobs``, on ``cpus`` cores for this rank."""
    if window.steps == 0:
        return "step", ()
    wait = window.wait_fraction
    if wait <= WAIT_TARGET:
        advice = [f"the data is not your bottleneck: the loop waits {wait:.1%} of its time in next()"]
        busy = window.worker_busy(knobs.num_workers)
        if knobs.num_workers > 1 and window.built and busy < 0.5:
            advice.append(f"fewer workers would do: they are busy {busy:.0%} of their time (autotune=True "
                          "finds the count)")
        return "step", tuple(advice)
    bottleneck = _costliest(window)
    head = f"the loop waits {wait:.0%} of its time for data; {bottleneck} costs most per batch"
    return bottleneck, (head, *_actions(bottleneck, window, knobs, cpus, saturated))


def _costliest(window: StatsWindow) -> str:
    stages = dict(window.stages)
    parts = {name: stages.get(name, 0.0) for name in ("read", "decode", "transform")}
    candidates = dict(parts) if sum(parts.values()) > 0.5 * stages.get("dataset", 0.0) else {
        "dataset": stages.get("dataset", 0.0)}
    candidates["collate"] = stages.get("collate", 0.0)
    candidates["transfer"] = stages.get("pin", 0.0) + stages.get("transfer", 0.0)
    candidates["device_decode"] = stages.get("device_decode", 0.0)
    return max(candidates, key=lambda name: candidates[name])


def _actions(bottleneck: str, window: StatsWindow, knobs: Knobs, cpus: int, saturated: bool) -> list[str]:
    if bottleneck in _STAGE_ADVICE:
        return [_STAGE_ADVICE[bottleneck]]
    waiting = reads_wait(window, knobs)
    if waiting:
        more = "more thread workers" if knobs.worker_type == "thread" else "thread workers (worker_type='thread')"
        return [f"the dataset's reads wait (CPU {window.read_cpu_share:.0%} of their time): {more}, "
                f"{knobs.num_workers} now, or autotune=True; for a slow disk or object store, a local cache "
                "(loaders.cache)"]
    if bottleneck == "read":
        return [f"reading the shards costs most: the disk (a faster one, or a local copy through the node cache: "
                f"cache_dir=..., loaders.cache), or more workers reading at once ({knobs.num_workers} now, or "
                "autotune=True)"]
    if knobs.worker_type == "thread" and knobs.num_workers > 1 and window.worker_cores() < 1.3 and cpus > 1:
        return [f"{knobs.num_workers} thread workers keep {window.worker_cores():.1f} cores busy: the dataset's "
                "work holds the GIL; use worker_type='process'"]
    if knobs.num_workers < cpus and not saturated:
        return [f"more workers: num_workers={knobs.num_workers} of {cpus} cores (or autotune=True)"]
    return [f"the cores are saturated ({cpus} for this rank): do less per sample on the CPU, pre-resize the "
            "shards (dataprep shard --resize-short) or decode on the device (decode='device')"]
