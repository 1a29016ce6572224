"""device_suite's GPU measurements: host-to-device copies, augmentation cost, JPEG decode, end-to-end training
(fed by CPU decode, and by ``decode="device"`` from raw-size shards for ResNet-50 and ResNet-18).

Each step runs one of ``tools.gpu``'s measurements at the suite's sizes and frees the
device's cached memory after it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from loaders import cpus_available
from tools.common.synthetic import make_raw_images, rgb_jpegs, shard
from tools.gpu.augment_cost import measure_augment
from tools.gpu.decode import jpegs_in, measure_decode
from tools.gpu.end_to_end import measure_end_to_end
from tools.gpu.feeds import Feed, ours_feed, stock_dataset, stock_feed
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
    """Decode rates over raw JPEGs and over the same images pre-resized by ``dataprep shard``: the CPU path, each
    nvImageCodec backend of the device with region and whole-image decode, torchvision where it imports."""
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
             ours_feed("loaders, shards as raw", shards, sizes, device),  # decode="cpu" (ours_feed's default)
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


# Issue 28's targets: the share of each model's synthetic ceiling that decode="device" rows must reach.
DECODE_TARGETS = {"resnet50": 0.95, "resnet18": 0.90}


def decode_feeds(suite: Suite, raw: Path, shards: Path) -> list[Feed]:
    """The rows of end_to_end_decode: raw-size shards decoded on the device (few workers), decoded in worker
    processes (ours), and the stock DataLoader + torchvision over the raw files."""
    plan, sizes, device = suite.plan, suite.plan.bench, suite.device
    return [ours_feed("loaders, raw shards, decode=device", shards, sizes, device, decode="device",
                      workers=plan.device_decode_workers),
            ours_feed("loaders, raw shards, decode=cpu, processes", shards, sizes, device, worker_type="process",
                      decode="cpu", workers=plan.cpu_decode_workers),
            stock_feed("torch, raw files, float32", raw, sizes, device, workers=plan.cpu_decode_workers)]


def step_end_to_end_decode(suite: Suite) -> dict[str, Any]:
    """ResNet-50 and ResNet-18 fed from raw-size shards: decode="device" vs CPU decode vs stock, against each
    model's synthetic ceiling, GPU idle % from CUDA events beside each row."""
    raw, shards = need(suite, "raw", "shards")
    device, sizes = suite.device, suite.plan.bench
    _, implementation = stock_dataset(raw, sizes.side)
    partial: dict[str, Any] = {"stock_transforms": implementation, "batch": sizes.batch, "side": sizes.side,
                               "targets": DECODE_TARGETS, "models": {}}
    deadline = time.monotonic() + 0.6 * suite.remaining_s()  # the scaling steps after this one need the rest
    for model in DECODE_TARGETS:
        def save_row(results: dict[str, Any], model: str = model) -> None:
            partial["models"][model] = results
            suite.document["steps"]["end_to_end_decode"] = {"status": "running", "result": partial}
            suite.save()

        step = train_step_fn(device, sizes, model)
        try:
            results = measure_end_to_end(device, sizes, step, decode_feeds(suite, raw, shards), (),
                                         deadline=deadline, on_row=save_row)
        finally:
            del step
            free_gpu(device)
        for row in results["fed"]:  # a target is a GPU's: on the CPU (smoke) the ratios say nothing of it
            if device.type == "cuda" and "ratio_to_ceiling" in row and row.get("decode") == "device":
                row["meets_target"] = row["ratio_to_ceiling"] >= DECODE_TARGETS[model]
        partial["models"][model] = results
    if device.type != "cuda":
        partial["not_measured"] = {"gpu_idle_fraction": "CUDA events need a CUDA device",
                                   "decode_device": "decode='device' ran nvImageCodec's CPU backend (no CUDA)"}
    return partial
