"""Autotune against today's default and the best fixed setting: ``python -m tools.bench.autotune_bench``.

For each workload, side by side in one run: ``loaders.DataLoader`` with today's default
(``autotune=False``, the default ``num_workers`` and worker type), tuned (``autotune`` on, the
default when neither ``num_workers`` nor ``prefetch_factor`` is given), and a sweep of fixed
settings (thread and process workers, a few counts) from which the best by samples/s is
picked. Each run reads ``--batches`` batches of 32 under a training step that sleeps its
step time; it reports samples/s (wall, after the first batch: the tuned run pays for its own
convergence), the share of the loop's wall time spent blocked in ``next()`` (timed here, not by
the loader), CPU seconds per 1,000 samples (this process and its workers) and peak RSS of the
process tree.

Workloads: ``waiting`` (items whose reads wait 4 ms, a remote store; step 16 ms), ``gil`` (a
pure-Python transform that holds the GIL, ~1 ms per item; step 4 ms), ``slow_step`` (cheap items,
step 50 ms: the step sets the pace), ``jpeg`` (synthetic JPEG shards through ``ShardDataset``
and ``RandomResizedCropDecode(224)``; step 10 ms). Targets (issue 35): tuned >= 0.9x the best
fixed everywhere, >= 3x the default on ``waiting``, and no more workers than the step needs on
``slow_step``. ``--smoke``: a few batches of each, for the test. On a machine shared with other
work, read the figures as ratios of runs measured side by side.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from tools.common.loader_run import batch_length
from tools.common.proctree import TreeSampler
from tools.common.report import Progress, ToolError, add_output_args, check_int, emit, format_table, process_cpu_s

BATCH_SIZE = 32
WORKLOADS = ("waiting", "gil", "slow_step", "jpeg")
STEP_S = {"waiting": 0.016, "gil": 0.004, "slow_step": 0.05, "jpeg": 0.01}
SWEEP = {"waiting": (("thread", 2), ("thread", 8), ("thread", 16), ("thread", 32), ("process", 2)),
         "gil": (("thread", 2), ("process", 1), ("process", 2), ("process", 3)),
         "slow_step": (("thread", 1), ("process", 1), ("process", 2)),
         "jpeg": (("thread", 1), ("thread", 2), ("process", 2), ("thread", 3))}


class WaitingReads(Dataset[torch.Tensor]):
    """Each item's read waits ``wait_s`` (an object store, a network filesystem): int64 [64]."""

    def __init__(self, n: int, wait_s: float = 0.004) -> None:
        self.n, self.wait_s = n, wait_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.wait_s)
        return torch.full((64,), index, dtype=torch.int64)


class GilBound(Dataset[torch.Tensor]):
    """Each item runs a pure-Python transform holding the GIL (``rounds`` of arithmetic, ~1 ms): float32 [64]."""

    def __init__(self, n: int, rounds: int = 20_000) -> None:
        self.n, self.rounds = n, rounds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        total = 0
        for k in range(self.rounds):
            total += (index * k) % 7
        return torch.full((64,), float(total))


class Cheap(Dataset[torch.Tensor]):
    """Items that cost next to nothing: uint8 [3, 64, 64]."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((3, 64, 64), index % 256, dtype=torch.uint8)


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """One loader's run: its label, samples/s, the loop's wait share, CPU s per 1,000 samples, peak RSS
    (MiB), the workers it ended with, and the tuning decisions taken (as text)."""

    label: str
    samples_per_s: float
    wait_share: float
    cpu_s_per_1k: float
    peak_rss_mib: float
    workers: str
    decisions: tuple[str, ...] = ()


def measure(label: str, loader: Any, batches: int, step_s: float) -> RunResult:
    """Read ``batches`` batches under a step of ``step_s``; the loop's own clock, the process tree's CPU and RSS."""
    with TreeSampler() as sampler:
        sampler.take_peaks()
        cpu0, own0 = process_cpu_s(), sampler.own_cpu_s
        iterator = iter(loader)
        next(iterator)  # workers started: the first batch is not measured
        waited, samples, start = 0.0, 0, time.perf_counter()
        for _ in range(batches):
            began = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            waited += time.perf_counter() - began
            samples += batch_length(batch)
            time.sleep(step_s)
        wall = time.perf_counter() - start
        live = sum(sampler.child_cpu_s.values())
        stats = loader.stats()
        iterator.close()
        loader.close()
        gc.collect()
        rss, _ = sampler.take_peaks()
    cpu = process_cpu_s() - cpu0 - (sampler.own_cpu_s - own0) + live
    return RunResult(label=label, samples_per_s=samples / wall, wait_share=waited / wall,
                     cpu_s_per_1k=1000 * cpu / max(1, samples), peak_rss_mib=(rss or 0) / 2**20,
                     workers=f"{stats.workers} {stats.worker_type}", decisions=tuple(str(d) for d in stats.tuning))


def make_dataset(workload: str, samples: int, shard_dir: Path | None) -> Any:
    if workload == "waiting":
        return WaitingReads(samples)
    if workload == "gil":
        return GilBound(samples)
    if workload == "slow_step":
        return Cheap(samples)
    from tools.common.loader_run import make_dataset as shard_dataset

    assert shard_dir is not None  # made by run() for the jpeg workload
    return shard_dataset(shard_dir)


def run_workload(workload: str, args: argparse.Namespace, shard_dir: Path | None) -> list[RunResult]:
    """Default, tuned and the sweep of fixed settings, one after the other, on the same dataset."""
    from loaders import DataLoader

    samples = (args.batches + 2) * BATCH_SIZE
    step_s = STEP_S[workload]
    common: dict[str, Any] = dict(batch_size=BATCH_SIZE, shuffle=True, seed=0)
    setups: list[tuple[str, dict[str, Any]]] = [("default", {"autotune": False}), ("tuned", {})]
    setups += [(f"fixed {count} {kind}", {"num_workers": count, "worker_type": kind})
               for kind, count in SWEEP[workload]]
    return [measure(label, DataLoader(make_dataset(workload, samples, shard_dir), **common, **options), args.batches,
                    step_s) for label, options in setups]


def accounting_overhead_s(rounds: int = 20_000) -> float:
    """Seconds the always-on accounting adds per batch: the clock reads and records of one batch, timed over
    ``rounds`` batches (the loop's two reads, the worker's four, the outcome and the window's bookkeeping)."""
    from loaders.loader.stage_timing import BatchTiming
    from loaders.stage_clock import collect_parts
    from loaders.loader.tuner import Tuner

    tuner = Tuner.inert()
    batch = torch.zeros(BATCH_SIZE, 4)
    start = time.perf_counter()
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.thread_time()
        with collect_parts():
            pass
        timing = BatchTiming(dataset_s=time.perf_counter() - wall, cpu_s=time.thread_time() - cpu)
        tuner.accounting.outcome(timing, 0)
        tuner.end_next(time.perf_counter(), batch)
    return (time.perf_counter() - start) / rounds


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"batches": args.batches, "batch_size": BATCH_SIZE, "workloads": {}}
    progress = Progress("workloads", len(args.workloads))
    with tempfile.TemporaryDirectory(prefix="autotune_bench-", dir=args.dir) as tmp:
        shard_dir = _jpeg_shards(Path(tmp), args) if "jpeg" in args.workloads else None
        for done, workload in enumerate(args.workloads, 1):
            runs = run_workload(workload, args, shard_dir)
            results["workloads"][workload] = _summary(workload, runs)
            progress.update(done)
    progress.close()
    overhead = accounting_overhead_s(2_000 if args.smoke else 20_000)
    results["accounting_overhead_s"] = overhead
    results["accounting_overhead_share"] = {w: overhead / (BATCH_SIZE / r["tuned"]["samples_per_s"])
                                            for w, r in results["workloads"].items() if r["tuned"]["samples_per_s"]}
    return results


