"""``Mixture``: a weighted mixture of ``TokenDataset`` sources, scheduled in closed form (map-style).

Position n of an epoch reads the next sequence of the source the schedule gives it
(``loaders.tokens.schedule``: earliest deadline first over the quota windows, no random
draws): at every prefix of the epoch each source has within one sequence of its share.
Weights count tokens (every sequence is S tokens, so a share of positions is a share of
tokens); they are normalised, zero allowed. Each source reads its own ``TokenDataset`` in its
own order: the c-th sequence a source gives in epoch e is its sequence ``c mod len`` in
source epoch ``e`` (``stop``) or ``e * ceil(N / len) + c // len`` (``cycle``, so every pass of
every epoch has its own permutation).

Epoch length N (``len()``; ``epoch_length(e)``):

- ``exhaustion="stop"``: ``min_i floor(len_i / w_i)``: the epoch ends before any source would
  run past its end (at most one sequence of a source's share is left unread at that point).
- ``exhaustion="cycle"``: ``num_sequences`` (default: the sources' sequences summed); an
  exhausted source starts its next pass.

State (``stream_state(epoch, position, segment)``, plain values; keys are the module constants)::

    {"version": 2, "epoch": 2, "global_position": 1500, "exhaustion": "stop", "num_sequences": 4000,
     "weights": {"web": 0.7, "code": 0.3}, "cursors": {"web": 1050, "code": 450},
     "segment": {"start": 0, "cursors": {"web": 0, "code": 0}},
     "sources": {"web": {...TokenDataset.describe()}, "code": {...}}}

``segment`` is where the current weights took effect (the epoch's start, or a resume that
changed them). ``resume(state)`` checks a saved state and returns the schedule ``ScheduleSegment``
to read on with; it keeps nothing: the segment travels with each index
(``loaders.read.sample_index.SampleIndex``), so every copy of the mixture (a persistent worker
process's too) reads the same schedule. A state built with other weights is accepted: the
new weights apply from the saved position, each source continuing from its cursor, and the
within-one property holds counted from there (one log line says so). Other sources, data,
seq_len, seed or exhaustion are refused, naming what differs.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import Any

import torch.utils.data

from loaders.errors import ConfigError
from loaders.loader.batch_source import SourceRequest
from loaders.read.sample_index import SampleIndex, resolve_item
from loaders.read.topology import Topology
from loaders.validate import check_int
from loaders.tokens.collate import collate
from loaders.tokens.dataset import TokenDataset
from loaders.tokens.digest import token_digest
from loaders.tokens.loader_source import StreamPositions
from loaders.tokens.mixture_state import (KEY_CURSORS, KEY_EXHAUSTION, KEY_NUM_SEQUENCES, KEY_SEGMENT,
                                          KEY_SEGMENT_START, KEY_SOURCES, KEY_WEIGHTS, MIXTURE_STATE_VERSION,
                                          ScheduleSegment, read_state)
from loaders.state_keys import KEY_EPOCH, KEY_GLOBAL_POSITION, KEY_VERSION
from loaders.tokens.schedule import ScheduleIndex, Shares
from loaders.tokens.window import WindowFields

__all__ = ["Exhaustion", "Mixture"]

logger = logging.getLogger(__name__)

_CACHED_INDICES = 4  # schedule indices kept per process (the segments being read)


class Exhaustion(enum.StrEnum):
    """What an epoch does when a source runs out: STOP ends the epoch before; CYCLE starts its next pass."""

    STOP = "stop"
    CYCLE = "cycle"


def _same_sources(sources: Mapping[str, TokenDataset]) -> None:
    """ConfigError unless every source has the first one's seq_len, tokenizer and masking."""
    names = list(sources)
    first = sources[names[0]]
    for name in names[1:]:
        other = sources[name]
        diff = first.tokenizer.differences(other.tokenizer)
        if other.seq_len != first.seq_len:
            diff.append(f"seq_len: {first.seq_len} vs {other.seq_len}")
        if other.mask_across_documents != first.mask_across_documents:
            diff.append(f"mask_across_documents: {first.mask_across_documents} vs {other.mask_across_documents}")
        if diff:
            raise ConfigError(f"mixture sources {names[0]!r} and {name!r} differ ({'; '.join(diff)}); "
                              "hint: every source needs the same tokenizer, seq_len and masking")


