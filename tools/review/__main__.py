"""Measure the structure of a checkout (issue 19): ``python -m tools.review [--root DIR]``.

Prints one table (measurement x package) and the first findings of each measurement:
import cycles per package (every import counts, including those inside functions and under
``TYPE_CHECKING``), imports against the layer order, tools modules importing a program,
modules over 400 lines, functions over 40, constructors over 8 parameters, classes built
with more than five positional fields, reads of another module's private names, helper
functions defined in more than one file, public names defined twice, references that do
not resolve, ``print`` in library code, lines over 120 characters and ``# type: ignore``
comments. Exit status 1 when a hard rule is broken (``measure.HARD_RULES``), 2 for bad
arguments, else 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.common.report import ToolError, add_output_args, emit
from tools.review.measure import format_review, review

TOOL = "review"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.review", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout to review (default: .)")
    parser.add_argument("--details", type=int, default=10, metavar="N",
                        help="findings listed per measurement (default 10; 0: the table only)")
    add_output_args(parser, plot=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        result = review(args.root)
    except (ToolError, OSError) as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    emit(TOOL, format_review(result, details=args.details), result.to_json(), args.json, argv)
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
