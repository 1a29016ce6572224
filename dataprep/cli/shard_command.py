"""``dataprep shard RAW OUT``: its arguments (one small function per group), the ``ShardConfig`` they make, its run."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dataprep.cli.argtypes import byte_size, byte_size_or_auto, count, fraction, positive, seconds
from dataprep.clean.options import ImageFormat, ImageOptions, TableOptions, TextOptions
from dataprep.commands.config import DEFAULT_REMOTE_TIMEOUT_S, Engine, OutputFormat, ShardConfig, TokenOptions
from dataprep.cpus import cpus_available
from dataprep.commands.summary import format_summary
from dataprep.engines.progress import ProgressLine
from dataprep.errors import UsageError
from dataprep.formats.sizes import format_bytes
from dataprep.formats.writer import DEFAULT_MAX_SHARD_BYTES
from dataprep.inputs.detection import Layout
from dataprep.inputs.lines import DEFAULT_MAX_RECORD_BYTES
from dataprep.inputs.text import TextUnit
from dataprep.plan.range_size import AUTO_RANGES, MIN_AUTO_RANGE_BYTES

Group = Any  # an argparse parser or argument group: both have add_argument


def add_shard_parser(sub: Any) -> None:
    """The ``shard`` sub-command on ``sub`` (the top parser's sub-parsers)."""
    p = sub.add_parser("shard", help="clean RAW and write shards, index sidecars and a manifest to OUT")
    _add_places(p)
    _add_output(p)
    _add_images(p.add_argument_group("images"))
    _add_tables_and_text(p.add_argument_group("tables and text"))
    _add_tokens(p.add_argument_group("token output (language models)"))
    _add_run(p.add_argument_group("run"))
    _add_remote(p.add_argument_group("object storage (OUT or RAW a store URL; pip install 'shardfeed[remote]')"))


def _add_places(p: Group) -> None:
    p.add_argument("raw", help="raw dataset: a directory (or one table/text file), or a store URL (s3://bucket/raw/)")
    p.add_argument("out", help="output directory (created; must be empty or from the same command), or a store URL "
                               "(s3://bucket/prefix, gs://, az://; the bucket must exist)")
    p.add_argument("--layout", choices=["auto", *[str(x) for x in Layout]], default="auto",
                   help="what RAW holds; auto: detected from its files (the summary says why)")


def _add_output(p: Group) -> None:
    p.add_argument("--format", dest="output_format", choices=[str(x) for x in OutputFormat], default="auto",
                   help="wds: WebDataset tar shards (media); parquet: Parquet shards (tables, text, or images); "
                        "tokens: Megatron token shards (.bin + .idx; chosen by --tokenizer); auto: wds for media, "
                        "parquet for tables and text, tokens with --tokenizer")
    p.add_argument("--shard-size", type=byte_size, default=None,
                   help=f"max bytes per shard, e.g. 64MiB (default: {DEFAULT_MAX_SHARD_BYTES // 2**20}MiB, or no "
                        "byte bound when only --samples-per-shard is given)")
    p.add_argument("--samples-per-shard", type=positive, default=None,
                   help="max samples per shard (default: no bound; shards are cut by --shard-size)")
    p.add_argument("--row-group-size", type=byte_size, default="64MiB", help="Parquet row group bound")
    p.add_argument("--prefix", default="shard", help="shard file name prefix")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample order")
    p.add_argument("--no-shuffle", action="store_true", help="keep sorted order instead of a seeded shuffle")


def _add_images(g: Group) -> None:
    g.add_argument("--min-side", type=count, default=ImageOptions().min_side, metavar="PIXELS",
                   help="reject images whose shorter side (after EXIF orientation) is smaller; 0: no minimum")
    g.add_argument("--max-pixels", type=positive, default=ImageOptions().max_pixels,
                   help="reject larger images (bomb guard)")
    size = g.add_mutually_exclusive_group()
    size.add_argument("--resize-short", type=positive,
                      help="pre-resize: shorter side to N pixels, downscale only (default: images kept at their size)")
    size.add_argument("--max-side", type=positive,
                      help="pre-resize: longer side to at most N pixels (default: images kept at their size)")
    g.add_argument("--quality", type=int, default=ImageOptions().quality, choices=range(1, 101), metavar="1..100",
                   help="JPEG quality of re-encoded images")
    g.add_argument("--reencode-format", choices=[str(x) for x in ImageFormat], default="jpg",
                   help="the format of images that are re-encoded (resized, or not stored as they came)")


def _add_tables_and_text(g: Group) -> None:
    g.add_argument("--schema", help="table schema as JSON {column: type} or @file.json (default: inferred)")
    g.add_argument("--required", help="comma-separated required columns (default: all schema columns)")
    g.add_argument("--dedup-on", help="drop table rows whose value in this column repeats (default: none)")
    g.add_argument("--text-unit", choices=[str(x) for x in TextUnit], default="file",
                   help="what one sample of a text file is")
    g.add_argument("--max-record-bytes", type=byte_size, default=f"{DEFAULT_MAX_RECORD_BYTES // 2**20}MiB",
                   help="the longest line, row or text file read, after decompression; a longer one is a "
                        "record_too_long reject, skipped without being held")


def _add_tokens(g: Group) -> None:
    g.add_argument("--tokenizer", metavar="TOK",
                   help="tokenize text into Megatron token shards: the path of a Hugging Face tokenizer.json (read "
                        "from disk, never fetched), or 'bytes' (UTF-8 bytes as ids, EOS 256) (default: no token "
                        "output)")
    g.add_argument("--eos", metavar="TOKEN", help="the token appended to every document (default: the tokenizer's "
                                                  "<|endoftext|>, </s> or <eos>)")
    g.add_argument("--min-tokens", type=count, metavar="N",
                   help="reject documents of fewer tokens, the EOS not counted (too_few_tokens; default 1)")
    g.add_argument("--text-column", metavar="NAME",
                   help="the column of a table that holds the text (default: text); other columns are dropped")


def _add_run(g: Group) -> None:
    g.add_argument("--workers", type=positive, default=cpus_available(),
                   help="cores to use: writer processes that write the plan's ranges in parallel, one per core, "
                        "each cleaning its own inputs (1, or a plan of one range: one process; media then on N "
                        "threads). The summary says how they were shared; the output does not depend on it "
                        "(default: the CPUs this process may use, its affinity mask capped by the cgroup CPU "
                        "quota: %(default)s here)")
    g.add_argument("--follow-symlinks", action="store_true", help="follow symlinks that leave RAW")
    g.add_argument("--overwrite", action="store_true", help="replace what dataprep wrote in OUT (never other files)")
    g.add_argument("--max-reject-fraction", type=fraction,
                   help="fail when more than this fraction of inputs is rejected (default: no bound)")
    g.add_argument("--allow-empty", action="store_true",
                   help="succeed even when no sample is kept (every input rejected, or none found)")
    g.add_argument("--range-size", type=byte_size_or_auto, default=None, metavar="SIZE|auto",
                   help="input bytes per range of the plan: each range is written on its own, ranges in parallel "
                        f"(default: auto, {AUTO_RANGES} ranges of equal bytes, fewer of at least "
                        f"{format_bytes(MIN_AUTO_RANGE_BYTES)} for a small RAW)")
    g.add_argument("--engine", choices=[str(x) for x in Engine], default="local",
                   help="local: this machine writes the ranges; ray: one Ray task per range on a cluster "
                        "(OUT a folder every node mounts at the same path, or a store URL every node reaches; "
                        "pip install 'shardfeed[ray]'). Same bytes either way")
    g.add_argument("--address", default=None,
                   help="Ray cluster to use with --engine ray: auto, HOST:PORT or ray://HOST:10001 "
                        "(default: RAY_ADDRESS, else a new local cluster)")
    g.add_argument("--json", action="store_true", help="print the summary as JSON")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress line (drawn on stderr while walking, planning, mirroring and writing, when "
                        "stderr is a terminal or with -v)")


def _add_remote(g: Group) -> None:
    g.add_argument("--staging", type=Path, default=None,
                   help="folder for the files waiting for upload and RAW's mirror (default: the system's temporary "
                        "folder); removed when the run ends")
    g.add_argument("--remote-timeout", type=seconds, default=DEFAULT_REMOTE_TIMEOUT_S, metavar="SECONDS",
                   help="a store request without progress this long, retries included, fails the run naming the URL "
                        f"(default: {DEFAULT_REMOTE_TIMEOUT_S:g})")


def _schema(text: str | None) -> dict[str, str] | None:
    if text is None:
        return None
    try:
        doc = json.loads(Path(text[1:]).read_text() if text.startswith("@") else text)
    except (OSError, ValueError) as err:
        raise UsageError(f"--schema: cannot read {text!r}: {err}") from err
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise UsageError(f"--schema must be a JSON object of column -> type name (got {text!r})")
    return doc


def config_from_args(args: argparse.Namespace) -> ShardConfig:
    """The ``ShardConfig`` of parsed ``shard`` arguments; ``UsageError`` for values the options refuse."""
    shard_size = DEFAULT_MAX_SHARD_BYTES if args.shard_size is None and args.samples_per_shard is None \
        else args.shard_size
    required = tuple(c for c in args.required.split(",") if c) if args.required else None
    try:
        image = ImageOptions(min_side=args.min_side, max_pixels=args.max_pixels, resize_short=args.resize_short,
                             max_side=args.max_side, quality=args.quality,
                             reencode_format=ImageFormat(args.reencode_format))
        table = TableOptions(schema=_schema(args.schema), required=required, dedup_on=args.dedup_on)
        text = TextOptions(unit=TextUnit(args.text_unit))
        tokens = TokenOptions(tokenizer=args.tokenizer, eos=args.eos, min_tokens=args.min_tokens,
                              text_column=args.text_column)
    except (TypeError, ValueError) as err:
        raise UsageError(str(err)) from err
    return ShardConfig(
        raw=args.raw, out=args.out, layout=None if args.layout == "auto" else Layout(args.layout),
        output_format=OutputFormat(args.output_format), max_shard_bytes=shard_size,
        max_samples_per_shard=args.samples_per_shard, row_group_bytes=args.row_group_size, prefix=args.prefix,
        seed=args.seed, shuffle=not args.no_shuffle, image=image, table=table, text=text, tokens=tokens,
        workers=args.workers,
        follow_symlinks=args.follow_symlinks, overwrite=args.overwrite, max_reject_fraction=args.max_reject_fraction,
        allow_empty=args.allow_empty, range_bytes=args.range_size, max_record_bytes=args.max_record_bytes,
        engine=Engine(args.engine), address=args.address,
        staging=args.staging, remote_timeout_s=args.remote_timeout,
    )


def progress_enabled(args: argparse.Namespace) -> bool | None:
    """Whether ``shard`` draws its progress line: never with ``--no-progress``; always with ``-v`` (stderr even
    when it is not a terminal); else when stderr is a terminal (None) and the summary is not ``--json``."""
    if args.no_progress:
        return False
    if getattr(args, "verbose", False):
        return True
    return False if args.json else None


def run_shard(args: argparse.Namespace, argv: Sequence[str]) -> str:
    """Run ``dataprep shard``; the summary to print (a table, or JSON with ``--json``)."""
    from dataprep.commands.shard import shard  # loaded on use: verify/info/index need none of it

    config = config_from_args(args)
    progress = ProgressLine(None, enabled=progress_enabled(args))
    try:
        summary = shard(config, argv=("dataprep", *argv), progress=progress)
    finally:
        progress.close()  # the line ends before the summary or the error, whatever stage drew it last
    return json.dumps(summary.to_json(), indent=2) if args.json else format_summary(summary)
