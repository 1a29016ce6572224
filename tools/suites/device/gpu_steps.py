"""device_suite's GPU measurements: host-to-device copies, augmentation cost, JPEG decode, end-to-end training.

Each step runs one of ``tools.gpu``'s measurements at the suite's sizes and frees the
device's cached memory after it.
"""

from __future__ import annotations

import time
from typing import Any

from loaders import cpus_available
from tools.common.synthetic import make_raw_images, rgb_jpegs, shard
from tools.gpu.augment_cost import measure_augment
from tools.gpu.decode import jpegs_in, measure_decode
from tools.gpu.end_to_end import measure_end_to_end
from tools.gpu.feeds import ours_feed, stock_dataset, stock_feed
from tools.gpu.h2d import link_info, measure_h2d
from tools.gpu.train_step import train_step_fn
from tools.suites.device.run_state import Suite, free_gpu, need


def step_h2d(suite: Suite) -> dict[str, Any]:
    link = link_info(suite.device)
    rows = measure_h2d(suite.device, suite.plan.bench, link.get("peak_gb_s"), repeats=20)
    result = {"link": link, "batch": suite.plan.bench.batch, "side": suite.plan.bench.side, "rows": rows}
    if suite.device.type != "cuda":
        result["not_measured"] = {"pinned rows": "pinned host memory needs CUDA",
                                  "of_link_peak": f"no link peak: {link.get('skipped')}"}
    return result


def step_augment(suite: Suite) -> dict[str, Any]:
    step = train_step_fn(suite.device, suite.plan.bench)
    try:
        return measure_augment(suite.device, suite.plan.bench, step)
    finally:
        del step
        free_gpu(suite.device)


def step_decode(suite: Suite) -> dict[str, Any]:
    """Decode rates over raw JPEGs and over the same images pre-resized by ``dataprep shard``."""
    raw = make_raw_images(suite.scratch / "decode-raw", suite.plan.decode_images)
    resized = shard(raw, suite.scratch / "decode-r256", resize_short=256)
    threads = cpus_available()
    sets = {"raw": rgb_jpegs(p.read_bytes() for p in sorted(raw.rglob("*.jpg"))),
            "resized_256": rgb_jpegs(jpegs_in(resized, suite.plan.decode_images))}
    return {name: measure_decode(suite.device, jpegs, threads=threads, side=suite.plan.bench.side)
            for name, jpegs in sets.items()}


def step_end_to_end(suite: Suite) -> dict[str, Any]:
    raw, shards, shards_256 = need(suite, "raw", "shards", "shards_256")
    device, sizes = suite.device, suite.plan.bench
    feeds = [ours_feed("loaders, shards pre-resized 256", shards_256, sizes, device),
             ours_feed("loaders, pre-resized 256, processes", shards_256, sizes, device, worker_type="process"),
             ours_feed("loaders, shards as raw", shards, sizes, device),
             stock_feed("torch, raw files, float32", raw, sizes, device)]
    step = train_step_fn(device, sizes)
    _, implementation = stock_dataset(raw, sizes.side)
    partial: dict[str, Any] = {"stock_transforms": implementation, "batch": sizes.batch, "side": sizes.side}

    def save_row(results: dict[str, Any]) -> None:
        suite.document["steps"]["end_to_end"] = {"status": "running", "result": {**partial, **results}}
        suite.save()

    # The scaling steps after this one need about a third of what is left.
    deadline = time.monotonic() + 0.65 * suite.remaining_s()
    try:
        results = measure_end_to_end(device, sizes, step, feeds, suite.plan.e2e_workers,
                                               deadline=deadline, on_row=save_row)
    finally:
        del step
        free_gpu(device)
    if device.type != "cuda":
        results["not_measured"] = {"gpu_idle_fraction": "CUDA events need a CUDA device"}
    return {**partial, **results}