class Mixture(torch.utils.data.Dataset[WindowFields]):
    """Sequences from several ``TokenDataset``s in proportion to ``weights`` (see the module docstring).

    Args:
        sources: name -> TokenDataset (same tokenizer, seq_len, masking); names key the weights and the state.
        weights: name -> weight >= 0 (normalised; counts tokens).
        exhaustion: "stop" or "cycle".
        num_sequences: the epoch length for "cycle" (default: the sources' lengths summed).
        topology: rank and world size of the global batch grid (``GridSampler``, ``loaders.DataLoader``);
            None = detected there. The sources' own topologies are not used.

    Items are read as the sources' items (numpy, see ``loaders.tokens.window``); under
    ``loaders.DataLoader`` batches are collated by ``loaders.tokens.collate`` (``default_collate_fn``)
    and read by thread workers (``light_items``), as for a ``TokenDataset``.
    """

    default_collate_fn = staticmethod(collate)
    light_items = TokenDataset.light_items

    def __init__(self, sources: Mapping[str, TokenDataset], *, weights: Mapping[str, float],
                 exhaustion: Exhaustion | str = Exhaustion.STOP, num_sequences: int | None = None,
                 topology: Topology | None = None) -> None:
        if not sources:
            raise ConfigError("'sources' must name at least one TokenDataset (got none)")
        if set(weights) != set(sources):
            missing, extra = sorted(set(sources) - set(weights)), sorted(set(weights) - set(sources))
            raise ConfigError(f"'weights' must name exactly the sources {sorted(sources)} (missing {missing}, "
                              f"extra {extra})")
        try:
            self.exhaustion = Exhaustion(exhaustion)
        except ValueError as err:
            raise ConfigError(f"'exhaustion' must be 'stop' or 'cycle' (got {exhaustion!r})") from err
        _same_sources(sources)
        self.names = tuple(sources)
        self.sources = dict(sources)
        self.weights = {name: weights[name] for name in self.names}
        self.shares = Shares.from_weights([weights[name] for name in self.names])
        self.topology = topology
        self.lengths = tuple(len(sources[name]) for name in self.names)
        self.num_sequences = self._cycle_length(num_sequences)
        self.epoch = 0
        self._indices: dict[tuple[ScheduleSegment, int], ScheduleIndex] = {}

    def _cycle_length(self, num_sequences: int | None) -> int | None:
        if self.exhaustion is Exhaustion.STOP:
            if num_sequences is not None:
                raise ConfigError("'num_sequences' applies to exhaustion='cycle' only (a 'stop' epoch ends when "
                                  "a source runs out)")
            return None
        if num_sequences is None:
            return sum(self.lengths)
        return check_int("num_sequences", num_sequences, 1)

    # ------------------------------------------------------------------ the schedule

    def segment(self, epoch: int, segment: ScheduleSegment | None = None) -> ScheduleSegment:
        """The schedule segment ``epoch`` is read under: ``segment`` when it is that epoch's, else the epoch's own
        (this mixture's weights from its start)."""
        if segment is not None and segment.epoch == epoch:
            return segment
        zeros = (0,) * len(self.names)
        return ScheduleSegment(epoch=epoch, start=0, base=zeros, shares=self.shares, at=0, cursors=zeros)

    def _stop_length(self, segment: ScheduleSegment) -> int:
        """Positions from the segment's start on until a source would pass its end: min_i floor(left_i / w_i)."""
        shares = segment.shares
        room = [(length - b) * shares.total // a
                for length, b, a in zip(self.lengths, segment.base, shares.numerators) if a]
        return segment.start + min(room)

    def epoch_length(self, epoch: int, segment: ScheduleSegment | None = None) -> int:
        """Positions in ``epoch``: N, or for a ``stop`` epoch read under a resume's ``segment``, that segment's end."""
        if self.num_sequences is not None:
            return self.num_sequences
        return self._stop_length(self.segment(epoch, segment))

    def __len__(self) -> int:
        """Positions of an epoch under this mixture's weights (``epoch_length``)."""
        return self.epoch_length(self.epoch)

    def set_epoch(self, epoch: int) -> None:
        """The epoch plain int indices read (an index that carries its epoch reads its own)."""
        self.epoch = check_int("epoch", epoch, 0)

    def _index(self, segment: ScheduleSegment, origin: int, counts: tuple[int, ...]) -> ScheduleIndex:
        """The schedule of ``segment`` from a point of it (a per-process cache, rebuilt on demand)."""
        key = (segment, origin)
        index = self._indices.get(key)
        if index is None:
            relative = tuple(c - b for c, b in zip(counts, segment.base))
            index = ScheduleIndex(segment.shares, origin - segment.start, relative)
            if len(self._indices) >= _CACHED_INDICES:
                self._indices = {}
            self._indices[key] = index
        return index

    def _schedule(self, position: int, segment: ScheduleSegment) -> tuple[ScheduleIndex, int]:
        """(index, origin) of ``segment`` that reach ``position``: from the known point when at or past it."""
        if position < segment.start:
            raise IndexError(f"position {position} of epoch {segment.epoch} precedes the resume at {segment.start} "
                             "that changed the mixture's weights: its schedule is not this mixture's")
        if position >= segment.at:
            return self._index(segment, segment.at, segment.cursors), segment.at
        return self._index(segment, segment.start, segment.base), segment.start

    def locate(self, position: int, epoch: int, segment: ScheduleSegment | None = None) -> tuple[int, int]:
        """(source index, that source's cursor: sequences it gave before) of ``position`` in ``epoch``."""
        segment = self.segment(epoch, segment)
        length = self.epoch_length(epoch, segment)
        if not 0 <= position < length:
            raise IndexError(f"position {position} outside [0, {length}) of mixture epoch {epoch}")
        index, origin = self._schedule(position, segment)
        source, count = index.at(position - origin)
        return source, segment.base[source] + count

    def cursors(self, position: int, epoch: int, segment: ScheduleSegment | None = None) -> tuple[int, ...]:
        """Every source's cursor after positions ``[0, position)`` of ``epoch``."""
        segment = self.segment(epoch, segment)
        index, origin = self._schedule(position, segment)
        return tuple(b + c for b, c in zip(segment.base, index.counts(position - origin)))

    def source_item(self, position: int, epoch: int, segment: ScheduleSegment | None = None) -> tuple[int, SampleIndex]:
        """(source index, the ``SampleIndex`` into that source) that ``position`` of ``epoch`` reads."""
        source, cursor = self.locate(position, epoch, segment)
        passes, index = divmod(cursor, self.lengths[source])
        if self.num_sequences is None:
            return source, SampleIndex(index, epoch)
        stride = -(-self.num_sequences // self.lengths[source])
        return source, SampleIndex(index, epoch * stride + passes)

    def __getitem__(self, item: int | SampleIndex) -> WindowFields:
        position, epoch, segment = resolve_item(item, self.epoch)
        source, sample = self.source_item(position, epoch, segment)
        return self.sources[self.names[source]][sample]

    def order_digest(self, start: int, stop: int, epoch: int | None = None,
                     segment: ScheduleSegment | None = None) -> str:
        """sha256 (hex) of the (source, epoch, document, offset, length) segments of positions ``[start, stop)``."""
        epoch = self.epoch if epoch is None else epoch
        digest = token_digest()
        for position in range(start, stop):
            source, sample = self.source_item(position, epoch, segment)
            rows = self.sources[self.names[source]].digest_rows(sample.index, sample.index + 1, sample.epoch)
            rows[:, 0] = source
            digest.update(rows)
        return digest.hexdigest()

    def batch_source(self, request: SourceRequest) -> StreamPositions:
        """What ``loaders.DataLoader`` reads this mixture by, given no sampler: its positions by global position
        (``loaders.tokens.loader_source``)."""
        return StreamPositions(self)

    # ------------------------------------------------------------------ state

    def stream_state(self, epoch: int, sequence: int, segment: ScheduleSegment | None = None) -> dict[str, Any]:
        """The state after positions ``[0, sequence)`` of ``epoch`` were consumed (plain values)."""
        segment = self.segment(epoch, segment)
        length = self.epoch_length(epoch, segment)
        if not 0 <= sequence <= length:
            raise IndexError(f"position {sequence} outside [0, {length}] of mixture epoch {epoch}")
        return {
            KEY_VERSION: MIXTURE_STATE_VERSION, KEY_EPOCH: int(epoch), KEY_GLOBAL_POSITION: int(sequence),
            KEY_EXHAUSTION: self.exhaustion.value, KEY_NUM_SEQUENCES: self.num_sequences,
            KEY_WEIGHTS: dict(self.weights),
            KEY_CURSORS: dict(zip(self.names, self.cursors(sequence, epoch, segment))),
            KEY_SEGMENT: {KEY_SEGMENT_START: segment.start, KEY_CURSORS: dict(zip(self.names, segment.base))},
            KEY_SOURCES: {name: self.sources[name].describe() for name in self.names},
        }

    def resume(self, state: Mapping[str, Any], *, quiet: bool = False) -> ScheduleSegment:
        """The schedule segment to continue ``state`` with (its epoch's); ConfigError naming what differs.

        Keeps nothing: hand the segment on with each index (``SampleIndex(..., segment=)``) or to
        ``GridSampler(..., segment=)``. With other weights than the saved ones the segment
        starts at the saved position, and one INFO line says so (unless ``quiet``).
        """
        saved = read_state(state, names=self.names, lengths=self.lengths, exhaustion=self.exhaustion.value,
                           num_sequences=self.num_sequences,
                           described={name: self.sources[name].describe() for name in self.names})
        changed = saved.shares != self.shares
        if not changed:
            segment = ScheduleSegment(epoch=saved.epoch, start=saved.start, base=saved.base, shares=self.shares,
                              at=saved.position, cursors=saved.cursors)
        else:  # new weights take effect here: the segment starts at the saved position
            segment = ScheduleSegment(epoch=saved.epoch, start=saved.position, base=saved.cursors, shares=self.shares,
                              at=saved.position, cursors=saved.cursors)
        end = self.epoch_length(saved.epoch, segment)
        if saved.position > end:
            raise ConfigError(f"mixture state: position {saved.position} is past its epoch's end {end}")
        if changed and not quiet:
            logger.info("mixture weights changed at resume: epoch %d from position %d on, %s (was %s); each source "
                        "continues from its cursor %s", saved.epoch, saved.position, self.weights,
                        dict(state[KEY_WEIGHTS]), dict(zip(self.names, saved.cursors)))
        return segment

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_indices"] = {}  # a per-process cache
        return state
