"""The user's dataset's own ``set_epoch``: who calls it (the user, or the loader from its first
``set_epoch`` on) and how each batch's epoch reaches it in whichever thread or process reads it.

``EpochSync`` is shared by the loader and its workers (copied into worker processes, with
its flag in shared memory). It remembers, per copy of the dataset, the epoch it last told
that copy, so the dataset's ``set_epoch`` runs once per epoch change, not once per batch:
that is the dataset's state (what its copy was told), not the loader's progress.
"""

from __future__ import annotations

import multiprocessing
import threading
from dataclasses import dataclass
from multiprocessing.context import get_spawning_popen
from typing import Any

__all__ = ["UNKNOWN_EPOCH", "EpochSync"]

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
        self._told: int | None = None  # the epoch last handed to this copy of the dataset
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
        except Exception:  # noqa: BLE001 - a property that fails: nothing to go by
            return UNKNOWN_EPOCH
        return epoch if isinstance(epoch, (int, float, str)) else UNKNOWN_EPOCH

    def drive(self) -> None:
        """From now on hand each batch's epoch to the dataset (in every worker, persistent ones too)."""
        if self._driven is not None:
            self._driven.value = 1

    def __call__(self, epoch: int) -> None:
        if self._set_epoch is None or epoch == self._told or not self._driven.value:
            return
        with self._lock:
            if epoch != self._told:
                self._set_epoch(epoch)
                self._told = epoch

    def __getstate__(self) -> dict[str, Any]:
        # Shared memory travels only to a process being started (spawn); any other copy
        # (a deepcopy, a pickle) takes the flag's current value.
        driven = self._driven
        if driven is not None and get_spawning_popen() is None:
            driven = _Flag(driven.value)
        return {"_dataset": self._dataset, "_set_epoch": self._set_epoch, "_told": self._told, "_driven": driven}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


@dataclass
class _Flag:
    """A process-local stand-in for a shared flag (``value``)."""

    value: int
