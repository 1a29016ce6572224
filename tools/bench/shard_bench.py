"""``dataprep shard`` throughput against this machine's single-core cleaning rate x cores.

    python -m tools.bench.shard_bench [--images 2000] [--raw DIR] [--workers N] [--repeat 1]
                                [--json [PATH]] [--record]

Side by side in one run, over the same raw images (a synthetic image-folder tree of
``--images`` photos made with ``dataprep.synthetic``, or ``--raw DIR``):

1. single core: the cleaning of every planned input (``dataprep.clean.images.clean_image``:
   full decode, RGB conversion, re-encode where needed), in this process, timed in CPU
   seconds (so other load on a shared machine does not flatter the ideal below);
2. ``dataprep shard RAW OUT --workers N`` (N = cores available) into a fresh OUT in a
   temporary directory, timed in wall seconds, in this process (interpreter start-up
   excluded; planning, cleaning, writing, hashing and the manifest included);
3. the same with ``--workers 1`` (everything on one core, no threads or processes);
4. the write loop alone: up to ``WRITE_LOOP_SAMPLES`` samples cleaned beforehand (not
   timed), then written into tar shards by one ``TarShardWriter`` (tar framing, sha256,
   page-cache writes, fsync), timed in CPU seconds of its thread and in wall seconds (the
   wall time includes waiting for the disk). One write loop serves all cleaning threads,
   so its CPU rate divided by the single-core cleaning rate is about the number of cores
   beyond which ``dataprep shard`` is bound by its writer, not by cleaning; its wall rate
   is what this disk allowed.

Before both, every raw file is read once so the page cache is warm (the fraction
resident is reported): the figure is about CPU, not the disk. The result is
``ratio = shard images/s / (single-core images/s x min(N, cores))``, against the
target ``TARGET_RATIO``. Two figures split the gap: ``scaling`` (``--workers N`` against
``--workers 1`` x min(N, cores): how well the parallel run uses the cores) and
``serial share`` (single-core cleaning rate against ``--workers 1``: the work a run
does besides cleaning, such as planning, writing and hashing the shards). ``--record``
appends a dated entry, with the machine, to ``tools/RESULTS.md`` and says so. The timed
runs are ``tools.bench.shard_timing``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dataprep.errors import DataprepError
from dataprep.formats.durable import atomic_write_bytes
from dataprep.synthetic import SyntheticSpec, make_dataset
from loaders.read.topology import cpus_available
from tools.bench.shard_timing import shard_config, time_shard, time_single_core, time_write_loop
from tools.common.pagecache import files_under, warm_page_cache
from tools.common.report import ToolError, add_output_args, check_int, emit, format_table, machine_info

TOOL = "shard_bench"
TARGET_RATIO = 0.90
RESULTS_PATH = Path(__file__).resolve().parents[1] / "RESULTS.md"
_RESULTS_HEADER = "# Measured results\n\nEntries appended by `python -m tools.<folder>.<name> --record`; newest last.\n"


@dataclass(frozen=True)
class ShardBenchReport:
    """Both measurements over ``images`` raw inputs of ``input_bytes`` bytes (files of the images' records).

    single_core_cpu_s / single_core_wall_s: cleaning every input in one process; shard_*:
    the fastest of ``repeat`` ``dataprep shard --workers N`` runs (CPU: this process and
    its children; others_cpu_s: every other process on the machine meanwhile, None if
    unknown); one_worker_wall_s: the fastest ``--workers 1`` run; resident_after_warmup:
    fraction of raw pages cached (None: unknown).
    """

    raw_dir: str
    generated: bool
    images: int
    input_bytes: int
    cores: int
    workers: int
    repeat: int
    single_core_cpu_s: float
    single_core_wall_s: float
    shard_wall_s: float
    shard_cpu_s: float
    others_cpu_s: float | None
    samples_kept: int
    rejected: int
    resident_after_warmup: float | None
    one_worker_wall_s: float
    write_loop_samples: int
    write_loop_bytes: int
    write_loop_cpu_s: float
    write_loop_wall_s: float

    @property
    def single_core_images_per_s(self) -> float:
        return self.images / self.single_core_cpu_s

    @property
    def shard_images_per_s(self) -> float:
        return self.images / self.shard_wall_s

    @property
    def shard_input_mb_s(self) -> float:
        return self.input_bytes / 1e6 / self.shard_wall_s

    @property
    def ideal_images_per_s(self) -> float:
        return self.single_core_images_per_s * min(self.workers, self.cores)

    @property
    def ratio(self) -> float:
        return self.shard_images_per_s / self.ideal_images_per_s

    @property
    def one_worker_images_per_s(self) -> float:
        return self.images / self.one_worker_wall_s

    @property
    def scaling(self) -> float:
        """``--workers N`` images/s over ``--workers 1`` images/s x min(N, cores)."""
        return self.shard_images_per_s / (self.one_worker_images_per_s * min(self.workers, self.cores))

    @property
    def serial_share(self) -> float:
        """``--workers 1`` images/s over the single-core cleaning rate: 1 - the share of other work."""
        return self.one_worker_images_per_s / self.single_core_images_per_s

    @property
    def write_loop_images_per_s(self) -> float:
        """Samples per CPU second of the write loop's thread."""
        return self.write_loop_samples / self.write_loop_cpu_s

    @property
    def write_loop_disk_mb_s(self) -> float:
        """Shard MB per wall second of the write loop, final fsync included."""
        return self.write_loop_bytes / 1e6 / self.write_loop_wall_s

    @property
    def writer_bound_cores(self) -> float:
        """Cores of cleaning (at the single-core rate) that one write loop's CPU keeps up with."""
        return self.write_loop_images_per_s / self.single_core_images_per_s

    @property
    def meets_target(self) -> bool:
        return self.ratio >= TARGET_RATIO

    @property
    def cores_used(self) -> float:
        """Mean cores the shard run kept busy (its CPU seconds / wall seconds)."""
        return self.shard_cpu_s / self.shard_wall_s

    @property
    def cpu_efficiency(self) -> float:
        """Single-core cleaning CPU / the shard run's CPU: 1 means no CPU spent beyond cleaning."""
        return self.single_core_cpu_s / self.shard_cpu_s if self.shard_cpu_s > 0 else 0.0

    def notes(self) -> list[str]:
        out = ["single-core rate: CPU time of one process; shard rate: wall time of the whole run "
               "(plan, clean, write, hash, manifest; interpreter start-up excluded)."]
        if self.resident_after_warmup is not None and self.resident_after_warmup < 0.99:
            out.append(f"only {self.resident_after_warmup:.0%} of the raw files stayed cached after the warm-up: "
                       "the shard run partly measured the disk.")
        others = None if self.others_cpu_s is None else self.others_cpu_s / self.shard_wall_s
        if others is not None and others > 0.1:
            out.append(f"other processes kept {others:.1f} of {self.cores} cores busy during the shard run: "
                       "that lowers the shard rate, and so the ratio; the CPU efficiency does not depend on it.")
        if self.workers > self.cores:
            out.append(f"{self.workers} workers on {self.cores} cores: the ideal counts {self.cores}.")
        return out

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "single_core_images_per_s": self.single_core_images_per_s,
                "shard_images_per_s": self.shard_images_per_s, "shard_input_mb_s": self.shard_input_mb_s,
                "ideal_images_per_s": self.ideal_images_per_s, "ratio": self.ratio, "target_ratio": TARGET_RATIO,
                "one_worker_images_per_s": self.one_worker_images_per_s, "scaling": self.scaling,
                "serial_share": self.serial_share, "write_loop_images_per_s": self.write_loop_images_per_s,
                "write_loop_disk_mb_s": self.write_loop_disk_mb_s,
                "writer_bound_cores": self.writer_bound_cores,
                "cores_used": self.cores_used, "cpu_efficiency": self.cpu_efficiency,
                "meets_target": self.meets_target, "notes": self.notes()}


