"""The failure stage: failed batches raise, skipped samples are counted against the epoch's budget.

``deliver`` turns the workers' ``BatchOutcome``s into (position, batch) pairs plus the
``Delivery`` each accounts for (a batch whose samples were all skipped rides with the
next one); a failed batch becomes ``Failed(error)``, which the iterator raises in its
turn (its own class, ``loaders.loader.batch_outcome.failure_error``), and the pass goes on after it,
as torch's does.
``record`` counts skips when a batch reaches the training loop (not when it is built
ahead), so a resume counts exactly what the saved run had counted.

State: ``{"epoch": e, "skipped": n}``, the skips of epoch ``e``; a new epoch starts at 0.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from loaders.errors import ConfigError, SkipBudgetError
from loaders.loader.batch_outcome import BatchOutcome, failure_error
from loaders.loader.progress import Delivery

__all__ = ["KEY_SKIPPED", "Failed", "FailurePolicy"]

logger = logging.getLogger(__name__)

KEY_FAILURE_EPOCH = "epoch"
KEY_SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Failed:
    """Stands in for a batch whose reading failed: the iterator raises ``error`` in the batch's turn."""

    error: BaseException


class FailurePolicy:
    """Raise failures; count skips per epoch against ``max_skips`` (a count, a fraction 0 < f < 1, or inf)."""

    key = "failures"

    def __init__(self, max_skips: int | float) -> None:
        self.max_skips = max_skips
        self._epoch = 0
        self._skipped = 0

    def skipped(self, epoch: int) -> int:
        """Samples skipped so far in ``epoch``."""
        return self._skipped if epoch == self._epoch else 0

    def deliver(self, outcomes: Iterator[BatchOutcome], deliveries: deque[Delivery], kind: str
                ) -> Iterator[tuple[int, Any]]:
        """(position, batch) pairs of ``outcomes``; appends the Delivery of each to ``deliveries``."""
        pending: Delivery | None = None
        for outcome in outcomes:
            if outcome.failure is not None:  # handed over in its turn; the pass goes on after it
                if pending is not None:
                    deliveries.append(pending)
                    pending = None
                deliveries.append(Delivery(outcome.epoch, [outcome.position]))
                yield outcome.position, Failed(failure_error(outcome, kind))
                continue
            if pending is None:
                pending = Delivery(outcome.epoch)
            pending.positions.append(outcome.position)
            pending.num_samples += outcome.num_samples
            pending.skips.extend(outcome.skips)
            if outcome.batch is None:
                continue
            deliveries.append(pending)
            pending = None
            yield outcome.position, outcome.batch
        if pending is not None:
            deliveries.append(pending)

    def record(self, delivery: Delivery, epoch_samples: int | None) -> None:
        """Count the skips of a delivered batch; SkipBudgetError past the budget."""
        if delivery.epoch != self._epoch:
            self._epoch, self._skipped = delivery.epoch, 0
        if not delivery.skips:
            return
        self._skipped += len(delivery.skips)
        for skip in delivery.skips:
            logger.warning("skipped sample %r in epoch %d: %s", skip.index, delivery.epoch, skip.error)
        allowed = self.allowed(epoch_samples)
        if self._skipped > allowed:
            last = delivery.skips[-1]
            of = f"{allowed} of {epoch_samples} samples" if epoch_samples is not None else f"{allowed} samples"
            raise SkipBudgetError(
                f"on_error='skip' skipped {self._skipped} samples in epoch {delivery.epoch}, more than "
                f"max_skips={self.max_skips} allows ({of}); last: sample {last.index!r}: {last.error}")

    def allowed(self, epoch_samples: int | None) -> float:
        """How many skips an epoch of ``epoch_samples`` samples may have (a fraction of an unknown length: 0)."""
        if isinstance(self.max_skips, float) and self.max_skips < 1:
            return math.floor(self.max_skips * epoch_samples) if epoch_samples is not None else 0
        return self.max_skips

    def state_dict(self, epoch: int) -> dict[str, int]:
        """``{"epoch": epoch, "skipped": n}``: the skips counted in the training loop's ``epoch``."""
        return {KEY_FAILURE_EPOCH: epoch, KEY_SKIPPED: self.skipped(epoch)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            epoch, skipped = int(state[KEY_FAILURE_EPOCH]), int(state[KEY_SKIPPED])
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"DataLoader state 'failures' must hold int {KEY_FAILURE_EPOCH!r} and "
                              f"{KEY_SKIPPED!r} (got {state!r})") from err
        self._epoch, self._skipped = epoch, skipped
