"""ShardSampler: a resumable, distributed, epoch-aware sampler over a dataset's sample indices.

The stateful shell around ``loaders.read.order``: it remembers the epoch and how many samples
the training loop has consumed, and yields this rank's ``SampleIndex`` values from there
(``loaders.read.sample_index``).

Resume state (version 2, keys are the module constants below)::

    {"version": 2, "epoch": 3, "sample_position": 1280, "seed": 0, "num_samples": 50000, "world_size": 8}

``sample_position`` counts samples *consumed* this epoch on this rank (version 1, read too,
called it ``"position"``, which in the loader's state counts batches), as reported through
``advance()`` by whoever iterates the sampler directly, so samples prefetched but never
seen are read again after a resume. ``loaders.DataLoader`` does not need it: it reads
the rank's order for an epoch (``indices``) and owns the position itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from loaders.state_keys import KEY_EPOCH, KEY_NUM_SAMPLES, KEY_SEED, KEY_VERSION, KEY_WORLD_SIZE
from loaders.errors import ConfigError
from loaders.read.order import OrderMode, epoch_order, parse_mode, rank_indices, samples_per_rank
from loaders.read.read_plan import ReadPlan
from loaders.read.sample_index import SampleIndex
from loaders.read.grid import GlobalGrid
from loaders.read.topology import Topology
from loaders.validate import check_bool, check_int

SAMPLER_STATE_VERSION = 2  # 2: "sample_position" (1: "position")
KEY_SAMPLE_POSITION = "sample_position"
_V1_POSITION = "position"

# Indices are turned into Python ints a chunk at a time: one big tolist() of a 10^7-sample
# epoch would allocate ~300 MB of int objects before the first sample is yielded.
_CHUNK = 4096


class SampleBatch(Sequence[Any]):
    """One batch of a rank's samples: an int64 numpy slice plus the epoch (a sequence of indices).

    ``SampleIndex`` objects are made only when the batch is read (in the worker), so
    listing an epoch of 10^6 samples costs one numpy split, not 10^6 Python objects.
    With ``plain`` the batch holds plain ints (for datasets that do not take SampleIndex);
    with ``grid`` (a batch read by global position) its ``SampleIndex`` values carry it.
    """

    __slots__ = ("epoch", "grid", "indices", "plain")

    def __init__(self, indices: np.ndarray, epoch: int, *, plain: bool = False,
                 grid: GlobalGrid | None = None) -> None:
        self.indices = indices
        self.epoch = epoch
        self.plain = plain
        self.grid = grid

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def __getitem__(self, i: Any) -> Any:  # an int: a SampleIndex (an int when plain); a slice: a SampleBatch
        if isinstance(i, slice):
            return SampleBatch(self.indices[i], self.epoch, plain=self.plain, grid=self.grid)
        return self._item(int(self.indices[i]))

    def _item(self, index: int) -> Any:
        if self.plain:
            return index
        return SampleIndex(index, self.epoch, grid=self.grid)

    def __iter__(self) -> Iterator[Any]:
        if self.plain:
            return iter(self.indices.tolist())
        epoch, grid = self.epoch, self.grid
        return (SampleIndex(index, epoch, grid=grid) for index in self.indices.tolist())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # equal to any sequence of its indices: unhashable

    def __repr__(self) -> str:
        return f"SampleBatch(epoch={self.epoch}, indices={self.indices.tolist()!r})"


class ShardSampler(torch.utils.data.Sampler[SampleIndex]):
    """This rank's sample indices for each epoch, resumable mid-epoch.

    num_samples: samples in the whole dataset (all shards). shuffle False reads in index
    order (mode SEQUENTIAL). seed: non-negative int shared by all ranks. mode and
    block_size: see ``loaders.read.order.OrderMode``. drop_last: drop the ``n % world_size``
    samples that do not split evenly, else repeat the first ones (DistributedSampler's
    rule). topology None -> ``Topology.detect()`` here, at construction.
    """

    yields_ints = False  # True in a subclass whose __iter__ yields plain ints

    def __init__(
        self,
        num_samples: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        mode: OrderMode | str = OrderMode.GLOBAL,
        block_size: int = 1024,
        drop_last: bool = False,
        topology: Topology | None = None,
    ) -> None:
        super().__init__()
        self._num_samples = check_int("num_samples", num_samples, 0)
        self._seed = check_int("seed", seed, 0)
        self._block_size = check_int("block_size", block_size, 1)
        check_bool("shuffle", shuffle)
        self._drop_last = check_bool("drop_last", drop_last)
        parsed_mode = parse_mode(mode)  # validated even when shuffle=False makes it moot
        self._mode = parsed_mode if shuffle else OrderMode.SEQUENTIAL
        self._topology = Topology.detect() if topology is None else topology
        if not isinstance(self._topology, Topology):
            raise ConfigError(f"'topology' must be a Topology or None (got {topology!r})")
        self._len = samples_per_rank(self._num_samples, self._topology.world_size, drop_last)
        self._epoch = 0
        self._position = 0
        # (epoch, position) from load_state_dict, honoured by the next __iter__ of that epoch.
        self._resume: tuple[int, int] | None = None
        self._cached: tuple[int, np.ndarray] | None = None

    @property
    def epoch(self) -> int:
        """The epoch the next ``__iter__`` reads."""
        return self._epoch

    @property
    def position(self) -> int:
        """Samples of this epoch consumed on this rank (0 .. len(self))."""
        return self._position

    @property
    def topology(self) -> Topology:
        return self._topology

    @property
    def read_plan(self) -> ReadPlan:
        """How every rank's samples are drawn (this sampler's parameters, as pure data)."""
        return ReadPlan(num_samples=self._num_samples, seed=self._seed, mode=self._mode, block_size=self._block_size,
                        drop_last=self._drop_last, world_size=self._topology.world_size)

    def __len__(self) -> int:
        """Samples this rank yields in a full epoch, whatever the current position."""
        return self._len

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` next, from its start unless a loaded state is for that epoch."""
        epoch = check_int("epoch", epoch, 0)
        self._epoch = epoch
        if self._resume is not None and self._resume[0] == epoch:
            self._position = self._resume[1]
        else:
            self._resume = None
            self._position = 0

    def indices(self, epoch: int | None = None) -> np.ndarray:
        """This rank's global sample indices for ``epoch`` (default: the current one), int64 [len(self)]."""
        epoch = self._epoch if epoch is None else check_int("epoch", epoch, 0)
        if self._cached is None or self._cached[0] != epoch:
            order = epoch_order(
                self._num_samples, seed=self._seed, epoch=epoch, mode=self._mode, block_size=self._block_size
            )
            mine = rank_indices(
                order, rank=self._topology.rank, world_size=self._topology.world_size, drop_last=self._drop_last
            )
            self._cached = (epoch, mine)
        return self._cached[1]

    def __iter__(self) -> Iterator[SampleIndex]:
        """This rank's samples for the current epoch, from the resume position (else from 0).

        A loaded state is honoured once; a later ``__iter__`` of the same epoch restarts it,
        as DistributedSampler does. ``position`` moves only through ``advance``.
        """
        return self._generate(self.indices(), self._epoch, self._start_pass())

    def _start_pass(self) -> int:
        """Begin a pass over the epoch: the resume position once after a load, else 0."""
        start = self._resume[1] if self._resume is not None and self._resume[0] == self._epoch else 0
        self._resume = None
        self._position = start
        return start

    def batches(self, batch_size: int, drop_last: bool) -> list[SampleBatch]:
        """This epoch's samples grouped like ``BatchSampler(self, batch_size, drop_last)`` would.

        Starts at the resume position exactly as ``__iter__`` does (and consumes a loaded
        state the same way), but builds no per-sample objects.
        """
        batch_size = check_int("batch_size", batch_size, 1)
        mine = self.indices()[self._start_pass():]
        stop = mine.size - mine.size % batch_size if drop_last else mine.size
        plain = self.yields_ints
        return [SampleBatch(mine[i:i + batch_size], self._epoch, plain=plain) for i in range(0, stop, batch_size)]

    @staticmethod
    def _generate(mine: np.ndarray, epoch: int, start: int) -> Iterator[SampleIndex]:
        for chunk_start in range(start, mine.size, _CHUNK):
            for index in mine[chunk_start:chunk_start + _CHUNK].tolist():
                yield SampleIndex(index, epoch)

    def advance(self, count: int) -> None:
        """Record that the training loop consumed ``count`` more samples of this epoch."""
        count = check_int("count", count, 0)
        if self._position + count > self._len:
            raise ConfigError(
                f"advance({count}) would move position {self._position} past the epoch end ({self._len} samples "
                f"on rank {self._topology.rank}); advance by the samples actually consumed"
            )
        self._position += count

    def state_dict(self) -> dict[str, int]:
        """The resume state (see the module docstring): small, plain ints."""
        return {
            KEY_VERSION: SAMPLER_STATE_VERSION,
            KEY_EPOCH: self._epoch,
            KEY_SAMPLE_POSITION: self._position,
            KEY_SEED: self._seed,
            KEY_NUM_SAMPLES: self._num_samples,
            KEY_WORLD_SIZE: self._topology.world_size,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state``: the next ``__iter__`` starts at its epoch and position.

        Raises ConfigError when a key is missing, the version is unknown, or seed,
        num_samples or world_size differ from this sampler's (resuming then would silently
        read a different split).
        """
        if not isinstance(state, Mapping):
            raise ConfigError(f"sampler state must be a mapping (got {type(state).__name__})")
        if state.get(KEY_VERSION) == 1 and _V1_POSITION in state:  # the previous version's name of the position
            kept = {k: v for k, v in state.items() if k != _V1_POSITION}
            state = {**kept, KEY_VERSION: SAMPLER_STATE_VERSION, KEY_SAMPLE_POSITION: state[_V1_POSITION]}
        missing = [k for k in (KEY_VERSION, KEY_EPOCH, KEY_SAMPLE_POSITION, KEY_SEED, KEY_NUM_SAMPLES, KEY_WORLD_SIZE)
                   if k not in state]
        if missing:
            raise ConfigError(f"sampler state lacks {', '.join(map(repr, missing))} (got keys {sorted(state)})")
        if state[KEY_VERSION] != SAMPLER_STATE_VERSION:
            raise ConfigError(f"sampler state version: expected {SAMPLER_STATE_VERSION} (or 1), got "
                              f"{state[KEY_VERSION]!r}; hint: resume with the loaders version that saved it")
        expected = {KEY_SEED: self._seed, KEY_NUM_SAMPLES: self._num_samples,
                    KEY_WORLD_SIZE: self._topology.world_size}
        for key, value in expected.items():
            if state[key] != value:
                raise ConfigError(
                    f"sampler state {key!r}: expected {value} (this sampler), got {state[key]!r}; "
                    "resume with the same seed, dataset and world size"
                )
        epoch = check_int(KEY_EPOCH, state[KEY_EPOCH], 0)
        position = check_int(KEY_SAMPLE_POSITION, state[KEY_SAMPLE_POSITION], 0)
        if position > self._len:
            raise ConfigError(f"sampler state {KEY_SAMPLE_POSITION!r}: expected at most {self._len} (samples per "
                              f"rank), got {position}")
        self._epoch, self._position = epoch, position
        self._resume = (epoch, position)
