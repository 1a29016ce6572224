"""Pure: a mixture's schedule, which source each stream position reads, each within one sequence of its share.

With shares w_i (exact rationals, summing to 1) and ``count_i(n)`` the positions among the
first n given to source i, the schedule keeps ``|count_i(n) - w_i n| < 1`` for every prefix n
and every i, i.e. ``floor(w_i n) <= count_i(n) <= ceil(w_i n)`` (quota). Equivalently, source
i's j-th position (1-based) lies in the window ``[floor((j-1)/w_i) + 1, ceil(j/w_i)]``.

Algorithm: earliest deadline first over those windows (no random draws). At step t (1-based)
the eligible sources are those whose next window has opened (``count_i < w_i t``; never
empty, since the counts sum to t-1 < t); the one whose window closes first takes the
position, ties to the lower source index. Why it keeps quota: a sequence with every count
within quota exists for any shares (Balinski & Young's quota method, 1975; Tijdeman's
chairman assignment, 1980, even within 1 - 1/(2k-2)), i.e. the unit jobs (i, j) with
integer release times and deadlines above are feasible on one slot per step, and for such
jobs EDF meets every deadline whenever any schedule does (Jackson/Horn). The naive "most
behind its share first" rule can miss, which is why it is not used.

The schedule is a function of (shares, origin step, origin counts): a segment of a stream
starts at an origin (a fresh epoch: step 0, zero counts; a resume with new weights: that
position, counted afresh), and ``ScheduleIndex`` gives random access into it from
checkpoints every ``BLOCK`` steps, computed in order on first use (~1 µs per step).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from loaders.errors import ConfigError

__all__ = ["BLOCK", "ScheduleIndex", "Shares", "run_schedule"]

BLOCK = 1024  # steps between checkpoints
_CACHED_BLOCKS = 8


@dataclass(frozen=True)
class Shares:
    """Exact shares ``w_i = numerators[i] / total`` (integers; sum of numerators == total)."""

    numerators: tuple[int, ...]
    total: int

    @classmethod
    def from_weights(cls, weights: Sequence[float]) -> Shares:
        """Normalised exact shares of non-negative finite ``weights`` (at least one positive)."""
        fractions = []
        for i, weight in enumerate(weights):
            if isinstance(weight, bool) or not isinstance(weight, (int, float, Fraction, np.integer, np.floating)) \
                    or not math.isfinite(weight) or weight < 0:
                raise ConfigError(f"weight {i} must be a finite number >= 0 (got {weight!r})")
            fractions.append(Fraction(weight))
        total = sum(fractions, Fraction(0))
        if total <= 0:
            raise ConfigError(f"at least one weight must be positive (got {list(weights)!r})")
        scale = math.lcm(*(f.denominator for f in fractions))
        numerators = tuple(int(f * scale) for f in fractions)
        divisor = math.gcd(*numerators)
        numerators = tuple(n // divisor for n in numerators)
        return cls(numerators, sum(numerators))

    def share(self, source: int) -> Fraction:
        return Fraction(self.numerators[source], self.total)

    def __len__(self) -> int:
        return len(self.numerators)


def _window(shares: Shares, source: int, count: int) -> tuple[int, int]:
    """(first, last) step (1-based) where the source's item ``count + 1`` may go: its quota window.

    first = floor(count / w) + 1 (before it the source would pass ceil(w n)); last = ceil((count + 1) / w)
    (after it the source would fall below floor(w n)). The source's share must be positive.
    """
    numerator, total = shares.numerators[source], shares.total
    return count * total // numerator + 1, -(-(count + 1) * total // numerator)


def run_schedule(shares: Shares, counts: list[int], step: int, steps: int) -> np.ndarray:
    """Sources of steps ``step + 1 .. step + steps`` (int16 [steps]) from ``counts`` after ``step``; updates counts."""
    live = [i for i, n in enumerate(shares.numerators) if n]  # a zero share is never scheduled
    release = [0] * len(shares)
    deadline = [0] * len(shares)
    for i in live:
        release[i], deadline[i] = _window(shares, i, counts[i])
    out = np.empty(steps, dtype=np.int16)
    for s in range(steps):
        t = step + s + 1
        best, best_deadline = -1, math.inf
        for i in live:
            if release[i] <= t and deadline[i] < best_deadline:
                best, best_deadline = i, deadline[i]
        out[s] = best
        counts[best] += 1
        release[best], deadline[best] = _window(shares, best, counts[best])
    return out


class ScheduleIndex:
    """Random access into the schedule of ``shares`` from an origin (``origin_step``, ``origin_counts``).

    ``at(offset)`` -> (source, that source's count before it), counted from the origin; thread-safe.
    """

    def __init__(self, shares: Shares, origin_step: int = 0, origin_counts: Sequence[int] | None = None) -> None:
        self.shares = shares
        self.origin_step = origin_step
        self.origin_counts = tuple(origin_counts) if origin_counts is not None else (0,) * len(shares)
        self._checkpoints: list[tuple[int, ...]] = [self.origin_counts]
        self._blocks: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def _picks(self, block: int) -> tuple[np.ndarray, tuple[int, ...]]:
        """(sources of the block's BLOCK steps, counts before it), computing earlier checkpoints as needed."""
        with self._lock:
            while len(self._checkpoints) <= block:
                number = len(self._checkpoints) - 1
                counts = list(self._checkpoints[number])
                picks = run_schedule(self.shares, counts, self.origin_step + number * BLOCK, BLOCK)
                self._checkpoints.append(tuple(counts))
                self._remember(number, picks)
            picks_or_none = self._blocks.get(block)
            if picks_or_none is None:
                counts = list(self._checkpoints[block])
                picks_or_none = run_schedule(self.shares, counts, self.origin_step + block * BLOCK, BLOCK)
                self._remember(block, picks_or_none)
            else:
                self._blocks.move_to_end(block)
            return picks_or_none, self._checkpoints[block]

    def _remember(self, block: int, picks: np.ndarray) -> None:
        self._blocks[block] = picks
        if len(self._blocks) > _CACHED_BLOCKS:
            self._blocks.popitem(last=False)

    def at(self, offset: int) -> tuple[int, int]:
        """(source of position ``origin + offset``, that source's count before it), offset >= 0."""
        if offset < 0:
            raise IndexError(f"offset {offset} precedes the schedule's origin")
        block, within = divmod(offset, BLOCK)
        picks, counts = self._picks(block)
        source = int(picks[within])
        return source, counts[source] + int(np.count_nonzero(picks[:within] == source))

    def counts(self, offset: int) -> tuple[int, ...]:
        """Counts of every source after ``offset`` positions from the origin."""
        block, within = divmod(offset, BLOCK)
        picks, counts = self._picks(block)
        added = np.bincount(picks[:within], minlength=len(self.shares))
        return tuple(c + int(a) for c, a in zip(counts, added))

    def __getstate__(self) -> dict[str, object]:
        return {"shares": self.shares, "origin_step": self.origin_step, "origin_counts": self.origin_counts}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["shares"], state["origin_step"], state["origin_counts"])  # type: ignore[misc]  # rebuild