@contextlib.contextmanager
def _raw_tree(raw: str | os.PathLike[str] | None, images: int, seed: int) -> Iterator[tuple[Path, Path, bool]]:
    """(RAW, a scratch directory, generated?) for the run; the scratch directory is removed after."""
    with tempfile.TemporaryDirectory(prefix="shard_bench-") as scratch:
        top = Path(scratch)
        if raw is not None:
            if not Path(raw).is_dir():
                raise ToolError(f"--raw {raw}: not a directory")
            yield Path(raw), top, False
            return
        spec = SyntheticSpec(images=images, classes=min(10, images), seed=seed, broken=False, tables=False, text=False)
        make_dataset(top / "raw", spec)
        yield top / "raw" / "images", top, True


def measure_shard(*, images: int = 2000, raw: str | os.PathLike[str] | None = None, workers: int | None = None,
                  repeat: int = 1, seed: int = 0) -> ShardBenchReport:
    """Run both measurements (module docstring); best of ``repeat`` each, alternating.

    Raises ``ToolError`` for bad arguments or a non-image dataset, ``DataprepError`` from the run.
    """
    check_int("images", images, 1)
    check_int("repeat", repeat, 1)
    check_int("seed", seed, 0)
    cores = cpus_available()
    workers = cores if workers is None else check_int("workers", workers, 1)
    with _raw_tree(raw, images, seed) as (raw_dir, scratch, generated):
        files = files_under(raw_dir)
        resident = warm_page_cache(files)
        singles, runs, ones = [], [], []
        config = shard_config(raw_dir, scratch / "unused", workers)
        for r in range(repeat):  # alternate, so a burst of load elsewhere hits all alike
            # Warmed again before each run: some VMs hand idle page cache back to their host.
            singles.append(time_single_core(config, scratch / "plan"))
            warm_page_cache(files)
            runs.append(time_shard(raw_dir, scratch / f"out-{r}", workers))
            warm_page_cache(files)
            ones.append(time_shard(raw_dir, scratch / f"one-{r}", 1))
            warm_page_cache(files)
        written, written_bytes, write_cpu_s, write_wall_s = time_write_loop(config, scratch / "plan",
                                                                            scratch / "write-loop")
    count, input_bytes = singles[0][:2]
    single_cpu, single_wall = min(x[2] for x in singles), min(x[3] for x in singles)
    best = min(runs, key=lambda run: run.wall_s)
    return ShardBenchReport(
        raw_dir=os.fspath(raw_dir), generated=generated, images=count, input_bytes=input_bytes, cores=cores,
        workers=workers, repeat=repeat, single_core_cpu_s=single_cpu, single_core_wall_s=single_wall,
        shard_wall_s=best.wall_s, shard_cpu_s=best.cpu_s, others_cpu_s=best.others_cpu_s,
        samples_kept=best.samples_kept, rejected=best.rejected, resident_after_warmup=resident,
        one_worker_wall_s=min(run.wall_s for run in ones), write_loop_samples=written,
        write_loop_bytes=written_bytes, write_loop_cpu_s=write_cpu_s, write_loop_wall_s=write_wall_s,
    )


