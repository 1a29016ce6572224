"""The one owner of (epoch, position): where the training loop is, and the DataLoader's resume state.

``Progress`` moves only when a batch is handed to the training loop (``receive``); every
other stage is told the epoch and position with each job and batch. ``Delivery`` is
what one handed-over batch accounts for. The state is a small nest under the ``KEY_*``
names, one key per stage that holds state::

    {"version": 2, "epoch": 3, "position": 17, "ahead": [],
     "seed": 11, "batch_size": 32, "dataset_len": 50000,
     "plan": {"sampler": None, "world_size": 8}, "failures": {"epoch": 3, "skipped": 0},
     "accounting": {"samples_seen": 10112, "completed_epoch": None}}

A packing or mixture stage would add its own key (its leftover tokens, its mixture
position) beside ``plan``; ``check_state`` refuses a state the loader cannot honour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from loaders.errors import ConfigError
from loaders.loader.fetch import Skip

__all__ = [
    "KEY_ACCOUNTING",
    "KEY_AHEAD",
    "KEY_BATCH_SIZE",
    "KEY_COMPLETED",
    "KEY_DATASET_LEN",
    "KEY_EPOCH",
    "KEY_FAILURES",
    "KEY_PLAN",
    "KEY_POSITION",
    "KEY_SAMPLES_SEEN",
    "KEY_SEED",
    "KEY_VERSION",
    "STATE_KEYS",
    "STATE_VERSION",
    "Delivery",
    "Progress",
    "check_state",
]

STATE_VERSION = 2
KEY_VERSION = "version"
KEY_EPOCH = "epoch"
KEY_POSITION = "position"  # batches 0..position-1 of the epoch all handed to the training loop
KEY_AHEAD = "ahead"  # positions handed over past that prefix (in_order=False)
KEY_SEED = "seed"
KEY_BATCH_SIZE = "batch_size"
KEY_DATASET_LEN = "dataset_len"
KEY_PLAN = "plan"
KEY_FAILURES = "failures"
KEY_ACCOUNTING = "accounting"
KEY_SAMPLES_SEEN = "samples_seen"
KEY_COMPLETED = "completed_epoch"  # in the accounting nest: the epoch whose last batch moved us here, else None
STATE_KEYS = (KEY_VERSION, KEY_EPOCH, KEY_POSITION, KEY_AHEAD, KEY_SEED, KEY_BATCH_SIZE, KEY_DATASET_LEN, KEY_PLAN,
              KEY_FAILURES, KEY_ACCOUNTING)


@dataclass
class Delivery:
    """What one batch handed to the training loop accounts for (with fully skipped batches before it)."""

    epoch: int = 0
    positions: list[int] = field(default_factory=list)
    num_samples: int = 0
    skips: list[Skip] = field(default_factory=list)


@dataclass
class Progress:
    """Where the training loop is: the epoch, the batches received, the samples seen."""

    epoch: int = 0
    position: int = 0  # batch positions 0..position-1 all received this epoch
    ahead: set[int] = field(default_factory=set)  # received past the prefix (in_order=False)
    samples_seen: int = 0  # samples received in batches, all epochs
    resume_pending: bool = False  # loaded from a state: the next iteration continues `epoch`
    completed: int | None = None  # the epoch whose last batch started this one (position 0), else None

    def snapshot(self) -> Progress:
        """A copy, to return to when an iteration turns out to have been a probe."""
        return replace(self, ahead=set(self.ahead))

    def receive(self, delivery: Delivery) -> None:
        """Record the batches of ``delivery`` as handed to the training loop."""
        if delivery.positions:
            self.completed = None  # reading this epoch now: no longer just after the last one
        for position in delivery.positions:
            if position < 0:  # iterable dataset: batches arrive in order, unnumbered
                self.position += 1
                continue
            self.ahead.add(position)
            while self.position in self.ahead:
                self.ahead.remove(self.position)
                self.position += 1
        self.samples_seen += delivery.num_samples

    def next_epoch(self, epoch: int | None = None) -> None:
        """Start ``epoch`` (default: the next one) from its first batch."""
        self.epoch = self.epoch + 1 if epoch is None else epoch
        self.position, self.ahead, self.resume_pending, self.completed = 0, set(), False, None

    def finish_epoch(self) -> None:
        """The last batch of the epoch is in hand: start the next one, remembering which one ended.

        A state saved now says "epoch e + 1, position 0, e completed", so a resumed loop that
        calls ``set_epoch(e)`` (the loop variable of the epoch it was in) gets nothing more of e.
        """
        done = self.epoch
        self.next_epoch()
        self.completed = done

    def is_just_after(self, epoch: int) -> bool:
        """Restored from a state saved right after ``epoch``'s last batch, and nothing read since."""
        return self.resume_pending and self.completed == epoch and self.position == 0 and not self.ahead

    def state(self) -> dict[str, Any]:
        """The owner's part of the state: epoch, position, ahead, and the accounting nest."""
        return {KEY_EPOCH: self.epoch, KEY_POSITION: self.position, KEY_AHEAD: sorted(self.ahead),
                KEY_ACCOUNTING: {KEY_SAMPLES_SEEN: self.samples_seen, KEY_COMPLETED: self.completed}}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from a checked ``state``: the next iteration reads the rest of its epoch."""
        self.epoch, self.position = int(state[KEY_EPOCH]), int(state[KEY_POSITION])
        self.ahead = {int(p) for p in state[KEY_AHEAD]}
        self.samples_seen = int(state[KEY_ACCOUNTING][KEY_SAMPLES_SEEN])
        completed = state[KEY_ACCOUNTING].get(KEY_COMPLETED)  # absent in states saved before it was kept
        self.completed = int(completed) if _is_count(completed) else None
        self.resume_pending = True


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_state(state: object, *, dataset_len: int | None, batch_size: int | None, seed: int | None) -> None:
    """ConfigError unless ``state`` is a complete state of this version from the same setup.

    ``seed`` None: the loader's seed was drawn, not given, so the saved one is adopted instead.
    """
    if not isinstance(state, Mapping):
        raise ConfigError(f"DataLoader state must be a mapping (got {type(state).__name__})")
    if state.get(KEY_VERSION) != STATE_VERSION:
        raise ConfigError(f"DataLoader state version: expected {STATE_VERSION}, got {state.get(KEY_VERSION)!r}; "
                          "resume with the loaders version that saved it")
    missing = [key for key in STATE_KEYS if key not in state]
    if missing:
        raise ConfigError(f"DataLoader state lacks {', '.join(map(repr, missing))} (got keys {sorted(state)})")
    for key in (KEY_EPOCH, KEY_POSITION):
        if not _is_count(state[key]):
            raise ConfigError(f"DataLoader state {key!r} must be a non-negative int (got {state[key]!r})")
    accounting = state[KEY_ACCOUNTING]
    if not isinstance(accounting, Mapping) or not _is_count(accounting.get(KEY_SAMPLES_SEEN)):
        raise ConfigError(f"DataLoader state {KEY_ACCOUNTING!r} must hold {KEY_SAMPLES_SEEN!r} (got {accounting!r})")
    expected: dict[str, Any] = {KEY_DATASET_LEN: dataset_len, KEY_BATCH_SIZE: batch_size}
    if seed is not None:
        expected[KEY_SEED] = seed
    for key, value in expected.items():
        if state[key] != value:
            raise ConfigError(f"DataLoader state {key!r}: expected {value!r} (this loader), got {state[key]!r}; "
                              "resume with the same dataset, batch size and seed")
