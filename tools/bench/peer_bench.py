"""Our loader against the stock torch DataLoader on the same JPEG bytes, interleaved rounds (issue 15).

    python -m tools.bench.peer_bench [--images 2000 | --raw DIR] [--workers 2] [--batch-size 64]
        [--rounds 9] [--batches N] [--rows stock-uint8,stock-float32,ours-fused,ours-pil]
        [--ceiling-images 1000] [--seed 0] [--smoke] [--json [PATH]] [--plot PATH]

Same bytes: the raw tree (``--raw DIR``, or ``--images`` photo-like JPEGs made by
``dataprep.synthetic`` in a temporary directory) is sharded once by ``dataprep shard``
WITHOUT ``--resize-short``, so the shards hold the original JPEG bytes. EVERY row reads
those bytes from the shards through our index (``ShardDataset(fields=(image,))``): the
stock rows too, so the read path is the same for all and only the loader and the
decode/transform differ. Same work: RandomResizedCrop(224) (scale 0.08-1, ratio 3/4-4/3,
torchvision's 10 tries) + horizontal flip (p 0.5), bilinear, collated to batches of
``--batch-size``, shuffled. The rows (``ROWS``):

- ``stock-uint8``: ``torch.utils.data.DataLoader``, process workers, a user's PIL
  transform (``PilCrop``: full ``Image.open``/``convert("RGB")`` decode, ``resize(box=)``,
  flip), uint8 [3, 224, 224] as torchvision's ``PILToTensor``. The reference (ratio 1.00).
- ``stock-float32``: the same, then ``ToTensor`` + ``Normalize`` as torchvision-style
  scripts do (written with torch): float32 [3, 224, 224].
- ``ours-fused``: ``loaders.DataLoader``, thread workers, ``RandomResizedCropDecode``
  (crop drawn from the header; only the JPEG rows and columns the resize reads are
  decoded, at the smallest DCT scale covering 224: ``loaders.region``): uint8 [224, 224, 3].
- ``ours-pil``: ``loaders.DataLoader(worker_type="auto")`` with the very ``PilCrop`` of
  ``stock-uint8`` (loader against loader on identical per-sample work).

Every round runs each row for one epoch (at most ``--batches`` batches), in an order
rotated by one row per round (round r starts at row r mod n). Per row: the median over
rounds of images/s after each epoch's first batch, its ratio to ``stock-uint8``, the
median over rounds of the ratio within each round (the rows of a round run minutes
apart at most, so a slow spell of a shared machine cancels out), its
share of the ceiling, and CPU ms per image over whole epochs (start-up included):
``getrusage`` of this process (thread workers count here) and of its reaped children
(workers are not persistent, so each epoch's are joined before the reading). The
ceiling: one core's rate of the full PIL decode + crop + resize + flip (``PilCrop``,
uint8) on ``--ceiling-images`` images held in RAM, measured in the same run (best of 3
passes of CPU time), times the cores used (min(workers, cores available), at least 1). The fused
row decodes less (DCT scaling), so it may pass 100 % of this ceiling; its own one-core
rate is reported beside it.

Do not trust a run made next to other jobs: the rows share the cores.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dataprep.errors import DataprepError
from loaders.errors import LoaderError
from loaders.read.topology import cpus_available
from tools.bench.peer_run import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    OURS_FUSED,
    OURS_PIL,
    OUTPUT_SIZE,
    REFERENCE,
    ROW_NOTES,
    ROWS,
    STOCK_FLOAT32,
    STOCK_UINT8,
    EpochRun,
    PilCrop,
    describe_data,
    make_loader,
    measure_ceiling,
    round_orders,
    run_epoch,
    sample_bytes,
)
from tools.common.report import ToolError, add_output_args, bar_plot, check_int, emit, format_table, require_plot

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "OURS_FUSED", "OURS_PIL", "REFERENCE", "ROWS", "STOCK_FLOAT32",
           "STOCK_UINT8", "BenchConfig", "EpochRun", "PeerReport", "PilCrop", "RowResult", "format_report", "main",
           "measure_ceiling", "round_orders", "run_bench"]

TOOL = "peer_bench"
SPECIALS_PER_CHUNK = 12  # dataprep.synthetic's special variants per tree, dropped by make_raw_images
SMOKE = {"images": 40, "rounds": 1, "batch_size": 8, "ceiling_images": 8}
DEFAULTS = {"images": 2000, "rounds": 9, "batch_size": 64, "ceiling_images": 1000}


# ---------------------------------------------------------------- configuration and results


@dataclass(frozen=True)
class BenchConfig:
    """One run: ``rows`` (of ``ROWS``) with ``workers`` workers, batches of ``batch_size``,
    ``rounds`` interleaved rounds of one epoch (at most ``batches`` batches) per row."""

    rows: tuple[str, ...] = ROWS
    workers: int = 2
    batch_size: int = 64
    rounds: int = 9
    batches: int | None = None
    ceiling_images: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("workers", self.workers, 0)
        check_int("batch_size", self.batch_size, 1)
        check_int("rounds", self.rounds, 1)
        check_int("ceiling_images", self.ceiling_images, 1)
        check_int("seed", self.seed, 0)
        if self.batches is not None:
            check_int("batches", self.batches, 1)
        if not self.rows:
            raise ToolError(f"'rows' must name at least one of {', '.join(ROWS)} (got none)")
        unknown = [r for r in self.rows if r not in ROWS]
        if unknown:
            raise ToolError(f"unknown row(s) {', '.join(map(repr, unknown))}: expected some of {', '.join(ROWS)}")
        if len(set(self.rows)) != len(self.rows):
            raise ToolError(f"'rows' names a row twice (got {', '.join(self.rows)})")

    @property
    def cores_used(self) -> int:
        return max(1, min(self.workers, cpus_available()))


@dataclass(frozen=True)
class RowResult:
    """A row's epochs over all rounds and its figures (None if not run): ``ratio`` of its median
    img/s to ``REFERENCE``'s, ``round_ratio`` the median over rounds of the ratio within each
    round (paired: a slow spell of a shared machine lowers both rows of a round), ``ceiling_pct``."""

    row: str
    worker_type: str
    epochs: tuple[EpochRun, ...]
    ratio: float | None = None
    ceiling_pct: float | None = None
    round_ratio: float | None = None

    @property
    def images_per_s(self) -> float:
        return statistics.median(e.images_per_s for e in self.epochs)

    @property
    def cpu_ms_per_image(self) -> float:
        samples = sum(e.samples for e in self.epochs)
        return 1e3 * sum(e.cpu_seconds for e in self.epochs) / samples if samples else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"row": self.row, "what": ROW_NOTES[self.row], "worker_type": self.worker_type,
                "images_per_s": self.images_per_s, "images_per_s_min": min(e.images_per_s for e in self.epochs),
                "images_per_s_max": max(e.images_per_s for e in self.epochs), "ratio": self.ratio,
                "round_ratio": self.round_ratio,
                "ceiling_pct": self.ceiling_pct, "cpu_ms_per_image": self.cpu_ms_per_image,
                "epochs": [asdict(e) for e in self.epochs]}


@dataclass(frozen=True)
class PeerReport:
    """The whole run: data description, ceiling, per-row results (in ``config.rows`` order), round orders."""

    config: BenchConfig
    data: dict[str, Any]
    pil_ms_per_image: float
    fused_ms_per_image: float
    results: tuple[RowResult, ...]
    orders: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()

    @property
    def ceiling_images_per_s(self) -> float:
        return self.config.cores_used * 1e3 / self.pil_ms_per_image if self.pil_ms_per_image > 0 else math.inf

    def to_json(self) -> dict[str, Any]:
        return {"config": {**asdict(self.config), "rows": list(self.config.rows), "cores_used": self.config.cores_used},
                "data": self.data, "reference": REFERENCE,
                "ceiling": {"images_per_s": self.ceiling_images_per_s, "cores": self.config.cores_used,
                            "pil_ms_per_image_one_core": self.pil_ms_per_image,
                            "fused_ms_per_image_one_core": self.fused_ms_per_image},
                "rows": [r.to_json() for r in self.results], "round_orders": [list(o) for o in self.orders],
                "notes": list(self.notes)}


# ---------------------------------------------------------------- measuring


def run_bench(shard_dir: str | os.PathLike[str], config: BenchConfig, *, log: Any = None) -> PeerReport:
    """Measure ``config.rows`` on the shards in ``shard_dir`` (tar shards of JPEG bytes, not resized)."""
    from tools.common.shard_images import image_field_of

    shard_dir = Path(shard_dir)
    image_field = image_field_of(shard_dir)
    datas = sample_bytes(shard_dir, image_field, config.ceiling_images)
    data = describe_data(shard_dir, image_field, datas)
    pil_ms, fused_ms = measure_ceiling(datas, image_field)
    orders = round_orders(config.rows, config.rounds)
    epochs: dict[str, list[EpochRun]] = {row: [] for row in config.rows}
    worker_types: dict[str, str] = {}
    for r, order in enumerate(orders):
        for row in order:
            loader, worker_types[row] = make_loader(row, shard_dir, image_field, workers=config.workers,
                                                    batch_size=config.batch_size, seed=config.seed + r)
            epochs[row].append(run_epoch(loader, config.batches, r))
            del loader
            if log is not None:
                log(f"round {r + 1}/{config.rounds} {row}: {epochs[row][-1].images_per_s:.0f} img/s")
    ceiling = config.cores_used * 1e3 / pil_ms
    base = statistics.median(e.images_per_s for e in epochs[REFERENCE]) if REFERENCE in epochs else None
    results = []
    for row in config.rows:
        rate = statistics.median(e.images_per_s for e in epochs[row])
        paired = ([e.images_per_s / ref.images_per_s for e, ref in zip(epochs[row], epochs[REFERENCE])
                   if ref.images_per_s > 0] if REFERENCE in epochs else [])
        results.append(RowResult(row, worker_types[row], tuple(epochs[row]), ratio=rate / base if base else None,
                                 ceiling_pct=100 * rate / ceiling,
                                 round_ratio=statistics.median(paired) if paired else None))
    notes = []
    if any(e.samples == 0 for row in epochs.values() for e in row):
        notes.append("some epochs yielded no batch: too few images for the batch size")
    if cpus_available() < config.workers + 1:
        notes.append(f"{config.workers} workers + the main process on {cpus_available()} cores: they share the cores")
    return PeerReport(config=config, data=data, pil_ms_per_image=pil_ms, fused_ms_per_image=fused_ms,
                      results=tuple(results), orders=tuple(orders), notes=tuple(notes))


# ---------------------------------------------------------------- output and command line


def format_report(report: PeerReport) -> str:
    c, d = report.config, report.data
    epoch = f"at most {c.batches} batches" if c.batches else "whole epochs"
    title = (f"{d['images']:,} JPEGs ({d['mean_kb']:.0f} KB, {d['mean_kpx']:.0f} kpx mean of {d['sampled']}), "
             f"RandomResizedCrop {OUTPUT_SIZE} + flip, batches of {c.batch_size}, {c.workers} workers, "
             f"{c.rounds} interleaved round{'s' if c.rounds != 1 else ''} ({epoch})")
    rows = [(r.row, r.worker_type, r.images_per_s, None if r.ratio is None else f"{r.ratio:.2f}",
             None if r.round_ratio is None else f"{r.round_ratio:.2f}", r.ceiling_pct, r.cpu_ms_per_image,
             min(e.images_per_s for e in r.epochs), max(e.images_per_s for e in r.epochs)) for r in report.results]
    headers = ("row", "workers", "img/s (median)", f"x {REFERENCE}", "x per round", "% ceiling", "CPU ms/img",
               "min img/s", "max img/s")
    lines = [format_table(headers, rows, title=title), ""]
    lines += [f"{r.row}: {ROW_NOTES[r.row]}" for r in report.results]
    lines += ["", f"ceiling: {report.ceiling_images_per_s:.0f} img/s = {c.cores_used} core(s) x one core's PIL "
              f"decode + crop ({report.pil_ms_per_image:.2f} ms/img, bytes in RAM); fused RandomResizedCropDecode on "
              "one core: "
              f"{report.fused_ms_per_image:.2f} ms/img"]
    return "\n".join(lines + [f"note: {n}" for n in report.notes])


def _rows(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.peer_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, help="synthetic JPEGs to make when no --raw (default 2000; --smoke 40)")
    parser.add_argument("--raw", metavar="DIR", help="an image-folder tree of JPEGs to use instead of synthetic ones")
    parser.add_argument("--workers", type=int, default=2, help="workers of every loader (default 2)")
    parser.add_argument("--batch-size", type=int, help="images per batch (default 64; --smoke 8)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 9; --smoke 1)")
    parser.add_argument("--batches", type=int, help="at most this many batches per epoch (default: whole epochs)")
    parser.add_argument("--rows", type=_rows, default=ROWS,
                        help=f"rows to run, comma-separated (default {','.join(ROWS)})")
    parser.add_argument("--ceiling-images", type=int,
                        help="images timed for the ceiling, spread over the dataset (default 1000; --smoke 8)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order and the crops (default 0)")
    parser.add_argument("--smoke", action="store_true", help="tiny run of seconds (40 images, 1 round, batches of 8)")
    add_output_args(parser, plot="a bar chart of img/s per row as PNG")
    return parser


def _setting(args: argparse.Namespace, name: str) -> int:
    value = getattr(args, name)
    return (SMOKE if args.smoke else DEFAULTS)[name] if value is None else value


def _prepare_shards(args: argparse.Namespace, images: int, root: Path) -> Path:
    """Shard ``--raw`` (or ``images`` synthetic JPEGs made under ``root``) without resizing: the shard directory."""
    from tools.common.synthetic import make_raw_images, shard

    if args.raw is not None:
        raw = Path(args.raw)
        if not raw.is_dir():
            raise ToolError(f"--raw {raw}: not a directory (expected an image-folder tree of JPEGs)")
    else:
        raw = _exactly(make_raw_images(root / "raw", images + SPECIALS_PER_CHUNK * (cpus_available() + 1)), images)
    return shard(raw, root / "shards")


def _exactly(raw: Path, images: int) -> Path:
    """Keep the first ``images`` JPEGs of ``raw`` (sorted paths): ``make_raw_images`` drops its
    special variants (PNG, grey, CMYK...), so it was asked for more."""
    files = sorted(p for p in raw.rglob("*.jpg") if p.is_file())
    if len(files) < images:
        raise ToolError(f"{raw}: made {len(files)} colour JPEGs, expected at least {images}")
    for path in files[images:]:
        path.unlink()
    return raw


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.plot:
            require_plot()
        images = check_int("images", _setting(args, "images"), 1)
        config = BenchConfig(rows=args.rows, workers=args.workers, batch_size=_setting(args, "batch_size"),
                             rounds=_setting(args, "rounds"), batches=args.batches,
                             ceiling_images=_setting(args, "ceiling_images"), seed=args.seed)
        log = (lambda text: print(text, file=sys.stderr)) if sys.stderr.isatty() else None
        with tempfile.TemporaryDirectory(prefix="peer-bench-") as tmp:
            shard_dir = _prepare_shards(args, images, Path(tmp))
            report = run_bench(shard_dir, config, log=log)
    except (ToolError, LoaderError, DataprepError) as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    emit(TOOL, format_report(report), report.to_json(), args.json, argv)
    if args.plot:
        bar_plot(args.plot, [r.row for r in report.results], [r.images_per_s for r in report.results],
                 ylabel="images/s (median)", title="loaders vs the stock DataLoader on the same JPEG bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
