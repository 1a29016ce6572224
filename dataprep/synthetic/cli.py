"""``python -m dataprep.synthetic OUT ...``: argument parsing and the one-line summary only."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dataprep.errors import DataprepError
from dataprep.synthetic.dataset import make_dataset
from dataprep.synthetic.spec import SyntheticSpec


def main(argv: list[str] | None = None) -> int:
    """CLI: write a sample dataset and print a one-line summary. Exit 0, or 2 on bad arguments."""
    parser = argparse.ArgumentParser(prog="python -m dataprep.synthetic",
                                     description="Write a deterministic sample raw dataset.")
    parser.add_argument("out", type=Path, metavar="OUT", help="output directory (created; must be empty or absent)")
    parser.add_argument("--images", type=int, default=SyntheticSpec.images,
                        help="valid images in all (default %(default)s)")
    parser.add_argument("--classes", type=int, default=SyntheticSpec.classes,
                        help="class folders (default %(default)s)")
    parser.add_argument("--seed", type=int, default=SyntheticSpec.seed, help="random seed (default %(default)s)")
    parser.add_argument("--documents", type=int, default=SyntheticSpec.documents,
                        help="documents of the text corpus for tokenization, corpus/ (default %(default)s: none)")
    for name, what in (("broken", "files cleaning must reject"), ("tables", "tables/"), ("text", "text/")):
        parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=True,
                            help=f"write {what} (default on)")
    args = parser.parse_args(argv)
    try:
        spec = SyntheticSpec(images=args.images, classes=args.classes, seed=args.seed, broken=args.broken,
                             tables=args.tables, text=args.text, documents=args.documents)
        report = make_dataset(args.out, spec)
    except DataprepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    corpus = "" if report.corpus is None else (
        f", corpus of {report.corpus.documents} documents ({len(report.corpus.duplicates)} duplicates, "
        f"{len(report.corpus.rejects)} broken) + tokenizer.json")
    print(
        f"wrote {report.root}: {report.image_files} images in {spec.classes} classes + {len(report.broken)} broken, "
        f"{report.table_rows} table rows ({report.bad_table_rows} bad), {report.text_files} text files{corpus}, "
        f"{report.bytes_written / 1e6:.1f} MB"
    )
    return 0
