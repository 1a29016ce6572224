"""JPEG decode throughput on one core, Pillow(-SIMD) vs simplejpeg, side by side.

    python -m tools.bench.decode_bench                         # 200 synthetic 500x375 q90 photos
    python -m tools.bench.decode_bench --images DIR --n 500    # JPEG files under DIR, or the .tar shards in it
    python -m tools.bench.decode_bench --json                  # the JSON report on stdout (--json PATH: to a file)

Cases: full decode, reduced-scale decode (Pillow draft / simplejpeg scaled), full decode +
resize to 224, and the fused transforms RandomResizedCropDecode(224) and
CenterCropDecode(224), each with each backend. Single-thread figures are per CPU-second
of the measuring thread (best of ``--repeat``), so other processes on a shared machine
distort them little; megapixels are those of the encoded images. Then the fused random
crop runs on 1 and 2 threads (wall time) to show whether the codecs release the GIL.

The tool only measures: it prints which backend the rule "switch from Pillow only when
the other is >10% faster on the fused path" picks; ``loaders.read.decode.DEFAULT_BACKEND`` is
what the library uses.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tarfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from loaders.read.decode import (
    DEFAULT_BACKEND,
    Backend,
    active_backend,
    available_backends,
    decode_crop_resize,
    decode_rgb,
    image_size,
)
from loaders.read.transforms import CenterCropDecode, RandomResizedCropDecode
from tools.common.report import (
    ToolError,
    add_output_args,
    bar_plot,
    format_table,
    report_document,
    require_plot,
    write_json,
)
from tools.common.timing import SampleFn, time_cpu, time_threads

TOOL = "decode_bench"
OUTPUT_SIZE = 224
SWITCH_RATIO = 1.10  # another backend must beat Pillow by this much on the fused path
JPEG_SUFFIXES = (".jpg", ".jpeg")


def synthetic_jpegs(count: int, width: int, height: int, quality: int, seed: int) -> list[bytes]:
    """``count`` photo-like JPEGs of width x height pixels at ``quality``, deterministic in ``seed``."""
    try:
        from dataprep.synthetic import photo_like
    except ImportError:
        photo_like = _one_over_f
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        buffer = io.BytesIO()
        Image.fromarray(photo_like(height, width, rng)).save(buffer, "JPEG", quality=quality)
        out.append(buffer.getvalue())
    return out


def _one_over_f(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """Smooth 1/f noise in three correlated channels: uint8 [H, W, 3]."""
    freq = np.hypot(np.fft.fftfreq(height)[:, None], np.fft.rfftfreq(width)[None, :])
    freq[0, 0] = 1.0
    spectrum = (rng.standard_normal((3, *freq.shape)) + 1j * rng.standard_normal((3, *freq.shape))) / freq ** 1.2
    planes = np.fft.irfft2(spectrum, s=(height, width)).transpose(1, 2, 0) @ (np.eye(3) + 0.3 * rng.random((3, 3)))
    planes = (planes - planes.mean()) / (planes.std() + 1e-9)
    return np.clip(128 + 50 * planes, 0, 255).astype(np.uint8)


def load_jpegs(source: Path, count: int) -> list[bytes]:
    """Up to ``count`` JPEGs, sorted by name: from the .tar shards in ``source`` if any, else its files."""
    if not source.is_dir():
        raise ToolError(f"--images {source}: not a directory")
    shards = sorted(source.glob("*.tar"))
    out: list[bytes] = []
    if shards:
        for shard in shards:
            with tarfile.open(shard) as tar:
                for member in tar:
                    jpeg = member.isfile() and member.name.lower().endswith(JPEG_SUFFIXES)
                    if jpeg and (data := tar.extractfile(member)) is not None:
                        out.append(data.read())
                        if len(out) == count:
                            return out
    else:
        for path in sorted(p for p in source.rglob("*") if p.suffix.lower() in JPEG_SUFFIXES):
            out.append(path.read_bytes())
            if len(out) == count:
                break
    if not out:
        raise ToolError(f"--images {source}: no .jpg/.jpeg files (nor .tar shards holding them)")
    return out




def cases(backends: Sequence[Backend], scale: int) -> list[tuple[str, Backend, SampleFn]]:
    """(operation, backend, fn(data, rng)) for every measured case."""
    return [case for backend in backends for case in _backend_cases(backend, scale)]


def _backend_cases(backend: Backend, scale: int) -> list[tuple[str, Backend, SampleFn]]:
    rrc = RandomResizedCropDecode(OUTPUT_SIZE, backend=backend)
    center = CenterCropDecode(OUTPUT_SIZE, backend=backend)

    def full(data: bytes, rng: np.random.Generator) -> Any:
        return decode_rgb(data, backend=backend)

    def reduced(data: bytes, rng: np.random.Generator) -> Any:
        return decode_rgb(data, min_size=_scaled(data, scale), backend=backend)

    def resized(data: bytes, rng: np.random.Generator) -> Any:
        return decode_crop_resize(data, (0, 0, *image_size(data)), (OUTPUT_SIZE, OUTPUT_SIZE), reduced=False,
                                  backend=backend)

    return [("decode full", backend, full), (f"decode 1/{scale}", backend, reduced),
            (f"decode + resize {OUTPUT_SIZE}", backend, resized),
            (f"RandomResizedCropDecode({OUTPUT_SIZE})", backend, lambda d, r: rrc({"jpg": d}, r)),
            (f"CenterCropDecode({OUTPUT_SIZE})", backend, lambda d, r: center({"jpg": d}, r))]


def _scaled(data: bytes, scale: int) -> tuple[int, int]:
    width, height = image_size(data)
    return max(1, width // scale), max(1, height // scale)


def run(images: Sequence[bytes], *, repeat: int, scale: int) -> dict[str, Any]:
    """Measure every case and the 1-vs-2-thread scaling; the ``results`` of the JSON report.

    Repeats go round-robin over the cases, best kept, so a burst of load from other
    processes hits every case alike rather than one.
    """
    sizes = [image_size(d) for d in images]
    megapixels = sum(w * h for w, h in sizes) / 1e6
    measured = cases(available_backends(), scale)
    for _, _, fn in measured:
        fn(images[0], np.random.default_rng(0))  # warm up: imports, first-call allocations
    best = [float("inf")] * len(measured)
    for _ in range(repeat):
        for i, (_, _, fn) in enumerate(measured):
            best[i] = min(best[i], time_cpu(fn, images))
    rows = [{"operation": op, "backend": str(backend), "cpu_seconds": seconds,
             "images_per_s": len(images) / seconds, "megapixels_per_s": megapixels / seconds}
            for (op, backend, _), seconds in zip(measured, best, strict=True)]
    fused = _fused_ratio(rows)
    chosen = Backend.SIMPLEJPEG if fused is not None and fused > SWITCH_RATIO else Backend.PILLOW
    return {
        "images": {"count": len(images), "mean_width": float(np.mean([w for w, _ in sizes])),
                   "mean_height": float(np.mean([h for _, h in sizes])),
                   "mean_bytes": float(np.mean([len(d) for d in images]))},
        "cases": rows,
        "threads": [_thread_scaling(op, backend, fn, images, repeat) for op, backend, fn in measured
                    if op == f"RandomResizedCropDecode({OUTPUT_SIZE})"],
        "fused_ratio_simplejpeg_vs_pillow": fused,
        "chosen_backend": str(chosen),
        "library_default": str(DEFAULT_BACKEND),
        "active_backend": active_backend(),
        "cores_available": _cores(),
    }


def python_share(fn: SampleFn, images: Sequence[bytes]) -> float:
    """CPU share a spinning Python thread gets while another thread runs ``fn`` over ``images``.

    Above 0.5 the spinner ran while the codec worked, which needs the codec to release
    the GIL (near 1 with a free core). At or below 0.5 it is inconclusive: the threads
    took turns, because the GIL is held or because no core was free (then see speedup).
    """
    done = threading.Event()

    def work() -> None:
        rng = np.random.default_rng(0)
        for data in images:
            fn(data, rng)
        done.set()

    worker = threading.Thread(target=work, name="decode_bench-probe")
    wall, cpu = time.perf_counter(), time.thread_time()
    worker.start()
    while not done.is_set():
        pass  # pure Python: runs only while the worker does not hold the GIL
    worker.join()
    return (time.thread_time() - cpu) / max(time.perf_counter() - wall, 1e-9)


def _thread_scaling(op: str, backend: Backend, fn: SampleFn, images: Sequence[bytes], repeat: int) -> dict[str, Any]:
    one = two = (float("inf"), 0.0)
    for _ in range(repeat):  # alternate, so both see the same background load
        one = min(one, time_threads(fn, images, 1))
        two = min(two, time_threads(fn, images, 2))
    return {"operation": op, "backend": str(backend), "images_per_s_1_thread": len(images) / one[0],
            "images_per_s_2_threads": len(images) / two[0], "speedup": one[0] / two[0],
            # ~2 when both threads ran at once: the codec released the GIL (and 2 cores were free)
            "cpu_per_wall_2_threads": two[1] / two[0],
            "python_share": max(python_share(fn, images) for _ in range(repeat))}


def _fused_ratio(rows: Sequence[dict[str, Any]]) -> float | None:
    """Geometric mean over the fused transforms of simplejpeg's speed / Pillow's (None without simplejpeg)."""
    speed = {(r["operation"], r["backend"]): r["images_per_s"] for r in rows}
    ratios = [speed[(op, Backend.SIMPLEJPEG.value)] / speed[(op, Backend.PILLOW.value)]
              for op, be in speed if be == Backend.PILLOW.value and "CropDecode" in op
              and (op, Backend.SIMPLEJPEG.value) in speed]
    return float(np.exp(np.mean(np.log(ratios)))) if ratios else None


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def render(results: dict[str, Any]) -> str:
    """The human-readable report: the two tables and the verdict."""
    info = results["images"]
    lines = [f"{info['count']} JPEGs, mean {info['mean_width']:.0f}x{info['mean_height']:.0f} px, "
             f"{info['mean_bytes'] / 1024:.0f} KiB; decoder: {results['active_backend']}", ""]
    lines.append(format_table(
        ["operation", "backend", "images/s", "MP/s"],
        [[r["operation"], r["backend"], r["images_per_s"], r["megapixels_per_s"]] for r in results["cases"]],
        title="one thread, per CPU-second (best of repeats)"))
    lines.append("")
    lines.append(format_table(
        ["operation", "backend", "1 thread img/s", "2 threads img/s", "speedup", "2-thread CPU/wall",
         "Python share"],
        [[t["operation"], t["backend"], t["images_per_s_1_thread"], t["images_per_s_2_threads"], t["speedup"],
          t["cpu_per_wall_2_threads"], t["python_share"]] for t in results["threads"]],
        title=f"thread scaling, wall time ({results['cores_available']} cores available); Python share: CPU a "
              "spinning Python thread gets meanwhile (> 0.5: GIL released)"))
    ratio = results["fused_ratio_simplejpeg_vs_pillow"]
    verdict = "simplejpeg not installed" if ratio is None else f"simplejpeg / pillow on the fused path = {ratio:.2f}x"
    lines += ["", f"{verdict}; chosen: {results['chosen_backend']} (switch above {SWITCH_RATIO:.2f}x); "
                  f"library default: {results['library_default']}"]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.decode_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=Path, help="directory of JPEGs or of .tar shards (default: synthetic)")
    parser.add_argument("--n", type=int, default=200, help="number of images (default 200)")
    parser.add_argument("--size", default="500x375", help="WIDTHxHEIGHT of synthetic images (default 500x375)")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality of synthetic images (default 90)")
    parser.add_argument("--scale", type=int, choices=(2, 4, 8), default=2, help="reduced decode scale 1/N (default 2)")
    parser.add_argument("--repeat", type=int, default=3, help="passes per case, best kept (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic images")
    add_output_args(parser, plot="a bar chart of images/s as PNG")
    args = parser.parse_args(argv)
    if args.n < 1 or args.repeat < 1:
        parser.error(f"--n and --repeat must be >= 1 (got {args.n}, {args.repeat})")
    try:
        args.width, args.height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size must be WIDTHxHEIGHT, e.g. 500x375 (got {args.size!r})")
    if args.width < 1 or args.height < 1:
        parser.error(f"--size must be positive (got {args.size!r})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.plot:
            require_plot()
        if args.images is None:
            images = synthetic_jpegs(args.n, args.width, args.height, args.quality, args.seed)
        else:
            images = load_jpegs(args.images, args.n)
        results = run(images, repeat=args.repeat, scale=args.scale)
        if args.plot:
            bar_plot(args.plot, [f"{r['operation']} [{r['backend']}]" for r in results["cases"]],
                     [r["images_per_s"] for r in results["cases"]], ylabel="images/s (one core)", title=TOOL)
    except ToolError as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    if args.json is not None:
        write_json(args.json, report_document(TOOL, results, sys.argv if argv is None else list(argv)))
        if args.json != "-":
            print(render(results))
    else:
        print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
