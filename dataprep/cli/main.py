"""The ``dataprep`` command line: argument parsing and output only.

Sub-commands: ``shard RAW OUT``, ``verify OUT``, ``info OUT``, ``index DIR``.
Exit status: 0 success (rejects are normal), 1 failure, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from dataprep.clean.options import ImageFormat, ImageOptions, TableOptions, TextOptions, TextUnit
from dataprep.commands.config import (DEFAULT_RANGE_BYTES, DEFAULT_REMOTE_TIMEOUT_S, DEFAULT_SHARD_BYTES, Engine,
                                      OutputFormat, ShardConfig, TokenOptions, default_workers)
from dataprep.errors import DataprepError, OutputExistsError, UsageError
from dataprep.cli.interrupts import keep_interrupts
from dataprep.engines.progress import ProgressLine
from dataprep.commands.summary import format_summary, format_table
from dataprep.inputs.sources import Layout
from dataprep.formats.sizes import format_bytes, parse_bytes

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _byte_size(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within [0, 1] (got {text})")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be a number of seconds in (0, 3600] (got {text})")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {text})")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 (got {text})")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dataprep", description="Clean raw datasets and shard them for fast loading.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("shard", help="clean RAW and write shards, index sidecars and a manifest to OUT")
    p.add_argument("raw", help="raw dataset: a directory (or one table/text file), or a store URL (s3://bucket/raw/)")
    p.add_argument("out", help="output directory (created; must be empty or from the same command), or a store URL "
                               "(s3://bucket/prefix, gs://, az://; the bucket must exist)")
    p.add_argument("--layout", choices=["auto", *[str(x) for x in Layout]], default="auto")
    p.add_argument("--format", dest="output_format", choices=[str(x) for x in OutputFormat], default="auto",
                   help="wds: WebDataset tar shards (media); parquet: Parquet shards (tables, text, or images); "
                        "tokens: Megatron token shards (.bin + .idx; chosen by --tokenizer)")
    p.add_argument("--shard-size", type=_byte_size, default=None,
                   help="max bytes per shard, e.g. 64MiB (default 256MiB)")
    p.add_argument("--samples-per-shard", type=_positive, default=None, help="max samples per shard")
    p.add_argument("--row-group-size", type=_byte_size, default="64MiB", help="Parquet row group bound (default 64MiB)")
    p.add_argument("--prefix", default="shard", help="shard file name prefix (default: shard)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample order (default 0)")
    p.add_argument("--no-shuffle", action="store_true", help="keep sorted order instead of a seeded shuffle")
    g = p.add_argument_group("images")
    g.add_argument("--min-side", type=_positive, default=32, help="reject images whose shorter side is smaller")
    g.add_argument("--max-pixels", type=_positive, default=ImageOptions().max_pixels,
                   help="reject larger images (bomb guard)")
    size = g.add_mutually_exclusive_group()
    size.add_argument("--resize-short", type=_positive, help="pre-resize: shorter side to N pixels (downscale only)")
    size.add_argument("--max-side", type=_positive, help="pre-resize: longer side to at most N pixels")
    g.add_argument("--quality", type=int, default=95, choices=range(1, 101), metavar="1..100",
                   help="JPEG quality of re-encoded images")
    g.add_argument("--reencode-format", choices=[str(x) for x in ImageFormat], default="jpg")
    g = p.add_argument_group("tables and text")
    g.add_argument("--schema", help="table schema as JSON {column: type} or @file.json (default: inferred)")
    g.add_argument("--required", help="comma-separated required columns (default: all schema columns)")
    g.add_argument("--dedup-on", help="drop table rows whose value in this column repeats")
    g.add_argument("--text-unit", choices=[str(x) for x in TextUnit], default="file")
    g = p.add_argument_group("token output (language models)")
    g.add_argument("--tokenizer", metavar="TOK",
                   help="tokenize text into Megatron token shards: the path of a Hugging Face tokenizer.json (read "
                        "from disk, never fetched), or 'bytes' (UTF-8 bytes as ids, EOS 256)")
    g.add_argument("--eos", metavar="TOKEN", help="the token appended to every document (default: the tokenizer's "
                                                  "<|endoftext|>, </s> or <eos>)")
    g.add_argument("--min-tokens", type=_count, metavar="N",
                   help="reject documents of fewer tokens, the EOS not counted (too_few_tokens; default 1)")
    g.add_argument("--text-column", metavar="NAME",
                   help="the column of a table that holds the text (default: text); other columns are dropped")
    g = p.add_argument_group("run")
    g.add_argument("--workers", type=_positive, default=default_workers(),
                   help="parallel workers: cleaning threads for media, processes for tables and text "
                        "(default: all cores)")
    g.add_argument("--follow-symlinks", action="store_true", help="follow symlinks that leave RAW")
    g.add_argument("--overwrite", action="store_true", help="replace what dataprep wrote in OUT (never other files)")
    g.add_argument("--max-reject-fraction", type=_fraction,
                   help="fail when more than this fraction of inputs is rejected")
    g.add_argument("--allow-empty", action="store_true",
                   help="succeed even when no sample is kept (every input rejected, or none found)")
    g.add_argument("--range-size", type=_byte_size, default=f"{DEFAULT_RANGE_BYTES // 2**30}GiB",
                   help="input bytes per range of the plan: each range is written on its own (default 4GiB)")
    g.add_argument("--engine", choices=[str(x) for x in Engine], default="local",
                   help="local: this machine writes the ranges; ray: one Ray task per range on a cluster "
                        "(OUT must be a folder every node sees; pip install 'shardfeed[ray]'). Same bytes either way")
    g.add_argument("--address", default=None,
                   help="Ray cluster to use with --engine ray: auto, HOST:PORT or ray://HOST:10001 "
                        "(default: RAY_ADDRESS, else a new local cluster)")
    g.add_argument("--json", action="store_true", help="print the summary as JSON")
    g.add_argument("--no-progress", action="store_true", help="no progress line even on a terminal")
    g = p.add_argument_group("object storage (OUT or RAW a store URL; pip install 'shardfeed[remote]')")
    g.add_argument("--staging", type=Path, default=None,
                   help="folder for the files waiting for upload and RAW's mirror (default: the system's temporary "
                        "folder); removed when the run ends")
    g.add_argument("--remote-timeout", type=_seconds, default=DEFAULT_REMOTE_TIMEOUT_S, metavar="SECONDS",
                   help="a store request without progress this long, retries included, fails the run naming the URL "
                        f"(default {DEFAULT_REMOTE_TIMEOUT_S:g})")

    p = sub.add_parser("verify", help="re-hash shards against the manifest and check index sidecars")
    p.add_argument("out", help="a shard directory or a store URL (s3://bucket/prefix)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("info", help="counts, sizes, labels and rejects of a shard directory")
    p.add_argument("out", help="a shard directory or a store URL (s3://bucket/prefix)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("index", help="adopt existing WebDataset tar shards: write index sidecars and a manifest")
    p.add_argument("dir", type=Path)
    p.add_argument("--pattern", default="*.tar", help="shard file glob (default *.tar)")
    p.add_argument("--json", action="store_true")
    return parser


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
    if args.shard_size is None and args.samples_per_shard is None:
        args.shard_size = DEFAULT_SHARD_BYTES
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
        output_format=OutputFormat(args.output_format), max_shard_bytes=args.shard_size,
        max_samples_per_shard=args.samples_per_shard, row_group_bytes=args.row_group_size, prefix=args.prefix,
        seed=args.seed, shuffle=not args.no_shuffle, image=image, table=table, text=text, tokens=tokens,
        workers=args.workers,
        follow_symlinks=args.follow_symlinks, overwrite=args.overwrite, max_reject_fraction=args.max_reject_fraction,
        allow_empty=args.allow_empty, range_bytes=args.range_size, engine=Engine(args.engine), address=args.address,
        staging=args.staging, remote_timeout_s=args.remote_timeout,
    )


def _cmd_shard(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from dataprep.commands.shard import shard

    config = config_from_args(args)
    progress = ProgressLine(None, enabled=False if args.no_progress or args.json else None)
    summary = shard(config, argv=("dataprep", *argv), progress=progress)
    print(json.dumps(summary.to_json(), indent=2) if args.json else format_summary(summary))
    return EXIT_OK


def _cmd_verify(args: argparse.Namespace) -> int:
    from dataprep.commands.verify import verify

    report = verify(args.out)
    if args.json:
        print(json.dumps({"ok": report.ok, "shards": report.shards_checked, "samples": report.samples,
                          "bytes": report.bytes, "problems": list(report.problems)}, indent=2))
    else:
        for problem in report.problems:
            print(f"PROBLEM  {problem}")
        status = "OK" if report.ok else f"FAILED ({len(report.problems)} problems)"
        print(format_table([("shards checked", f"{report.shards_checked:,}"), ("samples", f"{report.samples:,}"),
                            ("bytes", format_bytes(report.bytes)), ("status", status)]))
    return EXIT_OK if report.ok else EXIT_FAILURE


def _cmd_info(args: argparse.Namespace) -> int:
    from dataprep.commands.info import dataset_info

    info = dataset_info(args.out).to_json()
    if args.json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
        return EXIT_OK
    rows = [("format / layout", f"{info['format']} / {info['layout']}"),
            *([("layout chosen because", info["layout_reason"])] if info["layout_reason"] else []),
            ("shards", f"{info['shards']:,}"),
            ("samples", f"{info['samples']:,}"), ("bytes", format_bytes(info["bytes"])),
            ("shard bytes min..max", f"{format_bytes(info['shard_bytes_min'])} .. "
                                     f"{format_bytes(info['shard_bytes_max'])}")]
    rows += _token_rows(info["tokenizer"], info["tokens"])
    rows += [(f"field {name}", f"{n:,}") for name, n in info["fields"].items()]
    rows += [(f"label {name}", f"{n:,}") for name, n in info["labels"].items()]
    totals = info["totals"]
    rows += [("inputs seen", f"{totals['inputs_seen']:,}"), ("rejected", f"{totals['rejected']:,}")]
    rows += [(f"  {reason}", f"{n:,}") for reason, n in totals["rejected_by_reason"].items()]
    print(format_table(rows))
    return EXIT_OK


def _token_rows(tokenizer: dict | None, tokens: dict | None) -> list[tuple[str, str]]:
    """``dataprep info`` rows of token shards: the tokenizer, documents, tokens, tokens per document."""
    if tokenizer is None or tokens is None:
        return []
    per = tokens["tokens_per_document"]
    return [("tokenizer", f"{tokenizer['name']} (sha256 {tokenizer['sha256'][:12]}...)"),
            ("vocabulary / EOS / dtype", f"{tokenizer['vocab_size']:,} / {tokenizer['eos']} = {tokenizer['eos_id']} / "
                                         f"{tokenizer['dtype']}"),
            ("documents", f"{tokens['documents']:,}"), ("tokens (EOS included)", f"{tokens['tokens']:,}"),
            ("tokens per document min / median / max", f"{per['min']:,} / {per['median']:,g} / {per['max']:,}")]


def _cmd_index(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from dataprep.commands.index import adopt

    if not args.dir.is_dir():
        raise UsageError(f"{args.dir} is not a directory")
    manifest = adopt(args.dir, pattern=args.pattern, command=("dataprep", *argv))
    if args.json:
        print(json.dumps({"shards": len(manifest.shards), "samples": manifest.num_samples}, indent=2))
    else:
        print(format_table([("shards indexed", f"{len(manifest.shards):,}"), ("samples", f"{manifest.num_samples:,}")]))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    keep_interrupts()
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="dataprep: %(message)s")
    try:
        if args.command == "shard":
            return _cmd_shard(args, argv)
        if args.command == "verify":
            return _cmd_verify(args)
        if args.command == "info":
            return _cmd_info(args)
        return _cmd_index(args, argv)
    except (UsageError, OutputExistsError) as err:
        print(f"dataprep: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except DataprepError as err:
        print(f"dataprep: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    except OSError as err:  # disk full, permissions, I/O errors: the notes say which file and sample
        print("; ".join([f"dataprep: error: {err}", *getattr(err, "__notes__", [])]), file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("dataprep: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
