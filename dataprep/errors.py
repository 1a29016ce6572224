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
reason code (see ``dataprep.inputs.records``).

Argument checks (below the tree) give every message one form, ``'name' must be EXPECTED (got
VALUE that is a TYPE)``; the exception class is the caller's (``UsageError`` for user options,
``ValueError`` or ``TypeError`` for programming errors in library calls).
"""

from __future__ import annotations

import enum
from typing import TypeGuard, TypeVar


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


# Argument checks, validated once at construction.
E = TypeVar("E", bound=enum.Enum)


def type_name(value: object) -> str:
    return type(value).__name__


def bad_argument(name: str, expected: str, value: object, error: type[Exception]) -> Exception:
    """The exception for argument ``name``: ``'name' must be EXPECTED (got VALUE that is a TYPE)``."""
    return error(f"'{name}' must be {expected} (got {value!r} that is a {type_name(value)})")


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool (``True`` is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _int_wording(minimum: int, maximum: int | None) -> str:
    if maximum is not None:
        return f"an int within {minimum}..{maximum}"
    return {0: "a non-negative int", 1: "a positive int"}.get(minimum, f"an int >= {minimum}")


def require_int(name: str, value: object, *, minimum: int, maximum: int | None = None, optional: bool = False,
              expected: str | None = None, error: type[Exception]) -> None:
    """Raise ``error`` unless ``value`` is an int (not a bool) in ``[minimum, maximum]`` (or None when ``optional``).

    ``expected``: the wording of the message (default: "a positive int", "a non-negative int",
    "an int within A..B" or "an int >= N", plus " or None" when optional).
    """
    if optional and value is None:
        return
    if is_int(value) and minimum <= value and (maximum is None or value <= maximum):
        return
    wording = expected or _int_wording(minimum, maximum) + (" or None" if optional else "")
    raise bad_argument(name, wording, value, error)


def require_bool(name: str, value: object, *, error: type[Exception]) -> None:
    """Raise ``error`` unless ``value`` is a bool."""
    if type(value) is not bool:
        raise bad_argument(name, "a bool", value, error)


def as_enum(name: str, cls: type[E], value: object, *, error: type[Exception]) -> E:
    """``value`` as a member of ``cls`` (a member, or its value); ``error`` names the choices."""
    if isinstance(value, cls):
        return value
    choices = ", ".join(repr(m.value) for m in cls)
    try:
        return cls(value)
    except ValueError:
        raise bad_argument(name, f"one of {choices}", value, error) from None
