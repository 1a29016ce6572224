"""The loaders of this process that have been iterated, held weakly: what ``shardfeed-profile`` samples.

A DataLoader registers itself when an iteration starts (``register_live``); ``live_loaders`` lists
the ones still alive, oldest first, each with its number in registration order (a stable name for
reports). Weak references only: registering never keeps a loader, or its workers, alive.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

__all__ = ["live_loaders", "register_live"]

_NUMBERS = itertools.count()
_LIVE: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()  # registration (the training thread) and listing (a profiler's thread)


def register_live(loader: Any) -> None:
    """Remember ``loader`` (weakly) from its first iteration on; later calls keep its number."""
    with _LOCK:
        if loader not in _LIVE:
            _LIVE[loader] = next(_NUMBERS)


def live_loaders() -> list[tuple[int, Any]]:
    """(number, loader) of the registered loaders still alive, in registration order."""
    with _LOCK:
        found = [(number, loader) for loader, number in _LIVE.items()]
    return sorted(found, key=lambda pair: pair[0])
