"""The one owner of (epoch, position): where the training loop is, the rules that move it, the state's keys.

``Progress`` moves when a batch is handed to the training loop (``receive``) and when the
user says so (``set_epoch``, ``restore``); nothing else in the loader keeps a copy. The
other stages get the epoch and position with each job and batch (``Where`` for a pass's
start, ``Delivery`` for what a handed-over batch accounts for), or read them here (a
batch source's ``state_dict``). The rules of passes live here too, in one place:

- a pass abandoned after at most one batch (a peek, a shape probe) is a *probe*: the
  next primary pass, ``set_epoch`` or ``state_dict`` finds the epoch where the probe
  found it (``undo_probe``); a pass abandoned later counts as the epoch (``settle``);
- ``set_epoch(e)`` after ``load_state_dict`` of epoch e keeps the resume; right after
  the last batch of e it leaves nothing of e; otherwise it starts e from its first batch;
- ``restore``: the next pass continues the saved epoch from the saved position.

The loader's state (version 4) is a small nest under the ``KEY_*`` names::

    {"version": 4, "epoch": 3, "position": 17, "ahead": [],
     "seed": 11, "batch_size": 32, "dataset_len": 50000,
     "failures": {"epoch": 3, "skipped": 0},
     "accounting": {"samples_seen": 10112, "completed_epoch": None},
     "plan": {"sampler": None, "world_size": 8}}

where the last key is the batch source's (``loaders.loader.batch_source``): its ``key``,
its ``state_dict()`` (``"samples"`` or ``"tokens"`` for a dataset read by global position,
``loaders.loader.global_source``, which reads the older shapes of versions 3 and 2).
``check_state`` refuses a state this loader cannot honour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from loaders.state_keys import KEY_BATCH_SIZE, KEY_EPOCH, KEY_SEED, KEY_VERSION
from loaders.errors import ConfigError
from loaders.loader.fetch import Skip
from loaders.validate import is_count

__all__ = [
    "KEY_ACCOUNTING",
    "KEY_AHEAD",
    "KEY_BATCH_SIZE",
    "KEY_COMPLETED",
    "KEY_DATASET_LEN",
    "KEY_EPOCH",
    "KEY_FAILURE_EPOCH",
    "KEY_FAILURES",
    "KEY_PLAN",
    "KEY_BATCH_POSITION",
    "KEY_SAMPLES_SEEN",
    "KEY_SEED",
    "KEY_SKIPPED",
    "KEY_VERSION",
    "LOADER_KEYS",
    "READABLE_STATE_VERSIONS",
    "LOADER_STATE_KEYS",
    "LOADER_STATE_VERSION",
    "Delivery",
    "PassRecord",
    "Progress",
    "Where",
    "check_state",
    "expect",
]

LOADER_STATE_VERSION = 4  # 4: one global-position document for samples and tokens (3: two shapes; 2: "plan")
READABLE_STATE_VERSIONS = (2, 3, 4)  # older states are read (a batch source may translate them: ``upgrade_state``)
KEY_BATCH_POSITION = "position"  # batches 0..position-1 of the epoch all handed to the training loop
KEY_AHEAD = "ahead"  # positions handed over past that prefix (in_order=False)
KEY_DATASET_LEN = "dataset_len"
KEY_FAILURES = "failures"
KEY_FAILURE_EPOCH = "epoch"  # in the failures nest: the epoch whose skips are counted
KEY_SKIPPED = "skipped"
KEY_ACCOUNTING = "accounting"
KEY_SAMPLES_SEEN = "samples_seen"
KEY_COMPLETED = "completed_epoch"  # in the accounting nest: the epoch whose last batch moved us here, else None
KEY_PLAN = "plan"  # the key of the sampler's batch source (BatchPlan) and of an iterable dataset's
LOADER_KEYS = (KEY_VERSION, KEY_EPOCH, KEY_BATCH_POSITION, KEY_AHEAD, KEY_SEED, KEY_BATCH_SIZE, KEY_DATASET_LEN,
               KEY_FAILURES, KEY_ACCOUNTING)
LOADER_STATE_KEYS = (*LOADER_KEYS, KEY_PLAN)  # with the sampler's batch source


@dataclass(frozen=True, slots=True)
class Where:
    """A point in the epochs, read from the owner: where a pass starts, what a source's state is computed from.

    begun: a primary pass has begun this epoch (or the epoch was loaded from a state), so
    the batch source holds the state it began from; a new pass replays from that state.
    """

    epoch: int
    position: int = 0
    ahead: frozenset[int] = frozenset()
    begun: bool = False


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one batch handed to the training loop accounts for: its position, with those of fully
    skipped batches before it, its samples and the samples skipped (``on_error="skip"``)."""

    epoch: int
    positions: tuple[int, ...]
    num_samples: int = 0
    skips: tuple[Skip, ...] = ()


