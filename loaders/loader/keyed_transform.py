"""Keying a device transform by the batch it transforms: (epoch, batch position, rank), passed as data.

A transform that takes ``epoch=`` and ``batch_index=`` (``loaders.augment.Augment``;
``rank=`` too when it takes it) gets each batch's own position, so its randomness is
the same however batches were produced, skipped, reordered or resumed. One with only
``set_epoch`` is told where the epoch (re)starts and counts calls from there.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["accepts_keywords", "positioned", "start_transform_epoch"]


def positioned(transform: Callable[..., Any], *, epoch: int, rank: int, start: int) -> Callable[[int, Any], Any]:
    """``transform`` as ``f(position, batch)`` for batches of ``epoch`` on ``rank``; ``start``: batches
    already consumed (for a transform that counts its calls from its ``set_epoch``)."""
    if accepts_keywords(transform, "epoch", "batch_index"):
        if accepts_keywords(transform, "rank"):
            return lambda position, batch: transform(batch, epoch=epoch, batch_index=position, rank=rank)
        return lambda position, batch: transform(batch, epoch=epoch, batch_index=position)
    start_transform_epoch(transform, epoch, start)
    return lambda position, batch: transform(batch)


def start_transform_epoch(transform: Any, epoch: int, start_index: int) -> None:
    """Key ``transform``'s randomness by (epoch, batch position) through its ``set_epoch``, if it has one.

    The prefetcher calls it ahead of the consumer, so the calls it counts run ahead of
    the batches received: restarting the count at each epoch, from ``start_index`` (the
    batches already consumed, after a resume), gives every batch the same parameters as in
    an uninterrupted run. A ``set_epoch(epoch)`` without ``start_index`` gets the epoch only.
    """
    set_epoch = getattr(transform, "set_epoch", None)
    if not callable(set_epoch):
        return
    if _accepts_keyword(set_epoch, "start_index"):
        set_epoch(epoch, start_index=start_index)
        return
    if start_index:
        warnings.warn(f"{type(transform).__name__}.set_epoch takes no 'start_index': resumed at batch {start_index} "
                      f"of epoch {epoch}, its batches are numbered from 0, unlike in the uninterrupted run",
                      stacklevel=3)
    set_epoch(epoch)


def accepts_keywords(fn: Callable[..., Any], *names: str) -> bool:
    """True when ``fn`` can be called with every keyword in ``names``."""
    return all(_accepts_keyword(fn, name) for name in names)


def _accepts_keyword(fn: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read (some builtins and extensions)
        return False
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return True
    return name in parameters and parameters[name].kind is not inspect.Parameter.POSITIONAL_ONLY
