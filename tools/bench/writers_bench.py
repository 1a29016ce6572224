"""``dataprep shard`` on N cores against N x its own one-core rate, for every kind of input, in one run (issue 27).

    python -m tools.bench.writers_bench [--photos 1200] [--rows 100000] [--workers N] [--repeat 3]
                                        [--cases images,table,tokens-bpe,tokens-bytes] [--seed 0] [--json [PATH]]

Raw inputs, made once in a temporary folder (``writers_runs``): ``--photos`` synthetic photos
(an image-folder tree), and ``--rows`` JSON lines of short documents with duplicates across the
file, plus a byte-level BPE ``tokenizer.json`` trained on them. Cases, each a ``dataprep shard``
(``python -m dataprep.cli shard RAW OUT --json``, a fresh process; its own ``elapsed_s``: the
run from planning to the manifest, interpreter start-up excluded) with ``--workers 1`` and with
``--workers N`` (N = the cores available), alternating, best of ``--repeat`` each:

- ``images``: the photos to tar shards; ``table``: the JSON lines as a table to Parquet;
- ``tokens-bpe`` / ``tokens-bytes``: the JSON lines' ``text`` column to token shards with the BPE,
  and with ``--tokenizer bytes`` (duplicates dropped, first in plan order wins).

Each row: inputs/s with 1 and N workers and ``ratio = rate(N) / (N x rate(1))`` against
``TARGET_RATIO``, the CPU seconds of each run (the process and its writers, start-up included)
and how the run shared its cores (the summary's ``workers``). Side by side, in the same run,
what a user writes by hand: a ``multiprocessing.Pool`` of 1 and N processes that decodes and
re-encodes the same photos, and the same feeding ``webdataset.ShardWriter`` (where installed).
``others`` is the CPU every other process of the machine used during the timed runs, in cores:
a shared machine lowers the N-worker rates, and so the ratios.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loaders.read.topology import cpus_available
from tools.bench.writers_runs import Timed, has_webdataset, make_bpe, make_photos, make_rows, pool_reencode, time_shard
from tools.common.pagecache import files_under, warm_page_cache
from tools.common.report import ToolError, add_output_args, check_int, emit, format_table, machine_busy_s

TOOL = "writers_bench"
TARGET_RATIO = 0.90
CASES = ("images", "table", "tokens-bpe", "tokens-bytes")
ROWS_NAME = "rows/rows.jsonl"


@dataclass(frozen=True)
class CaseResult:
    """A case with 1 worker and with ``workers``: the best run of each (and every run's seconds)."""

    case: str
    workers: int
    one: Timed
    many: Timed
    one_runs: tuple[float, ...]
    many_runs: tuple[float, ...]

    @property
    def ratio(self) -> float:
        return self.many.rate / (self.workers * self.one.rate)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rate_1": self.one.rate, "rate_n": self.many.rate, "ratio": self.ratio,
                "meets_target": self.ratio >= TARGET_RATIO}


def _case_args(case: str, top: Path) -> tuple[Path, list[str]]:
    """RAW and the options of ``case``."""
    if case == "images":
        return top / "photos" / "images", []
    rows = top / ROWS_NAME
    if case == "table":
        return rows, []
    tokenizer = "bytes" if case == "tokens-bytes" else os.fspath(top / "tokenizer.json")
    return rows, ["--tokenizer", tokenizer]


def measure_case(case: str, top: Path, workers: int, repeat: int) -> CaseResult:
    """``case`` with 1 and ``workers`` workers, alternating, ``repeat`` times each; the best of each."""
    raw, options = _case_args(case, top)
    ones: list[Timed] = []
    manys: list[Timed] = []
    for r in range(repeat):
        warm_page_cache(files_under(raw) if raw.is_dir() else [raw])
        ones.append(time_shard(raw, top / f"out-{case}-1-{r}", 1, options))
        manys.append(time_shard(raw, top / f"out-{case}-n-{r}", workers, options))
    best_one, best_many = min(ones, key=lambda t: t.seconds), min(manys, key=lambda t: t.seconds)
    return CaseResult(case=case, workers=workers, one=best_one, many=best_many,
                      one_runs=tuple(t.seconds for t in ones), many_runs=tuple(t.seconds for t in manys))


def measure_pool(top: Path, workers: int, repeat: int, *, wds: bool) -> CaseResult:
    """The hand-written Pool (and ShardWriter) over the photos, with 1 and ``workers`` processes."""
    files = sorted(files_under(top / "photos" / "images"))
    runs: dict[int, list[Timed]] = {1: [], workers: []}
    for r in range(repeat):
        for count in (1, workers):
            warm_page_cache(files)
            start, busy = time.process_time(), machine_busy_s()
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            seconds, images = pool_reencode(files, count, top / f"wds-{count}-{r}", wds=wds)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = time.process_time() - start + (after.ru_utime + after.ru_stime) - (children.ru_utime +
                                                                                      children.ru_stime)
            busy_after = machine_busy_s()
            others = None if busy is None or busy_after is None else max(busy_after - busy - cpu, 0.0) / seconds
            runs[count].append(Timed(seconds=seconds, inputs=images, cpu_s=cpu, others_cores=others,
                                     split=f"{count} x 1"))
            shutil.rmtree(top / f"wds-{count}-{r}", ignore_errors=True)
    name = "pool + webdataset.ShardWriter" if wds else "multiprocessing.Pool re-encode"
    one, many = runs[1], runs[workers]
    return CaseResult(case=name, workers=workers, one=min(one, key=lambda t: t.seconds),
                      many=min(many, key=lambda t: t.seconds), one_runs=tuple(t.seconds for t in one),
                      many_runs=tuple(t.seconds for t in many))


