"""Pinning batches: page-locked host memory, so host-to-device copies can run asynchronously.

``pinned_collate`` collates straight into pinned memory (the zero-copy path of thread
workers and the main thread: no second copy by a pin-memory thread); ``PinAfter`` pins
what a user's collate_fn returns (a copy, as torch's pin-memory thread makes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch.utils.data._utils.pin_memory import pin_memory as pin_nested

from loaders.loader.collate import default_collate

__all__ = ["PinAfter", "pin_nested", "pinned_collate"]


def pinned_collate(samples: Sequence[Any]) -> Any:
    """``default_collate(samples, pin_memory=True)`` as a plain function (picklable)."""
    return default_collate(samples, pin_memory=True)


@dataclass(frozen=True)
class PinAfter:
    """A user's collate_fn, then its tensors pinned (a copy, as torch's pin-memory thread makes)."""

    collate_fn: Callable[[Any], Any]

    def __call__(self, samples: Any) -> Any:
        return pin_nested(self.collate_fn(samples))
