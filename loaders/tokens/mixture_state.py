"""A ``Mixture``'s resume values: the state's keys, the schedule's ``ScheduleSegment``, reading a saved state
(``read_state``).

The layout is in ``loaders.tokens.mixture``'s docstring. ``read_state`` refuses, with a
ConfigError naming what differs, a state whose sources, data (``TokenDataset.describe()``:
documents, tokens, tokenizer and shard digests, seq_len, seed, masking), exhaustion policy
or cycle length are not the mixture's; other weights are accepted (the caller starts a new
schedule segment from the saved position). ``data_differences`` names what differs between
two ``describe()`` values (a ``TokenDataset``'s resume uses it too).

A ``ScheduleSegment`` is what a resume hands to every reader of the mixture: which weights apply
from which position of an epoch, and a known point of that schedule. It is a value that
travels with each index (``loaders.read.sample_index.SampleIndex``), never state kept in the
mixture, so every copy of the dataset (a persistent worker process's too) reads the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from loaders.state_keys import KEY_EPOCH, KEY_GLOBAL_POSITION, KEY_VERSION
from loaders.errors import ConfigError
from loaders.tokens.schedule import Shares

__all__ = [
    "KEY_CURSORS", "KEY_EXHAUSTION", "KEY_NUM_SEQUENCES", "KEY_SEGMENT", "KEY_SEGMENT_START", "KEY_SOURCES",
    "KEY_WEIGHTS", "MIXTURE_STATE_KEYS", "MIXTURE_STATE_VERSION", "SavedMixture", "ScheduleSegment", "data_differences",
    "read_state",
]

MIXTURE_STATE_VERSION = 2  # 2: "global_position" and the segment's "start" (1: both "position")
KEY_SEGMENT_START = "start"  # in the segment: the position where its weights took effect
_V1_POSITION = "position"
KEY_EXHAUSTION = "exhaustion"
KEY_NUM_SEQUENCES = "num_sequences"
KEY_WEIGHTS = "weights"
KEY_CURSORS = "cursors"
KEY_SEGMENT = "segment"
KEY_SOURCES = "sources"
MIXTURE_STATE_KEYS = (KEY_VERSION, KEY_EPOCH, KEY_GLOBAL_POSITION, KEY_EXHAUSTION, KEY_NUM_SEQUENCES, KEY_WEIGHTS,
                      KEY_CURSORS, KEY_SEGMENT, KEY_SOURCES)


@dataclass(frozen=True)
class ScheduleSegment:
    """The schedule of part of an epoch: ``shares`` from position ``start`` on (sources' cursors ``base`` there),
    and a known point of it (position ``at``, cursors ``cursors``) to compute later positions from.

    A fresh epoch's segment is ``(epoch, 0, zeros, the mixture's shares, 0, zeros)``; a resume
    gives one whose ``start`` is where its weights took effect (the epoch's start, or the
    resume that changed them) and whose known point is the saved position.
    """

    epoch: int
    start: int
    base: tuple[int, ...]
    shares: Shares
    at: int
    cursors: tuple[int, ...]

    def __repr__(self) -> str:
        shares = f"{self.shares.numerators}/{self.shares.total}"
        return f"ScheduleSegment(epoch={self.epoch}, start={self.start}, shares={shares})"


class SavedMixture(NamedTuple):
    """A checked state: position and cursors, where its weights took effect (start, base), those weights' shares."""

    epoch: int
    position: int
    cursors: tuple[int, ...]
    start: int
    base: tuple[int, ...]
    shares: Shares


def _non_negative(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"mixture state: {what} must be a non-negative int (got {value!r})")
    return value


def _per_source(what: str, values: object, names: tuple[str, ...]) -> tuple[int, ...]:
    if not isinstance(values, Mapping) or set(values) != set(names):
        got = sorted(values) if isinstance(values, Mapping) else values
        raise ConfigError(f"mixture state: {what} must name the sources {sorted(names)} (got {got!r}); "
                          "hint: a Mixture resumes only over the same sources")
    return tuple(_non_negative(f"{what}[{name!r}]", values[name]) for name in names)


def data_differences(saved: object, ours: Mapping[str, Any]) -> list[str]:
    """``key: saved X, now Y`` for every key of ``ours`` (a ``describe()``) that ``saved`` does not match."""
    theirs = saved if isinstance(saved, Mapping) else {}
    return [f"{key}: saved {theirs.get(key)!r}, now {value!r}" for key, value in ours.items()
            if theirs.get(key) != value]


