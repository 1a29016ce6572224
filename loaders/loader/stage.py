"""The one shape of a stage with state: a ``key``, ``state_dict()``, ``load_state_dict(state)``.

The loader's state (``loaders.loader.progress``) nests each such stage's state under its
key, as torchdata's nodes do, so adding a stage adds a key, not a rewrite. Its state is
small and plain (ints, lists, a sampler's own state): it survives ``torch.save`` and
``torch.load(weights_only=True)``. A stage holds no copy of the loader's epoch or
position: it gets them with each item, or reads the owner (a ``Position``) when it
writes its state. Today's stateful stage is the batch source (``loaders.loader.batch_source``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from loaders.loader.progress import Where

__all__ = ["Position", "Stage"]


@runtime_checkable
class Stage(Protocol):
    """A stage whose progress must survive a resume."""

    key: str  # where its state sits in the loader's state

    def state_dict(self) -> dict[str, Any]:
        """Its state now (plain values)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (its nest in a checked loader state)."""
        ...


class Position(Protocol):
    """The owner of (epoch, position) as stages read it (``loaders.loader.progress.Progress``)."""

    def where(self) -> Where:
        """The current epoch, position and positions received ahead, as a value."""
        ...
