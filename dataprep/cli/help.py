"""How the command line is shown and shared: each option's default in its help, the flags every sub-command
takes (before or after its name), the version."""

from __future__ import annotations

import argparse
from importlib import metadata

__all__ = ["DefaultsFormatter", "add_global_flags", "package_version"]

DISTRIBUTION = "shardfeed"


class DefaultsFormatter(argparse.HelpFormatter):
    """Help that ends each option's text with ``(default: VALUE)`` unless the text names its default itself.

    Flags (``store_true``) are off unless given and say nothing; an option whose default is None
    names in its own text what happens without it (the test of the command line checks both).
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default is argparse.SUPPRESS
        if "default" in text or not action.option_strings or unset:
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def add_global_flags(parser: argparse.ArgumentParser, *, on_subcommand: bool) -> None:
    """``-v/--verbose`` on ``parser``. On a sub-command its default is left unset, so that a flag given before the
    sub-command's name is not undone by its absence after it."""
    parser.add_argument("-v", "--verbose", action="store_true",
                        default=argparse.SUPPRESS if on_subcommand else False,
                        help="log details to stderr, and draw the progress line there even when it is not a "
                             "terminal; before or after the sub-command")


def package_version() -> str:
    """The installed version of the distribution (its metadata), or ``unknown`` when it is not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"
