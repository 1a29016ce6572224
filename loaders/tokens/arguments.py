"""Argument checks shared by the token modules: non-negative / positive ints (``check_int``)."""

from __future__ import annotations

import numpy as np

from loaders.errors import ConfigError

__all__ = ["check_int"]


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int, or ConfigError "'name' must be ..." when it is not an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "a positive int" if minimum == 1 else f"an int >= {minimum}" if minimum else "a non-negative int"
        raise ConfigError(f"{name!r} must be {kind} (got {value!r} that is a {type(value).__name__})")
    return int(value)

