"""The contract every stateful stage of the loader's chain keeps, and where new stages go.

The chain (``loaders.loader.epoch_pass``)::

    plan -> workers -> failures -> device prefetch -> accounting
    (a mixture stage would replace or wrap the plan: it draws which dataset each batch
     comes from; a packing stage would follow the workers: token documents in, fixed-length
     sequences out, its leftover tokens carried over)

A stage receives the epoch and position with every item it handles, never through a
broadcast. One that holds state (plan, failures; mixture and packing would) has a
``key`` and the two methods below; the loader's state nests each stage's state under
its key (``loaders.loader.progress``), so adding a stage adds a key, not a rewrite. Its state
is small and plain (ints, lists, the sampler's own state), and a stage whose state
depends on the world size (a mixture's position per dataset, packing leftovers per
rank) must say how it is split or merged on a world-size change in its own
``load_state_dict``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["StatefulStage"]


@runtime_checkable
class StatefulStage(Protocol):
    """A stage whose progress must survive a resume."""

    key: str  # where its state sits in the loader's state

    def state_dict(self, epoch: int) -> dict[str, Any]:
        """Its state while the training loop is in ``epoch`` (told by the owner of the epoch)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (checked here, ConfigError when it cannot be honoured)."""
        ...
