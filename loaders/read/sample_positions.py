"""``SampleOrder``: what a sample dataset's global positions index, for ``loaders.DataLoader``'s global-position source.

``ShardDataset`` / ``ParquetShardDataset`` return one from ``batch_source(request)`` (the
loader's seam, ``loaders.loader.batch_source``); the loader reads it through its one
``GlobalSource`` (``loaders.loader.global_source``), as it reads a token stream. Global
position p of an epoch is entry p of the epoch's order (``loaders.read.order.epoch_order``,
from the plan's seed, mode and block size), dealt ``Deal.STRIDED`` (DistributedSampler's
split) and its tail ``PAD``-ded, or ``DROP``-ped with ``drop_last``. A job's indices are a
``SampleBatch`` of ``SampleIndex`` values (sample, epoch, grid). Its state (the source's
``"data"``)::

    {"digest": "<sha256 of the shards>", "num_samples": 50000,
     "order": {"mode": "blocks", "block_size": 1024, "seed": 5}}

A resume refuses other data, order mode or block size naming what differs (the seed is the
loader's, checked with its state).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.errors import ConfigError
from loaders.read.grid import Deal, GlobalGrid, Tail, order_digest
from loaders.read.order import OrderMode, epoch_order
from loaders.read.read_plan import ReadPlan
from loaders.read.sampler import SampleBatch, ShardSampler
from loaders.state_keys import KEY_NUM_SAMPLES, KEY_ORDER, KEY_SEED

__all__ = ["KEY_SAMPLES", "SampleOrder"]

KEY_SAMPLES = "samples"  # the source's key in the loader's state
KEY_DIGEST, KEY_MODE, KEY_BLOCK_SIZE = "digest", "mode", "block_size"


@dataclass(frozen=True)
class SampleOrder:
    """The global positions of a sample dataset: ``plan`` (the order and the job's world size, ``drop_last``),
    ``rank`` (this rank) and ``identity`` (``loaders.read.grid.data_identity`` of its shards)."""

    plan: ReadPlan
    rank: int
    identity: str
    key = KEY_SAMPLES
    deal = Deal.STRIDED

    @classmethod
    def of(cls, sampler: ShardSampler, identity: str) -> SampleOrder:
        """The positions the dataset's ``default_sampler`` draws (its plan and its rank)."""
        return cls(sampler.read_plan, sampler.topology.rank, identity)

    @property
    def world_size(self) -> int:
        return self.plan.world_size

    @property
    def tail(self) -> Tail:
        return Tail.DROP if self.plan.drop_last else Tail.PAD

    def epoch_length(self, epoch: int, segment: Any = None) -> int:
        return self.plan.num_samples

    def order(self, epoch: int) -> np.ndarray:
        """The epoch's order of every rank: sample indices, int64 [num_samples]."""
        plan = self.plan
        return epoch_order(plan.num_samples, seed=plan.seed, epoch=epoch, mode=plan.mode, block_size=plan.block_size)

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        return self.order(epoch)[positions]

    def job(self, epoch: int, rows: np.ndarray, grid: GlobalGrid, segment: Any) -> Sequence[Any]:
        return SampleBatch(rows, epoch, grid=grid)

    def stream_state(self, epoch: int, sequence: int, segment: Any = None) -> dict[str, Any]:
        plan = self.plan
        return {KEY_DIGEST: self.identity, KEY_NUM_SAMPLES: plan.num_samples,
                KEY_ORDER: {KEY_MODE: plan.mode.value, KEY_BLOCK_SIZE: plan.block_size, KEY_SEED: plan.seed}}

    def resume(self, state: Any, *, quiet: bool = False) -> None:
        """ConfigError unless ``state`` (a ``stream_state``) names this data and order (a saved None: unknown)."""
        if not isinstance(state, Mapping):
            raise ConfigError(f"DataLoader state {KEY_SAMPLES!r} 'data' must be a mapping (got {state!r})")
        differences = self._differences(state)
        if differences:
            raise ConfigError(f"DataLoader state {KEY_SAMPLES!r} was saved reading other data or another order: "
                              f"{'; '.join(differences)}. Resume with the dataset and order it was saved with")

    def _differences(self, state: Mapping[str, Any]) -> list[str]:
        """What differs between the saved data and order and these ('what: saved x, now y')."""
        found = []
        now = self.stream_state(0, 0)
        for key in (KEY_NUM_SAMPLES, KEY_DIGEST):
            if state.get(key) is not None and state.get(key) != now[key]:
                found.append(f"data {key}: saved {state.get(key)!r}, now {now[key]!r}")
        order = state.get(KEY_ORDER)
        if isinstance(order, Mapping):
            if order.get(KEY_MODE) != self.plan.mode.value:
                found.append(f"order mode: saved {order.get(KEY_MODE)!r}, now {self.plan.mode.value!r}")
            elif self.plan.mode is OrderMode.BLOCKS and order.get(KEY_BLOCK_SIZE) != self.plan.block_size:
                found.append(f"block_size: saved {order.get(KEY_BLOCK_SIZE)!r}, now {self.plan.block_size}")
        return found

    def order_digest(self, start: int, stop: int, epoch: int | None = None, segment: Any = None) -> str:
        """sha256 (hex) of which samples global positions ``[start, stop)`` of ``epoch`` hold
        (``loaders.read.grid.order_digest``)."""
        epoch = 0 if epoch is None else epoch
        return order_digest(self.order(epoch), start, stop, epoch=epoch, data=self.identity)
