"""loaders.profiler: ``shardfeed-profile``, a training script's own run profiled (see README.md here).

Public API: ``profile`` (run a ``Target`` with its loaders sampled, write the report), ``Target``,
``StatsSampler``, ``build_report`` and ``REPORT_VERSION`` (the report document), ``main`` (the command).
"""

from __future__ import annotations

from loaders.profiler.cli import main
from loaders.profiler.report import REPORT_VERSION, build_report
from loaders.profiler.run import Target
from loaders.profiler.sampler import StatsSampler
from loaders.profiler.session import profile

__all__ = ["REPORT_VERSION", "StatsSampler", "Target", "build_report", "main", "profile"]