def format_report(report: ShardBenchReport) -> str:
    """The table and verdict ``python -m tools.bench.shard_bench`` prints."""
    where = "synthetic image-folder tree" if report.generated else report.raw_dir
    cached = "unknown" if report.resident_after_warmup is None else f"{report.resident_after_warmup:.0%}"
    rows = [
        ("single core: clean_image (CPU time)", report.images, report.single_core_cpu_s,
         report.single_core_images_per_s, report.input_bytes / 1e6 / report.single_core_cpu_s),
        (f"ideal: single core x {min(report.workers, report.cores)}", report.images, None, report.ideal_images_per_s,
         None),
        (f"dataprep shard --workers {report.workers} (wall)", report.images, report.shard_wall_s,
         report.shard_images_per_s, report.shard_input_mb_s),
        ("dataprep shard --workers 1 (wall)", report.images, report.one_worker_wall_s, report.one_worker_images_per_s,
         report.input_bytes / 1e6 / report.one_worker_wall_s),
        ("write loop alone: tar + sha256 (CPU time)", report.write_loop_samples, report.write_loop_cpu_s,
         report.write_loop_images_per_s, None),
    ]
    others = ("" if report.others_cpu_s is None
              else f"; other processes {report.others_cpu_s / report.shard_wall_s:.1f} cores")
    verdict = "meets" if report.meets_target else "BELOW"
    lines = [f"raw: {where}: {report.images:,} inputs, {report.input_bytes / 1e6:.1f} MB; page cache warmed first "
             f"({cached} resident); {report.cores} cores available",
             "", format_table(("run", "images", "seconds", "images/s", "input MB/s"), rows),
             "", f"ratio = shard / ideal = {report.ratio:.0%} ({verdict} the {TARGET_RATIO:.0%} target)",
             f"shard run: {report.shard_cpu_s:.2f} CPU s, {report.cores_used:.2f} cores busy{others}; "
             f"CPU efficiency (cleaning CPU / shard CPU) {report.cpu_efficiency:.0%}",
             f"split: scaling = workers {report.workers} / (workers 1 x {min(report.workers, report.cores)}) = "
             f"{report.scaling:.0%}; serial share = workers 1 / single-core cleaning = {report.serial_share:.0%} "
             f"(the rest of a one-core run: planning, writing, hashing)",
             f"writer bound: one write loop's CPU keeps up with ~{report.writer_bound_cores:.0f} cores of cleaning at "
             f"this single-core rate; beyond that, more cores do not make dataprep shard faster; this disk took its "
             f"shards at {report.write_loop_disk_mb_s:.0f} MB/s (fsync included)"]
    return "\n".join(lines + [f"note: {n}" for n in report.notes()])


