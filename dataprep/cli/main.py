"""The ``dataprep`` command line: argument parsing and output only.

Sub-commands: ``shard RAW OUT`` (``shard_command``), ``verify OUT``, ``info OUT``, ``index DIR``
(``read_commands``). Exit status: 0 success (rejects are normal), 1 failure, 2 usage error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from dataprep.cli.help import DefaultsFormatter, add_global_flags, package_version
from dataprep.cli.interrupts import keep_interrupts
from dataprep.cli.read_commands import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    add_read_parsers,
    run_index,
    run_info,
    run_verify,
)
from dataprep.cli.shard_command import add_shard_parser, config_from_args, run_shard
from dataprep.errors import DataprepError, OutputExistsError, UsageError

__all__ = ["build_parser", "config_from_args", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: ``dataprep [-v] [--version] shard|verify|info|index [-v] ...``."""
    parser = argparse.ArgumentParser(prog="dataprep", description="Clean raw datasets and shard them for fast loading.",
                                     formatter_class=DefaultsFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s (shardfeed) {package_version()}")
    add_global_flags(parser, on_subcommand=False)
    sub = parser.add_subparsers(dest="command", required=True)
    add_shard_parser(sub)
    add_read_parsers(sub)
    for command in sub.choices.values():
        command.formatter_class = DefaultsFormatter
        add_global_flags(command, on_subcommand=True)
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
        status = _run(args, argv)
        sys.stdout.flush()  # here, where a reader that closed the pipe (``| head``) is caught below
        return status
    except BrokenPipeError:
        return _reader_gone()
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


def _reader_gone() -> int:
    """The command's work is done and its reader stopped reading (``dataprep info OUT | head -5``): exit quietly,
    status 0, with stdout pointed at the null device so that Python's own flush at exit cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