@dataclass(kw_only=True)
class Progress:
    """Where the training loop is: the epoch, the batches received, skips and samples seen."""

    epoch: int = 0
    position: int = 0  # batch positions 0..position-1 all received this epoch
    ahead: set[int] = field(default_factory=set)  # received past the prefix (in_order=False)
    skipped: int = 0  # samples skipped this epoch (on_error="skip")
    samples_seen: int = 0  # samples received in batches, all epochs
    batches_seen: int = 0  # batches handed to the training loop, all epochs (what tells a probe)
    begun: bool = False  # see Where.begun
    resume_pending: bool = False  # loaded from a state: the next pass continues `epoch`
    completed: int | None = None  # the epoch whose last batch started this one (position 0), else None

    def where(self) -> Where:
        """The current point, as a value."""
        return Where(self.epoch, self.position, frozenset(self.ahead), self.begun)

    def snapshot(self) -> Progress:
        """A copy: where a pass starts, to return to if it turns out to have been a probe."""
        return replace(self, ahead=set(self.ahead))

    def receive(self, delivery: Delivery, *, handed_over: bool, epoch_batches: int | None) -> None:
        """Record ``delivery``; ``handed_over``: a batch went to the training loop with it.

        When the epoch's last batch is in hand (``epoch_batches`` known), the next epoch
        starts, so a state saved now reads it (``finish_epoch``).
        """
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
        self.skipped += len(delivery.skips)
        self.batches_seen += handed_over
        if epoch_batches is not None and self.epoch == delivery.epoch and self.position >= epoch_batches:
            self.finish_epoch()

    def next_epoch(self, epoch: int | None = None) -> None:
        """Start ``epoch`` (default: the next one) from its first batch."""
        self.epoch = self.epoch + 1 if epoch is None else epoch
        self.position, self.ahead, self.skipped = 0, set(), 0
        self.begun, self.resume_pending, self.completed = False, False, None

    def finish_epoch(self) -> None:
        """The last batch of the epoch is in hand: start the next one, remembering which one ended.

        A state saved now says "epoch e + 1, position 0, e completed", so a resumed loop that
        calls ``set_epoch(e)`` (the loop variable of the epoch it was in) gets nothing more of e.
        """
        done = self.epoch
        self.next_epoch()
        self.completed = done

    def end_pass(self, epoch: int) -> None:
        """A pass over ``epoch`` ran to its end: the epoch is over if its length was unknown till now."""
        if self.epoch == epoch:
            self.finish_epoch()

    # ------------------------------------------------------------ the rules of passes

    def is_probe(self, last: PassRecord) -> bool:
        """Whether the pass ``last`` was a probe: unfinished, at most one batch handed over, and the epoch
        still the one it began in."""
        start = last.start
        return not last.finished and self.epoch == start.epoch and self.batches_seen - start.batches_seen <= 1

    def undo_probe(self, last: PassRecord | None) -> bool:
        """If the last primary pass was a probe, return to where it began; True if so."""
        if last is None or not self.is_probe(last):
            return False
        vars(self).update(vars(last.start.snapshot()))  # in place: the loader's stages read this object
        return True

    def begin_pass(self, last: PassRecord | None) -> Where:
        """A primary pass begins: the last one, if left unfinished in this epoch, is undone (a probe) or counts
        as the epoch (abandoned later: a new stock pass would start the next one). Returns where the new
        pass starts; the epoch is ``begun`` from now on."""
        if last is not None and not last.finished and self.epoch == last.start.epoch and not self.undo_probe(last):
            self.next_epoch()
        where = self.where()
        self.begun = True
        return where

    def set_epoch(self, epoch: int, *, epoch_batches: int | None, last: PassRecord | None) -> None:
        """Read ``epoch`` next: the rest of it after ``restore`` of this epoch, nothing of it right after its
        last batch, else all of it (``last``: the last primary pass, undone first if it was a probe)."""
        self.undo_probe(last)
        if self.resume_pending and self.completed == epoch and self.is_at_start() and epoch_batches is not None:
            self.epoch, self.position = epoch, epoch_batches  # saved right after its last batch: none left
        elif not (self.epoch == epoch and (self.resume_pending or self.is_at_start())):
            self.next_epoch(epoch)

    def is_at_start(self) -> bool:
        """No batch of the current epoch received."""
        return self.position == 0 and not self.ahead

    # ------------------------------------------------------------ state

    def state(self) -> dict[str, Any]:
        """The owner's part of the state: epoch, position, ahead, and the failures and accounting nests."""
        return {KEY_EPOCH: self.epoch, KEY_BATCH_POSITION: self.position, KEY_AHEAD: sorted(self.ahead),
                KEY_FAILURES: {KEY_FAILURE_EPOCH: self.epoch, KEY_SKIPPED: self.skipped},
                KEY_ACCOUNTING: {KEY_SAMPLES_SEEN: self.samples_seen, KEY_COMPLETED: self.completed}}

    def restore(self, state: Mapping[str, Any], where: Where) -> None:
        """Continue from a checked ``state`` at ``where`` (the batch source's reading of it)."""
        self.next_epoch(where.epoch)
        self.position, self.ahead = where.position, set(where.ahead)
        failures = state[KEY_FAILURES]
        self.skipped = int(failures[KEY_SKIPPED]) if failures[KEY_FAILURE_EPOCH] == where.epoch else 0
        self.samples_seen = int(state[KEY_ACCOUNTING][KEY_SAMPLES_SEEN])
        completed = state[KEY_ACCOUNTING].get(KEY_COMPLETED)  # absent in states saved before it was kept
        self.completed = int(completed) if is_count(completed) else None
        self.begun = self.resume_pending = True


