"""The ``dataprep`` command line (``main``): argument parsing and output only; ``python -m dataprep.cli``."""

from __future__ import annotations

from dataprep.cli.main import build_parser, config_from_args, main

__all__ = ["build_parser", "config_from_args", "main"]
