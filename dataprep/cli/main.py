"""The ``dataprep`` command line: argument parsing and output only.

Sub-commands: ``shard RAW OUT`` (``shard_command``), ``verify OUT``, ``info OUT``, ``index DIR``
(``read_commands``). Exit status: 0 success (rejects are normal), 1 failure, 2 usage error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from dataprep.cli.interrupts import keep_interrupts
from dataprep.cli.read_commands import EXIT_OK, add_read_parsers, run_index, run_info, run_verify
from dataprep.cli.shard_command import add_shard_parser, config_from_args, run_shard
from dataprep.errors import DataprepError, OutputExistsError, UsageError

__all__ = ["build_parser", "config_from_args", "main"]

EXIT_FAILURE, EXIT_USAGE = 1, 2


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: ``dataprep [-v] shard|verify|info|index ...``."""
    parser = argparse.ArgumentParser(prog="dataprep", description="Clean raw datasets and shard them for fast loading.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    add_shard_parser(sub)
    add_read_parsers(sub)
    return parser


def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.command == "shard":
        print(run_shard(args, argv))
        return EXIT_OK
    if args.command == "verify":
        return run_verify(args)
    if args.command == "info":
        return run_info(args)
    return run_index(args, argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    keep_interrupts()
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="dataprep: %(message)s")
    try:
        return _run(args, argv)
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