class PassRecord(Protocol):
    """What the rules read of a primary pass (``loaders.loader.epoch_pass.Pass``)."""

    @property
    def start(self) -> Progress:
        """The owner as the pass began (a snapshot)."""
        ...

    @property
    def finished(self) -> bool:
        """The pass ran to the end of its epoch."""
        ...


def expect(state: Mapping[str, Any], key: str, value: object) -> None:
    """ConfigError unless ``state[key] == value`` (this loader's setup)."""
    if state[key] != value:
        raise ConfigError(f"DataLoader state {key!r}: expected {value!r} (this loader), got {state[key]!r}; "
                          "resume with the same dataset, batch size and seed")


def check_state(state: object, *, keys: Sequence[str], dataset_len: int | None, seed: int | None,
                check_len: bool = True) -> None:
    """ConfigError unless ``state`` is a complete state of this version (with ``keys``) from the same setup.

    ``seed`` None: the loader's seed was drawn, not given, so the saved one is adopted instead.
    ``check_len`` False: the batch source identifies the data itself (a dataset's own source,
    whose length may change legitimately, e.g. a mixture's with new weights). The batch
    source checks the rest (batch size, its own nest) in its ``resume_point``.
    """
    if not isinstance(state, Mapping):
        raise ConfigError(f"DataLoader state must be a mapping (got {type(state).__name__})")
    if state.get(KEY_VERSION) not in READABLE_STATE_VERSIONS:
        raise ConfigError(f"DataLoader state version: expected one of {READABLE_STATE_VERSIONS}, got "
                          f"{state.get(KEY_VERSION)!r}; "
                          "resume with the loaders version that saved it")
    missing = [key for key in keys if key not in state]
    if missing:
        raise ConfigError(f"DataLoader state lacks {', '.join(map(repr, missing))} (got keys {sorted(state)})")
    for key in (KEY_EPOCH, KEY_BATCH_POSITION):
        if not is_count(state[key]):
            raise ConfigError(f"DataLoader state {key!r} must be a non-negative int (got {state[key]!r})")
    accounting, failures = state[KEY_ACCOUNTING], state[KEY_FAILURES]
    if not isinstance(accounting, Mapping) or not is_count(accounting.get(KEY_SAMPLES_SEEN)):
        raise ConfigError(f"DataLoader state {KEY_ACCOUNTING!r} must hold {KEY_SAMPLES_SEEN!r} (got {accounting!r})")
    counted = isinstance(failures, Mapping) and all(is_count(failures.get(k)) for k in (KEY_FAILURE_EPOCH, KEY_SKIPPED))
    if not counted:
        raise ConfigError(f"DataLoader state {KEY_FAILURES!r} must hold int {KEY_FAILURE_EPOCH!r} and "
                          f"{KEY_SKIPPED!r} (got {failures!r})")
    if check_len:
        expect(state, KEY_DATASET_LEN, dataset_len)
    if seed is not None:
        expect(state, KEY_SEED, seed)
