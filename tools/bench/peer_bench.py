"""Our loader against the stock torch DataLoader on the same JPEG bytes, interleaved rounds (issues 15, 20).

    python -m tools.bench.peer_bench [--images 2000] [--photos mixed,500x375 | --raw DIR] [--workers 2]
        [--batch-size 64] [--rounds 9] [--batches N]
        [--rows stock-uint8,stock-float32,ours-fused,ours-pil,ours-pil-process]
        [--ceiling-images 1000] [--seed 0] [--smoke] [--json [PATH]] [--plot PATH]

Same bytes: each photo set is sharded once by ``dataprep shard`` WITHOUT ``--resize-short``,
so the shards hold the original JPEG bytes. EVERY row reads those bytes from the shards
through our index (``ShardDataset(fields=(image,))``): the stock rows too, so the read path
is the same for all and only the loader and the decode/transform differ. Photo sets
(``--photos``, both by default, side by side in one run; ``--images`` photos each, made in a
temporary directory by ``tools.common.synthetic``), or ``--raw DIR``, a tree of your own:

- ``mixed``: ``dataprep.synthetic``'s ImageNet-like size mix (80% about 500x375, 10%
  1024x768, 10% 320x240), the photos this benchmark always used;
- ``500x375``: every photo about 500x375, the same content and JPEG qualities (issue 20's
  benchmark). The fused row's lead is smaller here: on the 1024x768 tenth of ``mixed`` the
  stock transform decodes 4x the pixels at full scale, the fused one a region at 1/2 scale
  (tools/RESULTS.md §15).

Same work: RandomResizedCrop(224) (scale 0.08-1, ratio 3/4-4/3, torchvision's 10 tries) +
horizontal flip (p 0.5), bilinear, collated to batches of ``--batch-size``, shuffled. The
rows (``ROWS``):

- ``stock-uint8``: ``torch.utils.data.DataLoader``, process workers, a user's PIL
  transform (``PilCrop``: full ``Image.open``/``convert("RGB")`` decode, ``resize(box=)``,
  flip), uint8 [3, 224, 224] as torchvision's ``PILToTensor``. The reference (ratio 1.00).
- ``stock-float32``: the same, then ``ToTensor`` + ``Normalize`` as torchvision-style
  scripts do (written with torch): float32 [3, 224, 224].
- ``ours-fused``: ``loaders.DataLoader``, thread workers, ``RandomResizedCropDecode``
  (crop drawn from the header; only the JPEG rows and columns the resize reads are
  decoded, at the smallest DCT scale covering 224: ``loaders.read.region``): uint8 [224, 224, 3].
- ``ours-pil``: ``loaders.DataLoader(worker_type="auto")`` with the very ``PilCrop`` of
  ``stock-uint8`` (loader against loader on identical per-sample work; the workers column
  says what "auto" chose).
- ``ours-pil-process``: the same with ``worker_type="process"`` (the drop-in's promise for
  a user's own PIL transform: never slower than stock).

Every round runs each photo set's rows for one epoch each (at most ``--batches`` batches),
in an order rotated by one row per round (round r starts at row r mod n). Per photo set and
row: the median over rounds of images/s after each epoch's first batch, its ratio to
``stock-uint8``, the median over rounds of the ratio within each round (the rows of a round
run minutes apart at most, so a slow spell of a shared machine cancels out), its share of
the ceiling, and CPU ms per image over whole epochs (start-up included): ``getrusage`` of
this process (thread workers count here) and of its reaped children (workers are not
persistent, so each epoch's are joined before the reading). The ceiling: one core's rate of
the full PIL decode + crop + resize + flip (``PilCrop``, uint8) on ``--ceiling-images``
images held in RAM, measured in the same run (best of 3 passes of CPU time), times the cores
used (min(workers, cores available), at least 1). The fused row decodes less (DCT scaling),
so it may pass 100 % of this ceiling; its own one-core rate is reported beside it.

Do not trust a run made next to other jobs: the rows share the cores.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dataprep.errors import DataprepError
from loaders.errors import LoaderError
from loaders.read.topology import cpus_available
from tools.bench.peer_run import (IMAGENET_MEAN, IMAGENET_STD, OURS_FUSED, OURS_PIL, OURS_PIL_PROCESS, OUTPUT_SIZE,
                             REFERENCE, ROW_NOTES, ROWS, STOCK_FLOAT32, STOCK_UINT8, EpochRun, PilCrop, describe_data,
                             make_loader, measure_ceiling, round_orders, run_epoch, sample_bytes, worker_label)
from tools.common.report import ToolError, add_output_args, bar_plot, check_int, emit, format_table, require_plot
from tools.common.synthetic import MIXED, PHOTO_KINDS, UNIFORM

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "MIXED", "OURS_FUSED", "OURS_PIL", "OURS_PIL_PROCESS", "PHOTO_KINDS",
           "RAW", "REFERENCE", "ROWS", "STOCK_FLOAT32", "STOCK_UINT8", "UNIFORM", "BenchConfig", "EpochRun",
           "PeerReport", "PhotoSet", "PilCrop", "RowResult", "format_report", "format_run", "main", "measure_ceiling",
           "photo_set", "round_orders", "run_bench", "run_photos"]

TOOL = "peer_bench"
RAW = "raw"  # the photo set of --raw DIR
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
class PhotoSet:
    """One photo set: its ``name`` (``PHOTO_KINDS`` or ``RAW``), shards, image field, the description of the
    ceiling's sample (``data``) and the ceiling's one-core ms per image (PIL transform, fused transform)."""

    name: str
    shard_dir: Path
    image_field: str
    data: dict[str, Any]
    pil_ms_per_image: float
    fused_ms_per_image: float


@dataclass(frozen=True)
class PeerReport:
    """One photo set's figures: per-row results (in ``config.rows`` order), round orders, notes."""

    config: BenchConfig
    photos: PhotoSet
    results: tuple[RowResult, ...]
    orders: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()

    @property
    def ceiling_images_per_s(self) -> float:
        pil_ms = self.photos.pil_ms_per_image
        return self.config.cores_used * 1e3 / pil_ms if pil_ms > 0 else math.inf

    def to_json(self) -> dict[str, Any]:
        p = self.photos
        return {"config": {**asdict(self.config), "rows": list(self.config.rows), "cores_used": self.config.cores_used},
                "photos": p.name, "photos_what": PHOTO_KINDS.get(p.name, "the --raw tree"),
                "shard_dir": str(p.shard_dir), "data": p.data, "reference": REFERENCE,
                "ceiling": {"images_per_s": self.ceiling_images_per_s, "cores": self.config.cores_used,
                            "pil_ms_per_image_one_core": p.pil_ms_per_image,
                            "fused_ms_per_image_one_core": p.fused_ms_per_image},
                "rows": [r.to_json() for r in self.results], "round_orders": [list(o) for o in self.orders],
                "notes": list(self.notes)}


