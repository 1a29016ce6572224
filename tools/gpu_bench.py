"""GPU data path: host-to-device bandwidth, augmentation cost, and end-to-end training throughput.

    python -m tools.gpu_bench                          # on a CUDA machine; makes synthetic shards
    python -m tools.gpu_bench --shards DIR --steps 50 --workers 4,8,16 --json out.json
    python -m tools.gpu_bench --smoke                  # tiny sizes, runs on the CPU too
    python -m tools.gpu_bench --record                 # also append the tables to tools/RESULTS.md
    python -m tools.gpu_bench --smoke --record         # quick check of every CUDA path (tiny sizes)

1. h2d: one uint8 / float32 image batch [B, 224, 224, 3], pinned vs pageable (CUDA events).
2. augment: ``Augment`` (random resized crop + flip + jitter + normalise, fp16/bf16
   channels_last out) per batch, as a fraction of a ResNet-50 training step (AMP bf16,
   so no GradScaler; channels_last; forward, backward and SGD step) at the same batch
   size. Target: < 3 %.
3. end to end: that model trained on a batch already on the GPU (the ceiling) vs fed by
   ``loaders.DataLoader`` with N workers: img/s, fraction of the time waiting for data,
   ratio to the ceiling. One epoch covers the warm-up and the timed steps (a sampler that
   cycles over the shards), so no epoch boundary falls inside the timed window.
4. (optional) JPEG decode on the GPU with torchvision, when it is importable with CUDA.

Without ``--shards``, synthetic images (``dataprep.synthetic``) are sharded by
``python -m dataprep.cli shard`` into a temporary directory, used by parts 3 and 4.
cuDNN autotuning (``cudnn.benchmark``) is on; every timing excludes warm-up calls.
Defaults on one H100 take about two minutes, most of it making the shards.

The tool only measures and prints; nothing is tuned. RESULTS.md is written only with --record.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from loaders.augment import Augment, ColorJitter, RandomHorizontalFlip, RandomResizedCrop
from tools._report import ToolError, format_table, report_document, write_json
from tools._resnet import resnet50

TOOL = "gpu_bench"
RESULTS_MD = Path(__file__).with_name("RESULTS.md")
TARGET_AUGMENT_FRACTION = 0.03
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """What one run measures with: batch, image side, model width, timed steps, synthetic images.

    fed_steps_per_worker: part 3 times at least this many steps per worker, so that the
    bursts in which the workers deliver (up to one batch each) average out.
    """

    batch: int
    side: int
    width: int
    steps: int
    images: int
    fed_steps_per_worker: int


# 1024 images suffice: part 3 cycles over them, and generating them is single-threaded.
FULL = Sizes(batch=256, side=224, width=64, steps=30, images=1024, fed_steps_per_worker=8)
SMOKE = Sizes(batch=4, side=32, width=8, steps=2, images=24, fed_steps_per_worker=1)


def host_time_ms(fn: Callable[[], object], device: torch.device, *, repeats: int, warmup: int = 2) -> float:
    """Mean milliseconds per call on the host clock, between device-wide synchronizes: for
    work that may run on streams of its own (torchvision's GPU decode)."""
    for _ in range(warmup):
        fn()
    _sync(device)
    start_s = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(device)
    return (time.perf_counter() - start_s) * 1e3 / repeats


def time_ms(fn: Callable[[], object], device: torch.device, *, repeats: int, warmup: int = 2) -> float:
    """Mean milliseconds per call after ``warmup`` untimed calls (cuDNN autotuning, first
    allocations): CUDA events on the current stream on a GPU, the host clock on the CPU.

    ``fn`` must enqueue all its GPU work on the current stream (or make it wait for its own).
    """
    if device.type != "cuda":
        return host_time_ms(fn, device, repeats=repeats, warmup=warmup)
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def measure_h2d(device: torch.device, sizes: Sizes) -> list[dict[str, Any]]:
    """Part 1: one [B, side, side, 3] batch copied to ``device``, per dtype and host memory kind."""
    rows = []
    for dtype in (torch.uint8, torch.float32):
        for pinned in (True, False):
            if pinned and device.type != "cuda":
                continue  # pinned memory needs CUDA
            src = torch.ones(sizes.batch, sizes.side, sizes.side, 3, dtype=dtype, pin_memory=pinned)
            dst = torch.empty_like(src, device=device)
            # Only a pinned source can be copied asynchronously; a pageable one is staged by
            # the driver and blocks the host either way, so ask for what really happens.
            ms = time_ms(lambda: dst.copy_(src, non_blocking=pinned), device, repeats=10)
            size_bytes = src.numel() * src.element_size()
            rows.append({"dtype": str(dtype).removeprefix("torch."), "host": "pinned" if pinned else "pageable",
                         "mb": size_bytes / 1e6, "ms": ms, "gb_s": size_bytes / ms / 1e6})
    return rows


def train_step_fn(device: torch.device, sizes: Sizes) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """A ResNet-50 SGD step (AMP bf16, channels_last) on ``device`` as ``step(images, labels)``.

    images: bfloat16 [B, 3, side, side] channels_last; labels: int64 [B] in 0..999; both on
    ``device``. bf16 has fp32's exponent range, so no GradScaler (fp16 would need one).
    """
    model = resnet50(width=sizes.width).to(device, memory_format=torch.channels_last).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def synthetic_batch(device: torch.device, sizes: Sizes) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 [B, 3, side, side] channels_last images and int64 [B] labels, already on ``device``."""
    images = torch.randn(sizes.batch, 3, sizes.side, sizes.side, device=device)
    labels = torch.randint(0, 1000, (sizes.batch,), device=device)
    return images.to(torch.bfloat16, memory_format=torch.channels_last), labels


def measure_augment(device: torch.device, sizes: Sizes, step: Callable[..., None]) -> dict[str, Any]:
    """Part 2: ms per batch of the full Augment pipeline vs ms per training step."""
    images = torch.randint(0, 256, (sizes.batch, sizes.side, sizes.side, 3), dtype=torch.uint8, device=device)
    ops = [RandomResizedCrop(sizes.side), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4)]
    batch, labels = synthetic_batch(device, sizes)
    step_ms = time_ms(lambda: step(batch, labels), device, repeats=sizes.steps)
    out: dict[str, Any] = {"batch": sizes.batch, "side": sizes.side, "step_ms": step_ms, "augment": []}
    for dtype in (torch.bfloat16, torch.float16):
        augment = Augment(ops, out_dtype=dtype, mean=IMAGENET_MEAN, std=IMAGENET_STD)
        ms = time_ms(lambda: augment(images), device, repeats=max(sizes.steps, 10))
        fraction = ms / step_ms
        out["augment"].append({"out_dtype": str(dtype).removeprefix("torch."), "ms": ms,
                               "fraction_of_step": fraction, "meets_target": fraction < TARGET_AUGMENT_FRACTION})
    return out


def make_shards(root: Path, sizes: Sizes) -> Path:
    """Synthetic raw images (dataprep.synthetic) sharded by ``python -m dataprep.cli shard``."""
    from dataprep.synthetic import SyntheticSpec, make_dataset

    raw, shards = root / "raw", root / "shards"
    spec = SyntheticSpec(images=sizes.images, classes=10, seed=0, broken=False, tables=False, text=False,
                         sidecars=False)
    make_dataset(raw, spec)
    command = [sys.executable, "-m", "dataprep.cli", "shard", str(raw / "images"), str(shards),
               "--resize-short", str(max(sizes.side + sizes.side // 7, 32)), "--shard-size", "64MB", "--no-progress"]
    # From the checkout's root, so that ``-m dataprep.cli`` resolves wherever this was started.
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=root)
    if done.returncode != 0:
        raise ToolError(f"dataprep shard failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return shards


def _split(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(batch, dict):
        labels = batch.get("label", batch.get("cls"))
        return batch["image"], labels
    return batch[0], batch[1]


def _forever(loader: Any) -> Iterator[Any]:
    epoch = 0
    while True:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def run_fed(loader: Any, step: Callable[..., None], device: torch.device, steps: int,
            warmup: int = 3) -> dict[str, float]:
    """Train ``steps`` steps fed by ``loader`` after ``warmup`` steps: img/s and data-wait fraction.

    The wait is host time spent in ``next()`` (the host otherwise runs ahead of the GPU,
    so time there is time the GPU can starve); img/s is over the host clock between two
    ``torch.cuda.synchronize()``.
    """
    batches = _forever(loader)
    for _ in range(warmup):
        images, labels = _split(next(batches))
        step(images, (labels % 1000).long())
    _sync(device)
    wait_s, seen, start_s = 0.0, 0, time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        images, labels = _split(next(batches))
        wait_s += time.perf_counter() - t0
        step(images, (labels % 1000).long())
        seen += images.shape[0]
    _sync(device)
    total_s = time.perf_counter() - start_s
    batches.close()
    return {"img_s": seen / total_s, "wait_fraction": wait_s / total_s}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cycled_indices(num_samples: int, count: int, seed: int = 0) -> list[int]:
    """``count`` sample indices: shuffled passes over 0..num_samples-1, one after another.

    As the sampler of part 3 it makes one epoch as long as the run, however few samples
    the shards hold: no epoch boundary (workers draining, then refilling) while timing.
    """
    if num_samples < 1:
        raise ToolError("the shards hold no samples")
    rng = np.random.default_rng(seed)
    passes = -(-count // num_samples)
    return [int(i) for _ in range(passes) for i in rng.permutation(num_samples)][:count]


def measure_end_to_end(device: torch.device, sizes: Sizes, step: Callable[..., None], shards: Path,
                       workers: Sequence[int]) -> dict[str, Any]:
    """Part 3: the ceiling (data already on the device) vs ``loaders.DataLoader`` at each worker count."""
    try:
        from loaders import DataLoader, ShardDataset
        from loaders.transforms import RandomResizedCropDecode
    except ImportError as err:
        return {"skipped": f"loaders API not importable yet: {err}"}
    batch, labels = synthetic_batch(device, sizes)
    ceiling_ms = time_ms(lambda: step(batch, labels), device, repeats=sizes.steps)
    ceiling = sizes.batch * 1e3 / ceiling_ms
    del batch, labels
    rows = []
    for num_workers in workers:
        dataset = ShardDataset(shards, transform=RandomResizedCropDecode(sizes.side))
        # Enough warm-up for the workers' first burst (one batch each) to be consumed.
        warmup = num_workers + 3
        steps = max(sizes.steps, sizes.fed_steps_per_worker * num_workers)
        # The CPU transform already cropped and flipped: the device adds colour and normalises.
        augment = Augment([ColorJitter(0.4, 0.4, 0.4)], out_dtype=torch.bfloat16,
                          mean=IMAGENET_MEAN, std=IMAGENET_STD)
        # drop_last: a short last batch would be a new shape for cuDNN to autotune.
        loader = DataLoader(dataset, batch_size=sizes.batch, num_workers=num_workers, device=str(device),
                            sampler=cycled_indices(len(dataset), (warmup + steps) * sizes.batch),
                            drop_last=True, device_transform=augment)
        try:
            fed = run_fed(loader, step, device, steps, warmup)
        finally:
            loader.close()
        rows.append({"num_workers": num_workers, "steps": steps, **fed, "ratio_to_ceiling": fed["img_s"] / ceiling})
    return {"ceiling_img_s": ceiling, "fed": rows}


def measure_gpu_decode(device: torch.device, shards: Path | None) -> dict[str, Any]:
    """Part 4 (optional): torchvision.io.decode_jpeg on the GPU vs Pillow on one CPU thread."""
    try:
        import torchvision.io as tvio
    except ImportError as err:
        return {"skipped": f"torchvision not importable: {err}"}
    if device.type != "cuda" or shards is None:
        return {"skipped": "needs CUDA and shards"}
    import io
    import tarfile

    from PIL import Image

    tars = sorted(shards.glob("*.tar"))
    if not tars:
        return {"skipped": f"no tar shards in {shards}"}
    with tarfile.open(tars[0]) as tar:
        jpegs = [tar.extractfile(m).read() for m in tar if m.name.endswith(".jpg")][:256]  # type: ignore[union-attr]
    if not jpegs:
        return {"skipped": f"no .jpg members in {tars[0].name}"}
    data = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    rgb = tvio.ImageReadMode.RGB  # as Pillow's convert("RGB") below
    try:
        gpu_ms = host_time_ms(lambda: tvio.decode_jpeg(data, mode=rgb, device=device), device, repeats=5)
    except (RuntimeError, TypeError, ValueError) as err:
        # Optional part (an older torchvision decodes no lists, nvJPEG may be missing):
        # say why rather than lose the parts already measured.
        return {"skipped": f"torchvision.io.decode_jpeg on {device} failed: {err}"}
    cpu_ms = time_ms(lambda: [Image.open(io.BytesIO(j)).convert("RGB") for j in jpegs], torch.device("cpu"), repeats=2)
    return {"images": len(jpegs), "gpu_img_s": len(jpegs) * 1e3 / gpu_ms,
            "cpu_one_thread_img_s": len(jpegs) * 1e3 / cpu_ms}


def render(results: dict[str, Any]) -> str:
    """The results of the parts that ran as plain-text tables."""
    parts = []
    if "h2d" in results:
        parts.append(format_table(["dtype", "host", "MB", "ms/batch", "GB/s"],
                                  [[r["dtype"], r["host"], r["mb"], r["ms"], r["gb_s"]] for r in results["h2d"]],
                                  title=f"1. host-to-device copy ({results['device']})"))
    if "augment" in results:
        aug = results["augment"]
        parts.append(format_table(
            ["out dtype", "ms/batch", "% of step", f"< {TARGET_AUGMENT_FRACTION:.0%}"],
            [[a["out_dtype"], a["ms"], 100 * a["fraction_of_step"], a["meets_target"]] for a in aug["augment"]],
            title=f"2. augment, batch {aug['batch']} at {aug['side']}px; ResNet-50 step {aug['step_ms']:.1f} ms"))
    e2e = results.get("end_to_end")
    if e2e is not None and "skipped" in e2e:
        parts.append(f"3. end to end: skipped ({e2e['skipped']})")
    elif e2e is not None:
        parts.append(format_table(
            ["workers", "timed steps", "img/s", "waiting %", "of ceiling"],
            [[r["num_workers"], r["steps"], r["img_s"], 100 * r["wait_fraction"], r["ratio_to_ceiling"]]
             for r in e2e["fed"]],
            title=f"3. end to end; ceiling (data already on the device) {e2e['ceiling_img_s']:.0f} img/s"))
    decode = results.get("gpu_decode")
    if decode is not None and "skipped" in decode:
        parts.append(f"4. JPEG decode on the GPU: skipped ({decode['skipped']})")
    elif decode is not None:
        parts.append(f"4. JPEG decode: GPU {decode['gpu_img_s']:.0f} img/s, "
                     f"Pillow one thread {decode['cpu_one_thread_img_s']:.0f} img/s ({decode['images']} images)")
    return "\n\n".join(parts)


def record(text: str, results: dict[str, Any], argv: Sequence[str]) -> None:
    """Append a dated section to tools/RESULTS.md: the GPU, torch / CUDA / cuDNN versions,
    the command, and the tables."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    versions = ", ".join(f"{name} {results.get(name) or '-'}" for name in ("torch", "cuda", "cudnn", "torchvision"))
    command = " ".join(["python -m tools.gpu_bench", *argv])
    with open(RESULTS_MD, "a", encoding="utf-8") as f:
        f.write(f"\n## gpu_bench, {stamp}, {results['device']}\n\n{versions}; `{command}`\n\n```\n{text}\n```\n")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m tools.{TOOL}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=Path, help="dataprep output directory (default: make synthetic shards)")
    parser.add_argument("--steps", type=int,
                        help=f"timed steps per measurement (default {FULL.steps}; smoke {SMOKE.steps})")
    parser.add_argument("--workers", default=None,
                        help="comma-separated worker counts for part 3 (default 4,8,16; smoke 2)")
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH ('-' for stdout)")
    parser.add_argument("--parts", default="1,2,3,4", help="comma-separated parts to run (default %(default)s)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: a quick check of every path; runs on the CPU when there is no GPU")
    parser.add_argument("--record", action="store_true", help="append the tables to tools/RESULTS.md")
    return parser.parse_args(argv)