def _check_sources(saved: object, described: Mapping[str, Mapping[str, Any]]) -> None:
    if not isinstance(saved, Mapping) or set(saved) != set(described):
        raise ConfigError(f"mixture state: saved sources {sorted(saved) if isinstance(saved, Mapping) else saved!r}, "
                          f"this mixture has {sorted(described)}; hint: resume with the same sources")
    for name, ours in described.items():
        diff = data_differences(saved[name], ours)
        if diff:
            raise ConfigError(f"mixture state: source {name!r} is not the data it was saved with ({'; '.join(diff)}); "
                              "hint: a resume needs the same shards, seq_len, seed and tokenizer")


def _from_version_1(state: Mapping[str, Any]) -> Mapping[str, Any]:
    """A version-1 state (``"position"`` for both the positions consumed and the segment's start) in this
    version's keys; any other as it is."""
    if state.get(KEY_VERSION) != 1 or _V1_POSITION not in state:
        return state
    renamed = {key: value for key, value in state.items() if key != _V1_POSITION}
    renamed.update({KEY_VERSION: MIXTURE_STATE_VERSION, KEY_GLOBAL_POSITION: state[_V1_POSITION]})
    segment = state.get(KEY_SEGMENT)
    if isinstance(segment, Mapping):
        renamed[KEY_SEGMENT] = {KEY_SEGMENT_START: segment.get(_V1_POSITION), KEY_CURSORS: segment.get(KEY_CURSORS)}
    return renamed


def read_state(state: Mapping[str, Any], *, names: tuple[str, ...], lengths: tuple[int, ...], exhaustion: str,
               num_sequences: int | None, described: Mapping[str, Mapping[str, Any]]) -> SavedMixture:
    """``state`` checked against the mixture (its names, source lengths, policy, cycle length, data); a state of
    version 1 is read too."""
    state = _from_version_1(state)
    missing = [key for key in MIXTURE_STATE_KEYS if key not in state]
    if missing or state.get(KEY_VERSION) != MIXTURE_STATE_VERSION:
        version = MIXTURE_STATE_VERSION
        raise ConfigError(f"not a mixture state of version {version} (version {state.get(KEY_VERSION)!r}, "
                          f"missing keys {missing})")
    if state[KEY_EXHAUSTION] != exhaustion or state[KEY_NUM_SEQUENCES] != num_sequences:
        raise ConfigError(f"mixture state: saved with exhaustion={state[KEY_EXHAUSTION]!r} and num_sequences="
                          f"{state[KEY_NUM_SEQUENCES]!r}, this mixture has {exhaustion!r} and {num_sequences!r}; "
                          "hint: both shape the epoch and must stay the same across a resume")
    _check_sources(state[KEY_SOURCES], described)
    cursors = _per_source("cursors", state[KEY_CURSORS], names)
    segment = state[KEY_SEGMENT]
    if not isinstance(segment, Mapping):
        raise ConfigError(f"mixture state: segment must be a mapping (got {segment!r})")
    base = _per_source("segment cursors", segment.get(KEY_CURSORS), names)
    start = _non_negative("segment start", segment.get(KEY_SEGMENT_START))
    position = _non_negative("global_position", state[KEY_GLOBAL_POSITION])
    if start > position or any(b > c for b, c in zip(base, cursors)) or sum(cursors) - sum(base) != position - start:
        raise ConfigError(f"mixture state: cursors {cursors} at position {position} do not follow from the segment "
                          f"{base} at {start} (inconsistent state)")
    if num_sequences is None and any(c > n for c, n in zip(cursors, lengths)):
        raise ConfigError(f"mixture state: cursors {dict(zip(names, cursors))} pass the sources' lengths "
                          f"{dict(zip(names, lengths))}")
    weights = state[KEY_WEIGHTS]
    if not isinstance(weights, Mapping) or set(weights) != set(names):
        raise ConfigError(f"mixture state: weights must name the sources {sorted(names)} (got {weights!r})")
    shares = Shares.from_weights([weights[name] for name in names])
    return SavedMixture(epoch=_non_negative("epoch", state[KEY_EPOCH]), position=position, cursors=cursors,
                        start=start, base=base, shares=shares)
