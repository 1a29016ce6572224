"""What decoding only a crop's region saves, and how exact it is (issue 15): one core, bytes in RAM.

    python -m tools.bench.region_bench [--images 500 | --raw DIR] [--passes 3] [--seed 0] [--smoke] [--json [PATH]]

For each JPEG a RandomResizedCrop box (torchvision's draw: scale 0.08-1, ratio 3/4-4/3)
is drawn once; then, in CPU time of this thread (best of ``--passes``), per image:

- ``full decode``: the whole image through the partial-decode extension (the region is
  the image): libjpeg-turbo's full cost, islow IDCT, fancy upsampling, as Pillow;
- ``entropy to crop bottom``: a 1-pixel region on the box's last row: Huffman decoding
  of every row down to the box, almost no IDCT, what no region decode can avoid in a
  JPEG without restart markers;
- ``region decode``: the box's rows and columns (``loaders.read.region.decode_region``);
- ``fused, full decode`` / ``fused, region lane``: ``RandomResizedCropDecode`` to 224 +
  flip (the loader's transform) with the extension hidden / present.

Accuracy: the fused outputs with and without the lane on the same boxes: mean absolute
difference per pixel (0..255), its maximum, and the share of images equal bit for bit (all of
them: the lane decodes with Pillow's own libjpeg, named in the report, and resizes as the
full decode does).
Needs the extension (``loaders.read.region.is_available()``). Run it alone: it times one core.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loaders.read import region
from loaders.read.decode import image_size
from loaders.read.transforms import RandomResizedCropDecode, random_resized_crop_box
from tools.common.report import ToolError, add_output_args, check_int, emit, format_table

TOOL = "region_bench"
OUTPUT_SIZE = 224
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


def load_jpegs(raw: Path, count: int) -> list[bytes]:
    """The first ``count`` colour JPEGs under ``raw`` (sorted paths), as bytes."""
    paths = sorted(p for p in raw.rglob("*.jpg") if p.is_file())[:count]
    if not paths:
        raise ToolError(f"{raw}: no .jpg files")
    return [p.read_bytes() for p in paths]


def _cpu_ms(fn: Callable[[int], object], count: int, passes: int) -> float:
    best = []
    for _ in range(passes):
        start = time.thread_time()
        for k in range(count):
            fn(k)
        best.append(time.thread_time() - start)
    return 1e3 * min(best) / count


def run(datas: Sequence[bytes], *, passes: int, seed: int) -> dict[str, Any]:
    """Per-image CPU ms of each stage and the lane's accuracy (see the module docstring)."""
    if not region.is_available():
        raise ToolError(f"no partial decode here: {region.lane_status()}")
    decode_region = region.decode_region
    rng = np.random.default_rng(seed)
    sizes = [image_size(d) for d in datas]
    boxes = [random_resized_crop_box(w, h, SCALE, RATIO, rng) for w, h in sizes]
    buffer = bytearray(4 * max((w + 64) * h for w, h in sizes))
    transform = RandomResizedCropDecode(OUTPUT_SIZE, scale=SCALE, ratio=RATIO, field="jpg")

    def fused(k: int) -> np.ndarray:
        return transform({"__key__": str(k), "jpg": datas[k]}, np.random.default_rng(seed + k))["image"]

    n = len(datas)
    timed = {
        "full decode": lambda k: decode_region(datas[k], buffer, 0, 0, *sizes[k], 1),
        "entropy to crop bottom": lambda k: decode_region(datas[k], buffer, 0, boxes[k][1] + boxes[k][3] - 1, 1, 1, 1),
        "region decode": lambda k: decode_region(datas[k], buffer, *boxes[k], 1),
        "fused, region lane": fused,
    }
    ms = {name: _cpu_ms(fn, n, passes) for name, fn in timed.items()}
    lane_out = [fused(k) for k in range(n)]
    with region.lane_disabled():
        ms["fused, full decode"] = _cpu_ms(fused, n, passes)
        full_out = [fused(k) for k in range(n)]
    return {
        "lane": region.lane_status(),
        "images": n,
        "mean_kb": statistics.fmean(len(d) for d in datas) / 1e3,
        "mean_kpx": statistics.fmean(w * h for w, h in sizes) / 1e3,
        "mean_box_area": statistics.fmean(b[2] * b[3] / (w * h) for b, (w, h) in zip(boxes, sizes)),
        "mean_box_bottom": statistics.fmean((b[1] + b[3]) / h for b, (_, h) in zip(boxes, sizes)),
        "cpu_ms_per_image": ms,
        **_lane_accuracy(lane_out, full_out),
    }


def _lane_accuracy(lane_out: Sequence[np.ndarray], full_out: Sequence[np.ndarray]) -> dict[str, Any]:
    """Mean absolute difference per pixel (0..255), its maximum, share of images equal bit for bit."""
    diffs = [np.abs(a.astype(np.int16) - b) for a, b in zip(lane_out, full_out)]
    return {"lane_mad": statistics.fmean(float(d.mean()) for d in diffs),
            "lane_max_diff": int(max(int(d.max()) for d in diffs)),
            "lane_exact_share": statistics.fmean(float(not d.any()) for d in diffs)}


def format_report(r: dict[str, Any]) -> str:
    full = r["cpu_ms_per_image"]["full decode"]
    rows = [(name, f"{v:.3f}", f"{v / full:.2f}") for name, v in r["cpu_ms_per_image"].items()]
    title = (f"{r['images']} JPEGs ({r['mean_kb']:.0f} KB, {r['mean_kpx']:.0f} kpx mean); crop boxes keep "
             f"{100 * r['mean_box_area']:.0f}% of the area, end at {100 * r['mean_box_bottom']:.0f}% of the height "
             f"(mean); one core, CPU time")
    table = format_table(["stage", "CPU ms/img", "x full decode"], rows, title=title)
    accuracy = (f"region lane vs full decode, fused output: MAD {r['lane_mad']:.4f}, max diff {r['lane_max_diff']}, "
                f"{100 * r['lane_exact_share']:.1f}% of images equal bit for bit\n"
                f"partial decode {r['lane']}")
    return f"{table}\n\n{accuracy}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.region_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, help="synthetic JPEGs to make when no --raw (default 500; --smoke 20)")
    parser.add_argument("--raw", metavar="DIR", help="a tree of JPEGs to use instead of synthetic ones")
    parser.add_argument("--passes", type=int, default=3, help="timed passes, best kept (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the crop boxes (default 0)")
    parser.add_argument("--smoke", action="store_true", help="tiny run of seconds (20 images, 1 pass)")
    add_output_args(parser, plot=None)
    args = parser.parse_args(argv)
    try:
        images = check_int("images", args.images if args.images is not None else (20 if args.smoke else 500), 1)
        passes = 1 if args.smoke else check_int("passes", args.passes, 1)
        with tempfile.TemporaryDirectory(prefix="region-bench-") as tmp:
            if args.raw is not None:
                datas = load_jpegs(Path(args.raw), images)
            else:
                from tools.common.synthetic import make_raw_images

                datas = load_jpegs(make_raw_images(Path(tmp) / "raw", images + 24), images)
            report = run(datas, passes=passes, seed=args.seed)
    except ToolError as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    emit(TOOL, format_report(report), report, args.json, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
