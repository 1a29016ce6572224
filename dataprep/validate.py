"""Argument checks shared by dataprep's configuration objects (validated once, at construction).

Messages have one form, ``'name' must be EXPECTED (got VALUE that is a TYPE)``; the
exception class is the caller's (``UsageError`` for user options, ``ValueError`` or
``TypeError`` for programming errors in library calls).
"""

from __future__ import annotations

import enum
from typing import TypeGuard, TypeVar

E = TypeVar("E", bound=enum.Enum)


def type_name(value: object) -> str:
    return type(value).__name__


def invalid(name: str, expected: str, value: object, error: type[Exception]) -> Exception:
    """The exception for argument ``name``: ``'name' must be EXPECTED (got VALUE that is a TYPE)``."""
    return error(f"'{name}' must be {expected} (got {value!r} that is a {type_name(value)})")


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool (``True`` is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _int_wording(minimum: int, maximum: int | None) -> str:
    if maximum is not None:
        return f"an int within {minimum}..{maximum}"
    return {0: "a non-negative int", 1: "a positive int"}.get(minimum, f"an int >= {minimum}")


def check_int(name: str, value: object, *, minimum: int, maximum: int | None = None, optional: bool = False,
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
    raise invalid(name, wording, value, error)


def check_bool(name: str, value: object, *, error: type[Exception]) -> None:
    """Raise ``error`` unless ``value`` is a bool."""
    if type(value) is not bool:
        raise invalid(name, "a bool", value, error)


def as_enum(name: str, cls: type[E], value: object, *, error: type[Exception]) -> E:
    """``value`` as a member of ``cls`` (a member, or its value); ``error`` names the choices."""
    if isinstance(value, cls):
        return value
    choices = ", ".join(repr(m.value) for m in cls)
    try:
        return cls(value)
    except ValueError:
        raise invalid(name, f"one of {choices}", value, error) from None
