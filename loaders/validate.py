"""The one validator module of loaders: argument checks with messages of one form.

Every message reads ``'name' must be <what> (got <value> that is a <type>)`` (a choice:
``'name' must be one of 'a', 'b' (got <value>)``), raised as ``loaders.errors.ConfigError``
(a ValueError), at construction or where a value enters.
"""

from __future__ import annotations

import enum
from typing import TypeVar

import numpy as np

from loaders.errors import ConfigError

__all__ = ["check_bool", "check_choice", "check_int", "invalid", "is_count"]

E = TypeVar("E", bound=enum.StrEnum)


def invalid(name: str, expected: str, value: object) -> ConfigError:
    """``ConfigError("'name' must be <expected> (got <value> that is a <type>)")``, to raise."""
    return ConfigError(f"{name!r} must be {expected} (got {value!r} that is a {type(value).__name__})")


def is_count(value: object) -> bool:
    """True for a non-negative Python int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_int(name: str, value: object, minimum: int = 0) -> int:
    """``value`` as an int (numpy ints accepted; bools and floats not); ConfigError below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "a positive int" if minimum == 1 else f"an int >= {minimum}" if minimum else "a non-negative int"
        raise invalid(name, kind, value)
    return int(value)


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a bool, else ConfigError."""
    if not isinstance(value, bool):
        raise invalid(name, "a bool", value)
    return value


def check_choice(name: str, value: object, kind: type[E]) -> E:
    """``value`` as a member of the StrEnum ``kind``; ConfigError naming every choice."""
    if isinstance(value, str):  # the members are strings
        try:
            return kind(value)
        except ValueError as err:
            raise _not_one_of(name, value, kind) from err
    raise _not_one_of(name, value, kind)


def _not_one_of(name: str, value: object, kind: type[enum.StrEnum]) -> ConfigError:
    choices = ", ".join(repr(member.value) for member in kind)
    return ConfigError(f"{name!r} must be one of {choices} (got {value!r})")