def versions(device: torch.device) -> dict[str, Any]:
    """torch, CUDA (the build's), cuDNN and torchvision versions; None where absent."""
    try:
        import torchvision
    except ImportError:
        vision = None
    else:
        vision = torchvision.__version__
    cuda = device.type == "cuda"
    return {"torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
            "cudnn": torch.backends.cudnn.version() if cuda else None, "torchvision": vision}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The parts that ``args`` select, with their sizes and device."""
    if not args.smoke and not torch.cuda.is_available():
        raise ToolError("needs CUDA (no GPU found); use --smoke for a tiny run on the CPU")
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    base = SMOKE if args.smoke else FULL
    steps = args.steps if args.steps is not None else base.steps
    if steps < 1:
        raise ToolError(f"--steps must be a positive int (got {steps})")
    sizes = dataclasses.replace(base, steps=steps)
    workers = _int_list("--workers", args.workers or ("2" if args.smoke else "4,8,16"))
    parts = set(_int_list("--parts", args.parts))
    if args.shards is not None and not args.shards.is_dir():
        raise ToolError(f"--shards {args.shards} is not a directory")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    results: dict[str, Any] = {"device": name, **versions(device), "smoke": args.smoke,
                               "batch": sizes.batch, "side": sizes.side, "steps": sizes.steps}
    # The training step is timed as a tuned run would train: cuDNN picks the fastest
    # algorithms once per shape (in the warm-up calls, which are never timed).
    torch.backends.cudnn.benchmark = device.type == "cuda"
    if 1 in parts:
        results["h2d"] = measure_h2d(device, sizes)
    step = train_step_fn(device, sizes) if parts & {2, 3} else None
    if step is not None and 2 in parts:
        results["augment"] = measure_augment(device, sizes, step)
    with tempfile.TemporaryDirectory(prefix="gpu_bench_") as tmp:
        wants_decode = 4 in parts and device.type == "cuda" and importlib.util.find_spec("torchvision") is not None
        shards, why_not = args.shards, None
        if shards is None and (3 in parts or wants_decode):
            try:
                shards = make_shards(Path(tmp), sizes)
            except (ToolError, ImportError) as err:  # keep the parts already measured
                why_not = f"making synthetic shards failed: {err}"
        if step is not None and 3 in parts:
            results["end_to_end"] = (measure_end_to_end(device, sizes, step, shards, workers) if shards is not None
                                     else {"skipped": why_not})
        if 4 in parts:
            results["gpu_decode"] = measure_gpu_decode(device, shards) if why_not is None else {"skipped": why_not}
    return results


def _int_list(option: str, text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError as err:
        raise ToolError(f"{option} must be comma-separated ints (got {text!r})") from err
    if any(v < 0 for v in values):
        raise ToolError(f"{option} must not be negative (got {text!r})")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        results = run(args)
    except ToolError as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    text = render(results)
    if args.json != "-":  # '-' keeps stdout pure JSON
        print(text)
    if args.json is not None:
        write_json(args.json, report_document(TOOL, results, sys.argv if argv is None else list(argv)))
    if args.record:
        record(text, results, sys.argv[1:] if argv is None else list(argv))
        print(f"appended to {RESULTS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