# ---------------------------------------------------------------- measuring


def photo_set(name: str, shard_dir: Path, ceiling_images: int) -> PhotoSet:
    """The photo set ``name`` in ``shard_dir``, its ceiling measured on ``ceiling_images`` of its images."""
    from tools.common.shard_images import image_field_of

    image_field = image_field_of(shard_dir)
    datas = sample_bytes(shard_dir, image_field, ceiling_images)
    pil_ms, fused_ms = measure_ceiling(datas, image_field)
    return PhotoSet(name=name, shard_dir=shard_dir, image_field=image_field,
                    data=describe_data(shard_dir, image_field, datas), pil_ms_per_image=pil_ms,
                    fused_ms_per_image=fused_ms)


def run_bench(shard_dir: str | os.PathLike[str], config: BenchConfig, *, log: Callable[[str], object] | None = None,
              photos: str = RAW) -> PeerReport:
    """Measure ``config.rows`` on the shards in ``shard_dir`` (tar shards of JPEG bytes, not resized)."""
    return run_photos({photos: Path(shard_dir)}, config, log=log)[photos]


def run_photos(shard_dirs: Mapping[str, Path], config: BenchConfig, *,
               log: Callable[[str], object] | None = None) -> dict[str, PeerReport]:
    """Measure ``config.rows`` on each photo set's shards, the sets interleaved round by round: {set: its report}."""
    sets = [photo_set(name, Path(path), config.ceiling_images) for name, path in shard_dirs.items()]
    orders = round_orders(config.rows, config.rounds)
    epochs: dict[str, dict[str, list[EpochRun]]] = {s.name: {row: [] for row in config.rows} for s in sets}
    labels: dict[str, str] = {}
    for r, order in enumerate(orders):
        for photos in sets:
            for row in order:
                loader = make_loader(row, photos.shard_dir, photos.image_field, workers=config.workers,
                                     batch_size=config.batch_size, seed=config.seed + r)
                epochs[photos.name][row].append(run_epoch(loader, config.batches, r))
                labels[row] = worker_label(row, loader, config.workers)
                del loader
                if log is not None:
                    where = f"{photos.name} " if len(sets) > 1 else ""
                    log(f"round {r + 1}/{config.rounds} {where}{row}: "
                        f"{epochs[photos.name][row][-1].images_per_s:.0f} img/s")
    return {s.name: _report(config, s, epochs[s.name], labels, orders) for s in sets}


