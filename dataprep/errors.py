"""Exceptions raised by dataprep.

Tree::

    DataprepError
    ├── UsageError          bad arguments or RAW/OUT paths (CLI exit status 2)
    ├── OutputExistsError   OUT holds output of a different command (use --overwrite)
    ├── FormatError         a shard, index sidecar, manifest, or a seen-set store is malformed or unsupported
    ├── VerifyError         a shard or index does not match the manifest
    ├── RejectBudgetError   more inputs rejected than --max-reject-fraction allows
    ├── RangeTaskError      a range task failed on the cluster after its retries (--engine ray)
    └── WorkerCrashError    a worker process died (e.g. a decoder crashed) on one of some inputs

Per-input problems are not exceptions: cleaning turns them into a ``Reject`` with a
reason code (see ``dataprep.records``).
"""

from __future__ import annotations


class DataprepError(Exception):
    """Base class of every error dataprep raises on purpose."""


class UsageError(DataprepError):
    """Bad command-line arguments or input/output paths."""


class OutputExistsError(DataprepError):
    """The output directory holds output of a different command."""


class FormatError(DataprepError):
    """A shard, index sidecar or manifest, or a seen-set store, is malformed, truncated or of an unknown version."""


class VerifyError(DataprepError):
    """A shard or its index does not match what the manifest records."""


class RejectBudgetError(DataprepError):
    """The fraction of rejected inputs exceeded ``--max-reject-fraction``."""


class WorkerCrashError(DataprepError):
    """A worker process died while processing ``items`` (one of them is the likely cause)."""

    def __init__(self, message: str, items: list[object]) -> None:
        super().__init__(message)
        self.items = items

    def __reduce__(self) -> tuple[type[WorkerCrashError], tuple[str, list[object]]]:
        return type(self), (str(self), self.items)  # picklable: it crosses from a forked child


class RangeTaskError(DataprepError):
    """A range task failed on the Ray cluster after its retries; a rerun resumes from the ranges completed."""