def record_result(report: ShardBenchReport, path: Path | None = None, *, now: dt.datetime | None = None) -> Path:
    """Append a dated entry (figures and machine) to ``path`` (default ``RESULTS_PATH``), creating it with a header."""
    path = RESULTS_PATH if path is None else path
    machine = machine_info()
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M UTC")
    others = ("" if report.others_cpu_s is None
              else f", other processes {report.others_cpu_s / report.shard_wall_s:.1f} cores")
    entry = (
        f"\n## {stamp}: shard_bench\n\n"
        f"- machine: {machine['cpu_model'] or 'unknown CPU'}, {report.cores} cores available of "
        f"{machine['cores_total']}, "
        f"{(machine['memory_bytes'] or 0) / 2**30:.0f} GiB RAM, {machine['platform']}, Python {machine['python']}, "
        f"Pillow {machine['pillow']}\n"
        f"- input: {'synthetic' if report.generated else report.raw_dir}, {report.images:,} images, "
        f"{report.input_bytes / 1e6:.1f} MB, page cache warm\n"
        f"- single core (CPU time): {report.single_core_images_per_s:.1f} images/s\n"
        f"- `dataprep shard --workers {report.workers}`: {report.shard_images_per_s:.1f} images/s, "
        f"{report.shard_input_mb_s:.1f} MB/s of input\n"
        f"- ratio: {report.ratio:.1%} of single core x {min(report.workers, report.cores)} (target {TARGET_RATIO:.0%}: "
        f"{'met' if report.meets_target else 'not met'}); {report.cores_used:.2f} cores busy, CPU efficiency "
        f"{report.cpu_efficiency:.0%}{others}\n"
        f"- `dataprep shard --workers 1`: {report.one_worker_images_per_s:.1f} images/s; scaling {report.scaling:.0%}, "
        f"serial share {report.serial_share:.0%}\n"
        f"- write loop alone: {report.write_loop_images_per_s:.0f} images/s per CPU second, keeps up with "
        f"~{report.writer_bound_cores:.0f} cores of cleaning; disk {report.write_loop_disk_mb_s:.0f} MB/s\n"
    )
    text = path.read_text(encoding="utf-8") if path.exists() else _RESULTS_HEADER
    atomic_write_bytes(path, (text + entry).encode("utf-8"))
    return path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.shard_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=2000, help="synthetic images to generate (default 2000)")
    parser.add_argument("--raw", metavar="DIR", help="shard this raw image tree instead of a synthetic one")
    parser.add_argument("--workers", type=int, help="dataprep shard --workers (default: cores available)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each measurement, best kept (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic images (default 0)")
    add_output_args(parser, plot=None)
    parser.add_argument("--record", action="store_true", help=f"append a dated entry to {RESULTS_PATH.name}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        report = measure_shard(images=args.images, raw=args.raw, workers=args.workers, repeat=args.repeat,
                               seed=args.seed)
    except (ToolError, DataprepError) as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    emit(TOOL, format_report(report), report.to_json(), args.json, argv)
    if args.record:
        path = record_result(report)
        print(f"{TOOL}: recorded in {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