def _report(config: BenchConfig, photos: PhotoSet, epochs: dict[str, list[EpochRun]], labels: dict[str, str],
            orders: list[tuple[str, ...]]) -> PeerReport:
    ceiling = config.cores_used * 1e3 / photos.pil_ms_per_image
    base = statistics.median(e.images_per_s for e in epochs[REFERENCE]) if REFERENCE in epochs else None
    results = []
    for row in config.rows:
        rate = statistics.median(e.images_per_s for e in epochs[row])
        paired = ([e.images_per_s / ref.images_per_s for e, ref in zip(epochs[row], epochs[REFERENCE])
                   if ref.images_per_s > 0] if REFERENCE in epochs else [])
        results.append(RowResult(row, labels[row], tuple(epochs[row]), ratio=rate / base if base else None,
                                 ceiling_pct=100 * rate / ceiling,
                                 round_ratio=statistics.median(paired) if paired else None))
    notes = []
    if any(e.samples == 0 for row in epochs.values() for e in row):
        notes.append("some epochs yielded no batch: too few images for the batch size")
    if cpus_available() < config.workers + 1:
        notes.append(f"{config.workers} workers + the main process on {cpus_available()} cores: they share the cores")
    return PeerReport(config=config, photos=photos, results=tuple(results), orders=tuple(orders), notes=tuple(notes))


# ---------------------------------------------------------------- output and command line


def format_report(report: PeerReport) -> str:
    c, d = report.config, report.photos.data
    epoch = f"at most {c.batches} batches" if c.batches else "whole epochs"
    title = (f"photos {report.photos.name}: {d['images']:,} JPEGs ({d['mean_kb']:.0f} KB, {d['mean_kpx']:.0f} kpx "
             f"mean of {d['sampled']}), RandomResizedCrop {OUTPUT_SIZE} + flip, batches of {c.batch_size}, "
             f"{c.workers} workers, {c.rounds} interleaved round{'s' if c.rounds != 1 else ''} ({epoch})")
    rows = [(r.row, r.worker_type, r.images_per_s, None if r.ratio is None else f"{r.ratio:.2f}",
             None if r.round_ratio is None else f"{r.round_ratio:.2f}", r.ceiling_pct, r.cpu_ms_per_image,
             min(e.images_per_s for e in r.epochs), max(e.images_per_s for e in r.epochs)) for r in report.results]
    headers = ("row", "workers", "img/s (median)", f"x {REFERENCE}", "x per round", "% ceiling", "CPU ms/img",
               "min img/s", "max img/s")
    lines = [format_table(headers, rows, title=title), ""]
    lines += [f"ceiling: {report.ceiling_images_per_s:.0f} img/s = {c.cores_used} core(s) x one core's PIL decode + "
              f"crop ({report.photos.pil_ms_per_image:.2f} ms/img, bytes in RAM); fused RandomResizedCropDecode on "
              f"one core: {report.photos.fused_ms_per_image:.2f} ms/img"]
    return "\n".join(lines + [f"note: {n}" for n in report.notes])


