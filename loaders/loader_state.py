"""The DataLoader's resume state: its keys, the consumer's progress through the epochs, checks on a loaded state.

A state is a flat dict of plain values (ints, a list, the sampler's own state) under the
``KEY_*`` names, with ``version``. ``Progress`` is what it is made from and restored
into; ``check_state`` and ``check_replayable`` refuse a state the loader cannot honour;
``start_transform_epoch`` hands the progress to a device transform keyed by batch position.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch.utils.data import BatchSampler, SequentialSampler

from loaders.collate import BatchOutcome, Skip
from loaders.errors import ConfigError

__all__ = [
    "Delivery",
    "KEY_BATCHES_AHEAD",
    "KEY_BATCHES_CONSUMED",
    "KEY_BATCH_SIZE",
    "KEY_DATASET_LEN",
    "KEY_EPOCH",
    "KEY_SAMPLER",
    "KEY_SAMPLES_SEEN",
    "KEY_SEED",
    "KEY_SKIPPED",
    "KEY_VERSION",
    "Progress",
    "STATE_KEYS",
    "STATE_VERSION",
    "build_state",
    "check_replayable",
    "check_state",
    "has_state",
    "is_deterministic",
    "length_or_none",
    "start_transform_epoch",
]

STATE_VERSION = 1
KEY_VERSION = "version"
KEY_EPOCH = "epoch"
KEY_BATCHES_CONSUMED = "batches_consumed"
KEY_BATCHES_AHEAD = "batches_ahead"  # received out of order (in_order=False) past the prefix
KEY_SAMPLES_SEEN = "samples_seen"
KEY_SKIPPED = "skipped"
KEY_SEED = "seed"
KEY_BATCH_SIZE = "batch_size"
KEY_DATASET_LEN = "dataset_len"
KEY_SAMPLER = "sampler"
# Required in a loaded state; KEY_BATCHES_AHEAD is optional (absent: none ahead).
STATE_KEYS = (KEY_VERSION, KEY_EPOCH, KEY_BATCHES_CONSUMED, KEY_SAMPLES_SEEN, KEY_SKIPPED, KEY_SEED,
              KEY_BATCH_SIZE, KEY_DATASET_LEN, KEY_SAMPLER)


@dataclass
class Progress:
    """Where the consumer is in the epochs; what ``state_dict`` saves."""

    epoch: int = 0
    consumed: int = 0  # batch positions 0..consumed-1 all received this epoch
    ahead: set[int] = field(default_factory=set)  # received past the prefix (in_order=False)
    samples_seen: int = 0  # samples received in batches, all epochs
    skipped: int = 0  # samples skipped this epoch
    in_epoch: bool = False  # an iteration of `epoch` started and has not finished
    resume_pending: bool = False  # loaded from a state: the next iteration continues `epoch`
    total_batches: int | None = None  # batches in this epoch; None while unknown (iterable datasets)
    epoch_samples: int = 0  # samples in this epoch, for a fractional skip budget
    sizes: dict[int, int] = field(default_factory=dict)  # position -> samples requested, for advance()

    def receive(self, position: int) -> list[int]:
        """Record batch ``position`` as received; returns the positions that joined the prefix."""
        if position < 0:  # iterable dataset: batches arrive in order, unnumbered
            self.consumed += 1
            return []
        self.ahead.add(position)
        joined = []
        while self.consumed in self.ahead:
            self.ahead.remove(self.consumed)
            joined.append(self.consumed)
            self.consumed += 1
        return joined

    def receive_delivery(self, delivery: Delivery, advance: Callable[[int], Any] | None) -> None:
        """Record the batches of ``delivery``; ``advance(samples)`` tells a sampler each batch joining the prefix."""
        for position in delivery.positions:
            for joined in self.receive(position):
                if callable(advance):
                    advance(self.sizes.pop(joined, 0))
        self.samples_seen += delivery.num_samples

    def plan(self, listed: list[list[Any]], *, epoch_samples: int | None,
             after_prefix: bool) -> list[tuple[int, list[Any]]]:
        """(position, indices) of the ``listed`` batches not yet received, in order; sets the epoch's totals.

        after_prefix: ``listed`` holds only the batches after the received prefix (a
        sampler restored from its own state lists no more). epoch_samples: the sampler's
        length, None when it has none (then counted from ``listed``).
        """
        base = self.consumed if after_prefix else 0
        self.total_batches = base + len(listed)
        self.epoch_samples = sum(map(len, listed)) if epoch_samples is None else epoch_samples
        remaining = [(base + i, batch) for i, batch in enumerate(listed) if base + i >= self.consumed]
        # Sizes of every remaining position, those received ahead included: advance() needs them all.
        self.sizes = {position: len(batch) for position, batch in remaining}
        jobs = [(position, batch) for position, batch in remaining if position not in self.ahead]
        if self.consumed >= self.total_batches:
            self.next_epoch()  # resumed exactly at the end: nothing left of this epoch
        return jobs

    def next_epoch(self, epoch: int | None = None) -> None:
        self.epoch = self.epoch + 1 if epoch is None else epoch
        self.consumed, self.ahead, self.skipped, self.sizes = 0, set(), 0, {}
        self.in_epoch = self.resume_pending = False
        self.total_batches = None

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from a checked ``state``: the next iteration reads the rest of its epoch."""
        self.next_epoch(int(state[KEY_EPOCH]))
        self.consumed, self.ahead = int(state[KEY_BATCHES_CONSUMED]), set(state.get(KEY_BATCHES_AHEAD, ()))
        self.samples_seen, self.skipped = int(state[KEY_SAMPLES_SEEN]), int(state[KEY_SKIPPED])
        self.resume_pending = True


