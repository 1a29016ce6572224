"""Argument checks shared by the token modules: non-negative / positive ints, and an item -> (index, epoch)."""

from __future__ import annotations

import numpy as np

from loaders.errors import ConfigError
from loaders.read.sampler import SampleIndex

__all__ = ["check_int", "resolve_item"]


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int, or ConfigError "'name' must be ..." when it is not an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "a positive int" if minimum == 1 else f"an int >= {minimum}" if minimum else "a non-negative int"
        raise ConfigError(f"{name!r} must be {kind} (got {value!r} that is a {type(value).__name__})")
    return int(value)


def resolve_item(item: object, epoch: int) -> tuple[int, int]:
    """(index, epoch) of a dataset item: a ``SampleIndex`` carries its epoch, a plain int reads ``epoch``."""
    if isinstance(item, SampleIndex):
        return int(item.index), int(item.epoch)
    if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        return int(item), epoch
    raise TypeError(f"index must be an int or SampleIndex (got {item!r} that is a {type(item).__name__})")
