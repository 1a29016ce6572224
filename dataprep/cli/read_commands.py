"""The commands that read what a run wrote (``verify``, ``info``) or adopt other tools' shards (``index``):
their arguments and their output."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dataprep.commands.summary import format_table
from dataprep.errors import UsageError
from dataprep.formats.sizes import format_bytes

# The exit statuses of every sub-command (main: the usage error and the failures it catches).
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def add_read_parsers(sub: Any) -> None:
    """The ``verify``, ``info`` and ``index`` sub-commands on ``sub`` (the top parser's sub-parsers)."""
    p = sub.add_parser("verify", help="re-hash shards against the manifest and check index sidecars")
    p.add_argument("out", help="a shard directory or a store URL (s3://bucket/prefix)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p = sub.add_parser("info", help="counts, sizes, labels and rejects of a shard directory")
    p.add_argument("out", help="a shard directory or a store URL (s3://bucket/prefix)")
    p.add_argument("--json", action="store_true", help="print what OUT holds as JSON")
    p = sub.add_parser("index", help="adopt existing WebDataset tar shards: write index sidecars and a manifest")
    p.add_argument("dir", type=Path, help="the folder of the tar shards (the sidecars and manifest go there)")
    p.add_argument("--pattern", default="*.tar", help="shard file glob")
    p.add_argument("--json", action="store_true", help="print the counts as JSON")


def run_verify(args: argparse.Namespace) -> int:
    """``dataprep verify OUT``: prints the problems and a table; the exit status."""
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


def run_info(args: argparse.Namespace) -> int:
    """``dataprep info OUT``: prints what OUT holds."""
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


def run_index(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """``dataprep index DIR``: index sidecars and a manifest for existing tar shards."""
    from dataprep.commands.index import adopt

    if not args.dir.is_dir():
        raise UsageError(f"{args.dir} is not a directory")
    manifest = adopt(args.dir, pattern=args.pattern, command=("dataprep", *argv))
    if args.json:
        print(json.dumps({"shards": len(manifest.shards), "samples": manifest.num_samples}, indent=2))
    else:
        print(format_table([("shards indexed", f"{len(manifest.shards):,}"), ("samples", f"{manifest.num_samples:,}")]))
    return EXIT_OK