@dataclass
class Delivery:
    """What one batch handed to the consumer accounts for (with fully skipped batches before it)."""

    positions: list[int] = field(default_factory=list)
    num_samples: int = 0
    skips: list[Skip] = field(default_factory=list)

    def add(self, outcome: BatchOutcome) -> None:
        self.positions.append(outcome.position)
        self.num_samples += outcome.num_samples
        self.skips.extend(outcome.skips)


def build_state(progress: Progress, *, seed: int, batch_size: int | None, dataset_len: int | None,
                sampler: Any) -> dict[str, Any]:
    """The resume state of a loader at ``progress``; ``sampler`` is the sampler's own state or None."""
    return {
        KEY_VERSION: STATE_VERSION,
        KEY_EPOCH: progress.epoch,
        KEY_BATCHES_CONSUMED: progress.consumed,
        KEY_BATCHES_AHEAD: sorted(progress.ahead),
        KEY_SAMPLES_SEEN: progress.samples_seen,
        KEY_SKIPPED: progress.skipped,
        KEY_SEED: seed,
        KEY_BATCH_SIZE: batch_size,
        KEY_DATASET_LEN: dataset_len,
        KEY_SAMPLER: sampler,
    }


def check_state(state: object, *, dataset_len: int | None, batch_size: int | None, seed: int | None) -> None:
    """ConfigError unless ``state`` is a complete state of this version from the same setup.

    ``seed`` None: the loader's seed was drawn, not given, so the saved one is adopted instead.
    """
    if not isinstance(state, Mapping):
        raise ConfigError(f"DataLoader state must be a mapping (got {type(state).__name__})")
    missing = [key for key in STATE_KEYS if key not in state]
    if missing:
        raise ConfigError(f"DataLoader state lacks {', '.join(map(repr, missing))} (got keys {sorted(state)})")
    if state[KEY_VERSION] != STATE_VERSION:
        raise ConfigError(f"DataLoader state version: expected {STATE_VERSION}, got {state[KEY_VERSION]!r}")
    expected: dict[str, Any] = {KEY_DATASET_LEN: dataset_len, KEY_BATCH_SIZE: batch_size}
    if seed is not None:
        expected[KEY_SEED] = seed
    for key, value in expected.items():
        if state[key] != value:
            raise ConfigError(f"DataLoader state {key!r}: expected {value!r} (this loader), got {state[key]!r}; "
                              "resume with the same dataset, batch size and seed")


def check_replayable(part: Any, *, iterable: bool) -> None:
    """ConfigError unless the order of ``part`` (the sampler whose state is saved) can be listed again."""
    if iterable:
        raise ConfigError("cannot resume an IterableDataset mid-epoch: the loader does not know its order; "
                          "resume at an epoch boundary or make the dataset resume itself")
    if not is_deterministic(part):
        raise ConfigError(f"cannot resume mid-epoch with {type(part).__name__}: its order is not reproducible; "
                          "use shuffle=True (a seeded, resumable order), SequentialSampler, or a sampler "
                          "with state_dict()/load_state_dict()")


def has_state(part: Any) -> bool:
    """True when ``part`` has ``state_dict()`` and ``load_state_dict()``."""
    return callable(getattr(part, "state_dict", None)) and callable(getattr(part, "load_state_dict", None))


def is_deterministic(part: Any) -> bool:
    """True when listing ``part`` again gives the same order (or it restores its own)."""
    if has_state(part) or isinstance(part, (SequentialSampler, range, list, tuple)):
        return True
    return isinstance(part, BatchSampler) and is_deterministic(part.sampler)


def length_or_none(sized: Any) -> int | None:
    """``len(sized)`` (a dataset, a sampler), or None when it has no length."""
    try:
        return len(sized)
    except TypeError:
        return None


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