def format_run(reports: Mapping[str, PeerReport]) -> str:
    """Every photo set's table, what the rows and sets are, and (several sets) the ratios side by side."""
    first = next(iter(reports.values()))
    parts = [format_report(r) for r in reports.values()]
    notes = [f"{row}: {ROW_NOTES[row]}" for row in first.config.rows]
    notes += [f"photos {name}: {PHOTO_KINDS.get(name, 'the --raw tree')}" for name in reports]
    parts.append("\n".join(notes))
    if len(reports) > 1 and REFERENCE in first.config.rows:
        ratios = [(row, *(_ratios(r.results[k]) for r in reports.values())) for k, row in enumerate(first.config.rows)]
        parts.append(format_table(("row", *(f"x {REFERENCE}, {name}" for name in reports)), ratios,
                                  title=f"side by side: median img/s / {REFERENCE}'s (median of per-round ratios)"))
    return "\n\n".join(parts)


def _ratios(result: RowResult) -> str:
    return f"{result.ratio:.2f} ({result.round_ratio:.2f})" if result.ratio and result.round_ratio else "-"


def _rows(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.peer_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, help="photos to make per photo set (default 2000; --smoke 40)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--photos", type=_rows, default=(MIXED, UNIFORM),
                        help=f"photo sets to make, comma-separated, of {', '.join(PHOTO_KINDS)} (default both)")
    source.add_argument("--raw", metavar="DIR", help="an image-folder tree of JPEGs to use instead of made photos")
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
    add_output_args(parser, plot="a bar chart of img/s per photo set and row as PNG")
    return parser


def _setting(args: argparse.Namespace, name: str) -> int:
    value = getattr(args, name)
    return (SMOKE if args.smoke else DEFAULTS)[name] if value is None else value


def _prepare_shards(args: argparse.Namespace, images: int, root: Path) -> dict[str, Path]:
    """{photo set: its shard directory}: ``--raw`` or each ``--photos`` set made under ``root``, sharded
    without resizing."""
    from tools.common.synthetic import make_raw_images, make_uniform_images, shard

    if args.raw is not None:
        raw = Path(args.raw)
        if not raw.is_dir():
            raise ToolError(f"--raw {raw}: not a directory (expected an image-folder tree of JPEGs)")
        return {RAW: shard(raw, root / "shards")}
    unknown = [p for p in args.photos if p not in PHOTO_KINDS]
    if unknown or not args.photos or len(set(args.photos)) != len(args.photos):
        raise ToolError(f"'photos' must name some of {', '.join(PHOTO_KINDS)}, each once (got {','.join(args.photos)})")
    shards = {}
    for k, name in enumerate(args.photos):
        if name == MIXED:
            made = _exactly(make_raw_images(root / f"raw-{k}", images + SPECIALS_PER_CHUNK * (cpus_available() + 1)),
                            images)
        else:
            made = make_uniform_images(root / f"raw-{k}", images)
        shards[name] = shard(made, root / f"shards-{k}")
    return shards


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
            reports = run_photos(_prepare_shards(args, images, Path(tmp)), config, log=log)
    except (ToolError, LoaderError, DataprepError) as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    emit(TOOL, format_run(reports), {"photos": {name: r.to_json() for name, r in reports.items()}}, args.json, argv)
    if args.plot:
        bars = [(f"{name} {r.row}", r.images_per_s) for name, report in reports.items() for r in report.results]
        bar_plot(args.plot, [b[0] for b in bars], [b[1] for b in bars], ylabel="images/s (median)",
                 title="loaders vs the stock DataLoader on the same JPEG bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
