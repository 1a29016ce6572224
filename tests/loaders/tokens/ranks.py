"""Jobs of several ranks in one process, seen from the training loop: which global sequences each step held.

``counting_documents`` makes documents whose tokens are all different (a running count), so
a window's tokens say which sequence it is (``SequenceMap``: content -> global sequence,
built from the dataset's own items, checked unique). ``rank_streams`` gives one dataset copy
per rank (explicit ``Topology``), ``job`` one ``loaders.DataLoader`` per rank, and
``global_steps`` each step's global batch as sorted sequence numbers, after checking that
every rank yielded the same number of batches.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from loaders import DataLoader, Topology
from loaders.tokens import Mixture, SampleIndex, ScheduleSegment, TokenDataset
from tests.loaders.helpers import through_torch_save
from tests.loaders.resume_harness import job_steps

__all__ = ["through_torch_save"]  # kept here for the token tests

EOS_ID = 60_000  # above every counting token; vocabulary 60,001 keeps the shards uint16
VOCAB_SIZE = EOS_ID + 1
Stream = TokenDataset | Mixture


def counting_documents(rng: np.random.Generator, count: int, *, mean_len: int, first: int) -> list[np.ndarray]:
    """``count`` documents of 0..2*mean_len tokens ``first, first + 1, ...`` (never repeated), each then EOS_ID."""
    lengths = rng.integers(0, 2 * mean_len + 1, size=count)
    starts = first + np.concatenate([[0], np.cumsum(lengths)[:-1]])
    if first + int(lengths.sum()) >= EOS_ID:
        raise ValueError(f"{int(lengths.sum())} counting tokens from {first} reach the EOS id {EOS_ID}")
    return [np.append(np.arange(s, s + n, dtype=np.int64), EOS_ID) for s, n in zip(starts, lengths)]


def window_key(input_ids: np.ndarray, labels: np.ndarray) -> bytes:
    """A window's S+1 tokens (inputs then the last label; labels unmasked) as bytes."""
    return np.append(input_ids.astype(np.int64), np.int64(labels[-1])).tobytes()


class SequenceMap:
    """Window content -> global sequence of one epoch of ``stream`` (positions ``[start, end)``, under ``segment``).

    Windows are all different in the counting datasets; a cycling mixture reads a source again in
    another order, where a window can repeat: such positions are named by the first with their tokens
    (``of``), and ``expect`` names expected positions the same way.
    """

    def __init__(self, stream: Stream, epoch: int, *, segment: ScheduleSegment | None = None, start: int = 0) -> None:
        self.epoch = epoch
        self.end = stream.epoch_length(epoch, segment)
        self._of: dict[bytes, int] = {}
        self._first: dict[int, int] = {}
        for k in range(start, self.end):
            item = stream[SampleIndex(k, epoch, segment=segment)]
            self._first[k] = self._of.setdefault(window_key(item["input_ids"], item["labels"]), k)

    def of(self, batch: dict[str, Any]) -> list[int]:
        """The global sequences of a batch's rows (KeyError: a row that is no sequence of this epoch)."""
        inputs, labels = batch["input_ids"].cpu().numpy(), batch["labels"].cpu().numpy()
        return [self._of[window_key(inputs[i], labels[i])] for i in range(inputs.shape[0])]

    def expect(self, steps: Iterable[list[int]]) -> list[list[int]]:
        """Expected global batches as ``global_steps`` reports them (sorted, repeated windows by their first)."""
        return [sorted(self._first[k] for k in step) for step in steps]


def rank_streams(stream: Stream, world_size: int) -> list[Stream]:
    """One copy of ``stream`` per rank, each with its explicit ``Topology`` (shards and plans shared)."""
    copies = []
    for rank in range(world_size):
        mine = copy.copy(stream)
        mine.topology = Topology(rank=rank, world_size=world_size)
        copies.append(mine)
    return copies


def job(stream: Stream, world_size: int, batch_size: int, num_workers: int = 0, worker_type: str = "thread",
        **options: Any) -> list[DataLoader[Any]]:
    """One ``loaders.DataLoader`` per rank of a job of ``world_size`` ranks (seed 0 unless given)."""
    options.setdefault("seed", 0)
    return [DataLoader(mine, batch_size=batch_size, num_workers=num_workers, worker_type=worker_type, **options)
            for mine in rank_streams(stream, world_size)]


def global_steps(batches_per_rank: Sequence[Iterable[dict[str, Any]]], sequences: SequenceMap,
                 count: int | None = None) -> list[list[int]]:
    """Each step's global batch (sorted sequences) from each rank's batches; every rank must yield as many.

    ``count``: take that many steps from each rank's iterator (a job stopped mid-epoch), else all.
    """
    return job_steps(sequences.of, batches_per_rank, count)


def close(loaders: Iterable[DataLoader[Any]]) -> None:
    for loader in loaders:
        loader.close()


def grid(start: int, end: int, global_batch: int) -> Iterator[list[int]]:
    """The global batches of sequences from ``start`` while a whole one fits before ``end``."""
    for first in range(start, end - global_batch + 1, global_batch):
        yield list(range(first, first + global_batch))
