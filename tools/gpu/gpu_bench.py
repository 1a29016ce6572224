"""GPU data path: host-to-device bandwidth, augmentation cost, and end-to-end training throughput.

    python -m tools.gpu.gpu_bench                          # on a CUDA machine; makes synthetic shards
    python -m tools.gpu.gpu_bench --shards DIR --steps 50 --workers 4,8,16 --json out.json
    python -m tools.gpu.gpu_bench --smoke                  # tiny sizes, runs on the CPU too
    python -m tools.gpu.gpu_bench --record                 # also append the tables to tools/RESULTS.md
    python -m tools.gpu.gpu_bench --smoke --record         # quick check of every CUDA path (tiny sizes)

1. h2d: one uint8 / float32 image batch [B, 224, 224, 3], pinned vs pageable (CUDA events),
   and its share of the PCIe link's theoretical peak (``link_info``: nvidia-smi's max
   generation x width).
2. augment: ``Augment`` (random resized crop + flip + jitter + normalise, fp16/bf16
   channels_last out) per batch, as a fraction of a ResNet-50 training step (AMP bf16,
   so no GradScaler; channels_last; forward, backward and SGD step) at the same batch
   size. Target: < 3 %.
3. end to end: that model trained on a batch already on the GPU (the ceiling) vs fed by
   each ``Feed`` with N workers: img/s, fraction of host time waiting for data, GPU idle
   fraction (CUDA events around each step, ``StepTimer``) and ratio to the ceiling. One
   epoch covers the warm-up and the timed steps (a sampler that cycles over the data), so
   no epoch boundary falls inside the timed window. Feeds: ``ours_feed``
   (``loaders.DataLoader(device=...)`` over shards) and, for ``tools.suites.device.device_suite``,
   ``stock_feed`` (torch's DataLoader over raw files with float32 transforms).
4. JPEG decode: Pillow on every core (full, and the loader's crop decode) vs the loader's
   ``decode="device"`` (nvImageCodec: hardware, GPU and hybrid backends, region and whole-image
   decode) and ``torchvision.io.decode_jpeg`` batched, where torchvision imports; on CUDA.

Without ``--shards``, synthetic images (``dataprep.synthetic``) are sharded by
``python -m dataprep.cli shard`` into a temporary directory, used by parts 3 and 4.
cuDNN autotuning (``cudnn.benchmark``) is on; every timing excludes warm-up calls.
Defaults on one H100 take about two minutes, most of it making the shards.

The tool only measures and prints; nothing is tuned. RESULTS.md is written only with --record.

Where each part lives: sizes and the training step ``tools.gpu.train_step``, timers
``tools.gpu.timing``, 1 ``tools.gpu.h2d``, 2 ``tools.gpu.augment_cost``, 3 ``tools.gpu.end_to_end``
with its feeds in ``tools.gpu.feeds``, 4 ``tools.gpu.decode``, tables ``tools.gpu.render``,
the synthetic shards ``tools.common.synthetic``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from tools.common.report import ToolError, add_output_args, emit, int_list
from tools.common.synthetic import make_shards
from tools.gpu.augment_cost import measure_augment
from tools.gpu.decode import measure_gpu_decode
from tools.gpu.end_to_end import measure_end_to_end
from tools.gpu.feeds import ours_feed
from tools.gpu.h2d import link_info, measure_h2d
from tools.gpu.render import render
from tools.gpu.train_step import FULL, SMOKE, Sizes, train_step_fn
from tools.gpu.versions import versions

TOOL = "gpu_bench"
RESULTS_MD = Path(__file__).resolve().parents[1] / "RESULTS.md"


def record(text: str, results: dict[str, Any], argv: Sequence[str]) -> None:
    """Append a dated section to tools/RESULTS.md: the GPU, torch / CUDA / cuDNN versions,
    the command, and the tables."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    names = ("torch", "cuda", "cudnn", "nvimgcodec", "torchvision")
    versions = ", ".join(f"{name} {results.get(name) or '-'}" for name in names)
    command = " ".join(["python -m tools.gpu.gpu_bench", *argv])
    with open(RESULTS_MD, "a", encoding="utf-8") as f:
        f.write(f"\n## gpu_bench, {stamp}, {results['device']}\n\n{versions}; `{command}`\n\n```\n{text}\n```\n")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu.gpu_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=Path, help="dataprep output directory (default: make synthetic shards)")
    parser.add_argument("--steps", type=int,
                        help=f"timed steps per measurement (default {FULL.steps}; smoke {SMOKE.steps})")
    parser.add_argument("--workers", default=None,
                        help="comma-separated worker counts for part 3 (default 4,8,16; smoke 2)")
    add_output_args(parser, plot=None)
    parser.add_argument("--parts", default="1,2,3,4", help="comma-separated parts to run (default %(default)s)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: a quick check of every path; runs on the CPU when there is no GPU")
    parser.add_argument("--record", action="store_true", help="append the tables to tools/RESULTS.md")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The parts that ``args`` select, with their sizes and device."""
    device, sizes, workers, parts = _settings(args)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    results: dict[str, Any] = {"device": name, **versions(device), "smoke": args.smoke,
                               "batch": sizes.batch, "side": sizes.side, "steps": sizes.steps}
    # The training step is timed as a tuned run would train: cuDNN picks the fastest
    # algorithms once per shape (in the warm-up calls, which are never timed).
    torch.backends.cudnn.benchmark = device.type == "cuda"
    if 1 in parts:
        results["link"] = link_info(device)
        results["h2d"] = measure_h2d(device, sizes, results["link"].get("peak_gb_s"))
    step = train_step_fn(device, sizes) if parts & {2, 3} else None
    if step is not None and 2 in parts:
        results["augment"] = measure_augment(device, sizes, step)
    results.update(_run_shard_parts(args.shards, device, sizes, parts, step, workers))
    return results


def _settings(args: argparse.Namespace) -> tuple[torch.device, Sizes, list[int], set[int]]:
    """The device, sizes, part 3 worker counts and parts that ``args`` ask for (ToolError if invalid)."""
    if not args.smoke and not torch.cuda.is_available():
        raise ToolError("needs CUDA (no GPU found); use --smoke for a tiny run on the CPU")
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    base = SMOKE if args.smoke else FULL
    steps = args.steps if args.steps is not None else base.steps
    if steps < 1:
        raise ToolError(f"--steps must be a positive int (got {steps})")
    sizes = dataclasses.replace(base, steps=steps)
    workers = int_list("--workers", args.workers or ("2" if args.smoke else "4,8,16"))
    parts = set(int_list("--parts", args.parts))
    if args.shards is not None and not args.shards.is_dir():
        raise ToolError(f"--shards {args.shards} is not a directory")
    return device, sizes, workers, parts


def _run_shard_parts(shards: Path | None, device: torch.device, sizes: Sizes, parts: set[int],
                     step: Callable[..., None] | None, workers: Sequence[int]) -> dict[str, Any]:
    """Parts 3 and 4 (those in ``parts``) over ``shards``, or over synthetic shards made for them."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpu_bench_") as tmp:
        wants_decode = 4 in parts and device.type == "cuda"
        why_not = None
        if shards is None and (3 in parts or wants_decode):
            try:
                shards = make_shards(Path(tmp), sizes.images, sizes.side)
            except (ToolError, ImportError) as err:  # keep the parts already measured
                why_not = f"making synthetic shards failed: {err}"
        if step is not None and 3 in parts:
            feeds = [ours_feed("loaders, shards", shards, sizes, device)] if shards is not None else []
            results["end_to_end"] = (measure_end_to_end(device, sizes, step, feeds, workers) if shards is not None
                                     else {"skipped": why_not})
        if 4 in parts:
            results["gpu_decode"] = measure_gpu_decode(device, shards) if why_not is None else {"skipped": why_not}
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        results = run(args)
    except ToolError as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    text = render(results)
    emit(TOOL, text, results, args.json, argv)
    if args.record:
        record(text, results, sys.argv[1:] if argv is None else list(argv))
        print(f"appended to {RESULTS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
