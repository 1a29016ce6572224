"""The failure stage: outcomes become ``Item``s; failed batches raise in their turn; skips are held to a budget.

``FailurePolicy.deliver`` turns the workers' ``BatchOutcome``s into ``Item``s, one value per
batch carrying its position, the batch and the ``Delivery`` it accounts for (a batch whose
samples were all skipped rides with the next one; trailing ones come as an item with no
batch, ``NO_BATCH``). A failed batch becomes ``Failed(error)``, which the pass raises in
its turn (its own class, ``loaders.loader.batch_outcome.failure_error``) and goes on after,
as torch's does. ``check_budget`` runs when a batch reaches the training loop (not when it
is built ahead), so a resume counts exactly what the saved run counted; the count itself
is the owner's (``Progress.skipped``), kept in the loader's state.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from loaders.errors import SkipBudgetError
from loaders.loader.batch_outcome import BatchOutcome, failure_error
from loaders.loader.fetch import Skip
from loaders.loader.progress import Delivery

__all__ = ["NO_BATCH", "Failed", "FailurePolicy", "Item", "is_batch"]

logger = logging.getLogger(__name__)

NO_BATCH = None  # an Item's batch when it only accounts for fully skipped batches at the end of a pass


@dataclass(frozen=True, slots=True)
class Failed:
    """Stands in for a batch whose reading failed: the pass raises ``error`` in the batch's turn."""

    error: BaseException


class Item(NamedTuple):
    """One batch on its way to the training loop: its position, the batch (or ``Failed``, or ``NO_BATCH``)
    and what it accounts for. A named tuple, so device copies map the batch and keep the rest."""

    position: int
    batch: Any
    delivery: Delivery


def is_batch(item: Item) -> bool:
    """Whether ``item`` carries a batch the training loop receives (not a failure, not only accounting)."""
    return item.batch is not NO_BATCH and not isinstance(item.batch, Failed)


class FailurePolicy:
    """Raise failures in their turn; hold skips to ``max_skips`` (a count, a fraction 0 < f < 1, or inf).

    kind: who reads ("main-thread", "thread", "process"), as failure notes name it.
    """

    def __init__(self, max_skips: int | float, kind: str) -> None:
        self.max_skips = max_skips
        self.kind = kind

    def deliver(self, outcomes: Iterator[BatchOutcome]) -> Iterator[Item]:
        """The items of ``outcomes``, in their order."""
        positions: list[int] = []
        skips: list[Skip] = []
        num_samples = 0
        epoch = 0
        for outcome in outcomes:
            epoch = outcome.epoch
            if outcome.failure is not None:  # handed over in its turn; the pass goes on after it
                if positions:
                    yield Item(positions[-1], NO_BATCH, Delivery(epoch, tuple(positions), num_samples, tuple(skips)))
                    positions, skips, num_samples = [], [], 0
                yield Item(outcome.position, Failed(failure_error(outcome, self.kind)),
                           Delivery(epoch, (outcome.position,)))
                continue
            positions.append(outcome.position)
            num_samples += outcome.num_samples
            skips.extend(outcome.skips)
            if outcome.batch is None:
                continue
            yield Item(outcome.position, outcome.batch, Delivery(epoch, tuple(positions), num_samples, tuple(skips)))
            positions, skips, num_samples = [], [], 0
        if positions:
            yield Item(positions[-1], NO_BATCH, Delivery(epoch, tuple(positions), num_samples, tuple(skips)))

    def check_budget(self, skipped: int, delivery: Delivery, epoch_samples: int | None) -> None:
        """Log the skips of ``delivery``, which would bring the epoch's to ``skipped + len(delivery.skips)``;
        SkipBudgetError past the budget (then the batch is not handed over)."""
        if not delivery.skips:
            return
        total = skipped + len(delivery.skips)
        for skip in delivery.skips:
            logger.warning("skipped sample %r in epoch %d: %s", skip.index, delivery.epoch, skip.error)
        allowed = self.allowed(epoch_samples)
        if total > allowed:
            last = delivery.skips[-1]
            of = f"{allowed} of {epoch_samples} samples" if epoch_samples is not None else f"{allowed} samples"
            raise SkipBudgetError(
                f"on_error='skip' skipped {total} samples in epoch {delivery.epoch}, more than "
                f"max_skips={self.max_skips} allows ({of}); last: sample {last.index!r}: {last.error}")

    def allowed(self, epoch_samples: int | None) -> float:
        """How many skips an epoch of ``epoch_samples`` samples may have (a fraction of an unknown length: 0)."""
        if isinstance(self.max_skips, float) and self.max_skips < 1:
            return math.floor(self.max_skips * epoch_samples) if epoch_samples is not None else 0
        return self.max_skips