def _jpeg_shards(root: Path, args: argparse.Namespace) -> Path:
    from tools.common.synthetic import make_shards

    return make_shards(root, (args.batches + 2) * BATCH_SIZE, 224)


def _summary(workload: str, runs: list[RunResult]) -> dict[str, Any]:
    by_label: dict[str, Any] = {r.label: asdict(r) for r in runs}
    fixed = [r for r in runs if r.label.startswith("fixed")]
    best = max(fixed, key=lambda r: r.samples_per_s)
    tuned, default = by_label["tuned"], by_label["default"]
    by_label["best_fixed"] = best.label
    by_label["tuned_vs_best"] = tuned["samples_per_s"] / best.samples_per_s
    by_label["tuned_vs_default"] = tuned["samples_per_s"] / default["samples_per_s"]
    enough = [r for r in fixed if r.wait_share <= 0.05]
    by_label["fewest_enough"] = min(enough, key=lambda r: int(r.workers.split()[0])).label if enough else None
    return by_label


def _render(results: dict[str, Any]) -> str:
    tables = []
    for workload, summary in results["workloads"].items():
        labels = [k for k, v in summary.items() if isinstance(v, dict)]
        rows = [[label, summary[label]["workers"], summary[label]["samples_per_s"],
                 summary[label]["samples_per_s"] / summary["default"]["samples_per_s"],
                 100 * summary[label]["wait_share"], summary[label]["cpu_s_per_1k"], summary[label]["peak_rss_mib"]]
                for label in labels]
        title = (f"{workload} (step {STEP_S[workload] * 1000:.0f} ms): tuned {summary['tuned_vs_best']:.2f}x the best "
                 f"fixed ({summary['best_fixed']}), {summary['tuned_vs_default']:.2f}x the default; fewest fixed "
                 f"workers waiting <= 5%: {summary['fewest_enough']}")
        tables.append(format_table(["loader", "workers at end", "samples/s", "x default", "wait %", "CPU s/1k",
                                    "peak RSS MiB"], rows, title=title))
        tables.append("  tuning: " + ("; ".join(summary["tuned"]["decisions"]) or "none"))
    overhead = results["accounting_overhead_s"]
    shares = ", ".join(f"{w} {100 * s:.3f}%" for w, s in results["accounting_overhead_share"].items())
    tables.append(f"accounting: {overhead * 1e6:.1f} us per batch ({shares} of a tuned batch)")
    tables.append("note: wall-clock, one run of each side by side; on a shared machine read the ratios.")
    return "\n\n".join(tables)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.autotune_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=300, help="measured batches of 32 per loader")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--smoke", action="store_true", help="a few batches of each workload (for the test)")
    parser.add_argument("--dir", type=Path, default=None, help="where to make the JPEG shards (default: a temp dir)")
    add_output_args(parser, plot=None)
    args = parser.parse_args(list(argv) if argv is not None else None)
    args.workloads = [w for w in args.workloads.split(",") if w]
    unknown = sorted(set(args.workloads) - set(WORKLOADS))
    if unknown or not args.workloads:
        raise ToolError(f"--workloads: expected some of {', '.join(WORKLOADS)} (got {', '.join(unknown) or 'none'})")
    if args.smoke:
        args.batches = 4
    check_int("--batches", args.batches, 1)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    # Torch's warning for fixed process counts past the cores: the sweep sets them on purpose.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    try:
        args = _arguments(argv)
        results = run(args)
    except ToolError as err:
        print(f"autotune_bench: {err}", file=sys.stderr)
        return 2
    emit("autotune_bench", _render(results), results, args.json, None if argv is None else list(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
