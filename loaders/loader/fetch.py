"""Reading one batch's samples: failures set aside (never raised), messages that say where.

``fetch_samples`` reads ``dataset[i]`` (or ``__getitems__``) for a batch's indices and
returns a ``Fetched``: the samples, the ``Skip``s (``on_error="skip"``) or the first
failure. ``EpochSync`` hands the epoch carried by each batch to a dataset with
``set_epoch`` in whichever thread or process reads it, once the loader drives it.
``describe_*`` format the positions and errors that messages name; ``portable_error``
makes a worker process's exception survive the trip to the consumer.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.context import get_spawning_popen
from typing import Any

from loaders.errors import SampleError

__all__ = [
    "EpochSync",
    "Fetched",
    "Skip",
    "UNKNOWN_EPOCH",
    "describe_batch",
    "describe_error",
    "fetch_samples",
    "format_indices",
    "portable_error",
]

_SHOWN_INDICES = 8


def describe_error(err: BaseException) -> str:
    """``"Type: message"`` plus, for a SampleError, where: shard, key, byte offset."""
    text = f"{type(err).__name__}: {err}"
    if isinstance(err, SampleError):
        where = [f"shard {err.shard!r}"] if err.shard else []
        where += [f"key {err.key!r}"] if err.key else []
        where += [f"offset {err.offset}"] if err.offset >= 0 else []
        if where:
            text += f" ({', '.join(where)})"
    return text


def format_indices(indices: Sequence[Any]) -> str:
    """A short list of sample indices for messages: the first few and a count."""
    shown = ", ".join(repr(i) for i in indices[:_SHOWN_INDICES])
    more = len(indices) - _SHOWN_INDICES
    return f"[{shown}, ... {more} more]" if more > 0 else f"[{shown}]"


def describe_batch(position: int, indices: Sequence[Any]) -> str:
    """``"batch 17 (indices [...])"``; ``"a batch"`` when the position is unknown (iterable datasets)."""
    what = f"batch {position}" if position >= 0 else "a batch"
    return f"{what} (indices {format_indices(indices)})" if indices else what


@dataclass(frozen=True, slots=True)
class Skip:
    """A sample dropped by ``on_error="skip"``: its index and what went wrong (``describe_error``)."""

    index: Any
    error: str


@dataclass(slots=True)
class Fetched:
    """The samples read for one batch; ``failure`` set (and ``samples`` partial) when reading raised."""

    position: int
    indices: list[Any]
    samples: list[Any]
    skips: list[Skip] = field(default_factory=list)
    failure: BaseException | None = None
    failed_index: Any = None
    epoch: int = 0


def fetch_samples(dataset: Any, indices: Sequence[Any], *, position: int, skip_errors: bool) -> Fetched:
    """Read ``dataset[i]`` for each index (``__getitems__`` when defined), catching failures.

    With ``skip_errors`` a failing sample becomes a ``Skip`` (a failing ``__getitems__``
    is retried sample by sample to find which ones fail); without it the first failure
    stops the batch and is returned in ``failure``. Never raises ``Exception``.
    """
    indices = list(indices)
    getitems = getattr(dataset, "__getitems__", None)
    if callable(getitems):
        try:
            return Fetched(position, indices, list(getitems(indices)))
        except Exception as err:
            if not skip_errors:
                return Fetched(position, indices, [], failure=err)
    fetched = Fetched(position, indices, [])
    for index in indices:
        try:
            fetched.samples.append(dataset[index])
        except Exception as err:
            if not skip_errors:
                fetched.failure, fetched.failed_index = err, index
                return fetched
            fetched.skips.append(Skip(index, describe_error(err)))
    return fetched


def portable_error(err: BaseException) -> BaseException:
    """``err`` with its traceback as a note if it survives pickling, else its class rebuilt from that text.

    For worker processes: their exceptions travel pickled, which drops the traceback and
    fails for exception classes that cannot be rebuilt from their args. Then, as torch
    does, ``type(err)(text)``; a RuntimeError with the text when even that will not pickle.
    """
    trace = "".join(traceback.format_exception(err)).rstrip()
    err.add_note(f"raised in worker process {os.getpid()}:\n{trace}")
    if _survives_pickling(err):
        return err
    try:
        rebuilt = type(err)(trace)
    except Exception:  # a constructor that wants other arguments
        return RuntimeError(trace)
    return rebuilt if _survives_pickling(rebuilt) else RuntimeError(trace)


def _survives_pickling(err: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:  # any pickling failure
        return False
    return True


UNKNOWN_EPOCH = object()  # EpochSync.observe(): the dataset shows no epoch attribute


class EpochSync:
    """Calls ``dataset.set_epoch(epoch)`` when a batch of a new epoch arrives, once per epoch change,
    from the first ``loader.set_epoch`` on (``drive()``).

    Until then the dataset's epoch is the user's, as with the stock loader, which never
    calls it: a script calling ``dataset.set_epoch(e)`` itself keeps its values (the
    loader then restarts worker processes whose copy of the dataset is older than the
    user's last call; see ``user_owned`` and ``observe``). Once the loader drives, the
    epoch travels with each batch, so a persistent worker's copy of the dataset (in a
    process) sees every epoch, not only the one it was started in. The flag lives in
    shared memory, so persistent worker processes see it turn on. Thread-safe: thread
    workers share one dataset and one EpochSync.
    """

    def __init__(self, dataset: Any) -> None:
        self._dataset = dataset
        set_epoch = getattr(dataset, "set_epoch", None)
        self._set_epoch = set_epoch if callable(set_epoch) else None
        self._epoch: int | None = None
        self._lock = threading.Lock()
        self._driven: Any = None
        if self._set_epoch is not None:
            self._driven = multiprocessing.RawValue("b", 0)  # any start method: it has no lock

    @property
    def user_owned(self) -> bool:
        """Whether the dataset has a ``set_epoch`` that only the user calls (no ``loader.set_epoch`` yet):
        copies of it in worker processes must then be made after the user's last call."""
        return self._driven is not None and not self._driven.value

    def observe(self) -> object:
        """The dataset's ``epoch`` attribute as the user left it, or UNKNOWN_EPOCH if it shows none."""
        try:
            epoch = getattr(self._dataset, "epoch", UNKNOWN_EPOCH)
        except Exception:  # a property that fails: nothing to go by
            return UNKNOWN_EPOCH
        return epoch if isinstance(epoch, (int, float, str)) else UNKNOWN_EPOCH

    def drive(self) -> None:
        """From now on hand each batch's epoch to the dataset (in every worker, persistent ones too)."""
        if self._driven is not None:
            self._driven.value = 1

    def __call__(self, epoch: int) -> None:
        if self._set_epoch is None or epoch == self._epoch or not self._driven.value:
            return
        with self._lock:
            if epoch != self._epoch:
                self._set_epoch(epoch)
                self._epoch = epoch

    def __getstate__(self) -> dict[str, Any]:
        # Shared memory travels only to a process being started (spawn); any other copy
        # (a deepcopy, a pickle) takes the flag's current value.
        driven = self._driven
        if driven is not None and get_spawning_popen() is None:
            driven = _Flag(driven.value)
        return {"_dataset": self._dataset, "_set_epoch": self._set_epoch, "_epoch": self._epoch, "_driven": driven}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


@dataclass
class _Flag:
    """A process-local stand-in for a shared flag (``value``)."""

    value: int