@dataclass(frozen=True)
class WritersReport:
    """Every case's result over ``photos`` photos and ``rows`` JSON lines (``input_bytes``: photos, rows)."""

    cores: int
    workers: int
    repeat: int
    photos: int
    rows: int
    input_bytes: dict[str, int]
    results: tuple[CaseResult, ...]

    def to_json(self) -> dict[str, Any]:
        return {"cores": self.cores, "workers": self.workers, "repeat": self.repeat, "photos": self.photos,
                "rows": self.rows, "input_bytes": self.input_bytes, "target_ratio": TARGET_RATIO,
                "results": [r.to_json() for r in self.results]}


def measure(*, photos: int = 1200, rows: int = 100_000, workers: int | None = None, repeat: int = 3,
            cases: Sequence[str] = CASES, seed: int = 0, pool: bool = True) -> WritersReport:
    """Make the inputs, then run every case and the hand-written pool (module docstring)."""
    check_int("photos", photos, 1)
    check_int("rows", rows, 1)
    check_int("repeat", repeat, 1)
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise ToolError(f"--cases: unknown {', '.join(unknown)} (choose from {', '.join(CASES)})")
    cores = cpus_available()
    workers = cores if workers is None else check_int("workers", workers, 2)
    with tempfile.TemporaryDirectory(prefix="writers_bench-") as scratch:
        top = Path(scratch)
        make_photos(top / "photos", photos)
        make_rows(top / ROWS_NAME, rows, seed)
        make_bpe(top / ROWS_NAME, top / "tokenizer.json")
        sizes = {"photos": sum(p.stat().st_size for p in files_under(top / "photos")),
                 "rows": (top / ROWS_NAME).stat().st_size}
        results = [measure_case(case, top, workers, repeat) for case in cases]
        if pool:
            results.append(measure_pool(top, workers, repeat, wds=False))
            if has_webdataset():
                results.append(measure_pool(top, workers, repeat, wds=True))
        count = len(files_under(top / "photos" / "images"))
    return WritersReport(cores=cores, workers=workers, repeat=repeat, photos=count, rows=rows, input_bytes=sizes,
                         results=tuple(results))


def format_report(report: WritersReport) -> str:
    """The table and verdicts ``python -m tools.bench.writers_bench`` prints."""
    n = report.workers
    rows = []
    for r in report.results:
        others = [t.others_cores for t in (r.one, r.many) if t.others_cores is not None]
        rows.append((r.case, f"{r.one.rate:,.0f}", f"{r.many.rate:,.0f}", f"{r.ratio:.0%}",
                     "meets" if r.ratio >= TARGET_RATIO else "BELOW", f"{r.one.cpu_s:.2f}", f"{r.many.cpu_s:.2f}",
                     r.many.split, *(_mib_cell(v) for v in (r.one.peak_mib[0], *r.many.peak_mib)),
                     f"{max(others):.1f}" if others else "-"))
    headers = ("case", "inputs/s 1", f"inputs/s {n}", f"{n} / ({n} x 1)", f"target {TARGET_RATIO:.0%}",
               "CPU s 1", f"CPU s {n}", "writers x threads", "MiB 1", f"MiB {n}", "MiB writer", "others")
    head = (f"{report.photos:,} photos ({report.input_bytes['photos'] / 1e6:.0f} MB), {report.rows:,} JSON lines "
            f"({report.input_bytes['rows'] / 1e6:.0f} MB); {report.cores} cores; best of {report.repeat}, "
            "alternating; dataprep rates over its own elapsed time (start-up excluded)")
    notes = ["others: cores kept busy by other processes during the timed runs (the worst of the two rows).",
             "MiB: peak resident memory (VmHWM) of the dataprep process with 1 and N workers, and of its largest "
             "writer process with N."]
    return "\n".join([head, "", format_table(headers, rows), "", *[f"note: {n}" for n in notes]])


def _mib_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.writers_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--photos", type=int, default=1200, help="synthetic photos to shard (default 1200)")
    parser.add_argument("--rows", type=int, default=100_000, help="JSON lines of short documents (default 100000)")
    parser.add_argument("--workers", type=int, help="dataprep shard --workers N (default: cores available)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, best kept (default 3)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--no-pool", action="store_true", help="leave out the hand-written Pool baselines")
    parser.add_argument("--seed", type=int, default=0, help="seed of the JSON lines (default 0)")
    add_output_args(parser, plot=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        report = measure(photos=args.photos, rows=args.rows, workers=args.workers, repeat=args.repeat,
                         cases=[c for c in args.cases.split(",") if c], seed=args.seed, pool=not args.no_pool)
    except ToolError as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    emit(TOOL, format_report(report), report.to_json(), args.json, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
