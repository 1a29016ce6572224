"""Read throughput of a shard directory, and of the raw tree it was made from.

    python -m tools.profile.disk SHARD_DIR [--raw RAW_DIR] [--random-samples N] [--block-size 1MiB]
                         [--no-cold] [--seed S] [--json PATH] [--plot PATH]

Per source, two patterns, each cold then warm:
- sequential: every shard read front to back in ``block_size`` reads (raw: every file
  opened, read and closed, in sorted path order);
- random: ``random_samples`` samples, each one ``os.pread`` of its byte range found in the
  index sidecar, in a seeded random order, shard files held open (raw: shuffled files).
Cold passes first drop the files from the page cache (``fdatasync`` then
``posix_fadvise(DONTNEED)``, no root needed); warm passes follow right after a read
(with ``--no-cold``, after an untimed warm-up read).
The fraction of pages resident before each pass is measured with ``mincore`` so the
"cold" claim can be checked. Nothing is tuned: readahead and cache settings stay as found.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dataprep.errors import DataprepError
from dataprep.formats.sizes import format_bytes, parse_bytes
from tools.common.report import ToolError, add_output_args, bar_plot, emit, format_table, require_plot
from tools.profile.disk_reads import MIB, DiskReport, measure_disk


def format_report(report: DiskReport) -> str:
    """The human-readable tables ``python -m tools.profile.disk`` prints."""
    lines = [f"shards: {report.shard_dir}: {report.num_shards} shards, {report.num_samples:,} samples, "
             f"{format_bytes(report.shard_bytes)}",
             f"  on {report.device.describe()}"]
    if report.raw_device is not None:
        lines += [f"raw:    {report.raw_dir}: {report.raw_files:,} files, {format_bytes(report.raw_bytes)}",
                  f"  on {report.raw_device.describe()}"]
    headers = ("source", "pattern", "cache", "files", "samples", "MiB", "seconds", "MiB/s", "samples/s", "cached %")
    rows = [
        (p.source, p.pattern, p.cache, p.files, p.samples, p.bytes / MIB, p.seconds, p.read_mib_s, p.samples_per_s,
         None if p.resident_before is None else 100 * p.resident_before)
        for p in report.passes
    ]
    title = f"reads (block size {format_bytes(report.block_size)}, seed {report.seed})"
    lines += ["", format_table(headers, rows, title=title)]
    ratios = report.ratios()
    if ratios:
        ratio_rows = [(k.replace("_", " "), v["read_mib_s"], v["samples_per_s"]) for k, v in ratios.items()]
        lines += ["", format_table(("pass", "MiB/s x", "samples/s x"), ratio_rows, title="shards / raw")]
    lines += [""] + [f"note: {n}" for n in report.notes]
    return "\n".join(lines).rstrip()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.profile.disk",
                                     description="Read throughput of shards (and of a raw tree), cold and warm.")
    parser.add_argument("shard_dir", metavar="SHARD_DIR", help="a dataprep output directory (with manifest.json)")
    parser.add_argument("--raw", metavar="RAW_DIR", help="also read this raw tree (one file per sample) to compare")
    parser.add_argument("--random-samples", type=int, default=1000, metavar="N",
                        help="samples per random pass, 0 to skip (default 1000)")
    parser.add_argument("--block-size", type=parse_bytes, default=1 << 20, metavar="SIZE",
                        help="bytes per sequential read (default 1MiB)")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-cache passes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random sample order (default 0)")
    add_output_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.plot:
            require_plot()
        report = measure_disk(
            args.shard_dir, raw_dir=args.raw, random_samples=args.random_samples, cold=not args.no_cold, seed=args.seed,
            block_size=args.block_size,
        )
    except (ToolError, DataprepError) as err:
        print(f"disk: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"disk: cannot read {err.filename or args.shard_dir}: {err.strerror}", file=sys.stderr)
        return 1
    emit("disk", format_report(report), report.to_json(), args.json, argv)
    if args.plot:
        labels = [f"{p.source} {p.pattern} {p.cache}" for p in report.passes]
        bar_plot(args.plot, labels, [p.read_mib_s for p in report.passes], ylabel="MiB/s",
                 title=f"read throughput: {report.shard_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
