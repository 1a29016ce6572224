"""The command line's value types: each parses one argument's text or raises ``ArgumentTypeError``."""

from __future__ import annotations

import argparse

from dataprep.formats.sizes import parse_bytes


def byte_size(text: str) -> int:
    """A byte size: 4096, 64MB, 256MiB, 1.5GB."""
    try:
        return parse_bytes(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def byte_size_or_auto(text: str) -> int | None:
    """A byte size, or ``auto`` (None: the command chooses)."""
    return None if text.strip().lower() == "auto" else byte_size(text)


def fraction(text: str) -> float:
    """A fraction within [0, 1]."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within [0, 1] (got {text})")
    return value


def seconds(text: str) -> float:
    """Seconds in (0, 3600]."""
    value = float(text)
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be a number of seconds in (0, 3600] (got {text})")
    return value


def positive(text: str) -> int:
    """An integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {text})")
    return value


def count(text: str) -> int:
    """An integer >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 (got {text})")
    return value
