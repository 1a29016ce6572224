"""Pure: when each object will next be read, from the planned uses and where every reader is.

A ``Schedule`` holds, per epoch, each stream's uses: the object names a stream (a rank,
or whatever the dataset reports as one) opens, in order. The order is a pure function of
(seed, epoch, topology), so every process of a node can give the same schedule. A
``NextUse`` (epoch, index) is where a reader of a stream is; a stream's timeline runs
through the planned epochs in order, so distances cross the epoch boundary.

``next_use`` is the number of opens until an object is needed again (the smallest over
the streams; ``inf`` when never): the cache keeps what is needed soonest and evicts what is
needed last (Belady's rule). ``upcoming`` lists the objects in the order they will be
needed, which is the order to prefetch them. A ``horizon`` (opens per stream) bounds the
work: what lies beyond what the cache could hold is "not needed soon" either way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["NextUse", "Schedule", "by_distance", "eviction_order"]


@dataclass(frozen=True, order=True, slots=True)
class NextUse:
    """The next use a reader of a stream will make: ``index`` in the stream's uses of ``epoch``."""

    epoch: int
    index: int


@dataclass(frozen=True)
class Schedule:
    """Planned uses: ``epochs[e][stream]`` is the tuple of object names ``stream`` opens in epoch ``e``."""

    epochs: Mapping[int, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)

    def with_epoch(self, epoch: int, uses: Mapping[str, Sequence[str]], *, keep_from: int | None = None) -> Schedule:
        """This schedule with ``epoch``'s uses (replacing any), dropping epochs before ``keep_from``."""
        epochs = {e: u for e, u in self.epochs.items() if keep_from is None or e >= keep_from}
        epochs[epoch] = {str(s): tuple(names) for s, names in uses.items()}
        return Schedule(dict(sorted(epochs.items())))

    @property
    def streams(self) -> set[str]:
        return {s for uses in self.epochs.values() for s in uses}

    def start(self) -> NextUse:
        """Where a stream that has opened nothing yet is: the start of the first planned epoch."""
        return NextUse(min(self.epochs, default=0), 0)

    def locate(self, stream: str, epoch: int, name: str, at: NextUse | None) -> NextUse | None:
        """The position of ``name`` in ``stream``'s uses of ``epoch``: the first at or after ``at`` when
        ``at`` is in that epoch, else the first; None when not planned."""
        uses = self.epochs.get(epoch, {}).get(stream, ())
        begin = at.index if at is not None and at.epoch == epoch else 0
        for offset in (begin, 0):
            try:
                return NextUse(epoch, uses.index(name, offset))
            except ValueError:
                continue
        return None

    def timeline(self, stream: str, at: NextUse, horizon: int | None = None) -> list[str]:
        """The names ``stream`` opens from ``at`` on, across the planned epochs (the first ``horizon`` of them)."""
        found: list[str] = []
        for epoch, uses in self.epochs.items():
            if epoch < at.epoch or (horizon is not None and len(found) >= horizon):
                continue
            names = uses.get(stream, ())[at.index if epoch == at.epoch else 0 :]
            found.extend(names if horizon is None else names[: horizon - len(found)])
        return found

    def distances(self, cursors: Mapping[str, NextUse], horizon: int | None = None) -> dict[str, float]:
        """Opens until each planned object's next use, over all streams (absent: not needed within ``horizon``)."""
        found: dict[str, float] = {}
        for stream in sorted(self.streams):
            for step, name in enumerate(self.timeline(stream, cursors.get(stream, self.start()), horizon)):
                if step < found.get(name, math.inf):
                    found[name] = step
        return found

    def upcoming(self, cursors: Mapping[str, NextUse], horizon: int | None = None) -> list[str]:
        """The planned objects from the readers' positions on, soonest needed first (ties: by name)."""
        return by_distance(self.distances(cursors, horizon))


def by_distance(distances: Mapping[str, float]) -> list[str]:
    """Names in order of next use, soonest first (ties: by name)."""
    return sorted(distances, key=lambda name: (distances[name], name))


def eviction_order(keys: Iterable[str], distance: Mapping[str, float]) -> list[str]:
    """``keys`` in the order to evict them: needed last (or never) first; ties by key, for determinism."""
    return sorted(keys, key=lambda k: (-distance.get(k, math.inf), k))
