"""``TokenDataset``: packed sequences of token shards, a map-style dataset (item k = sequence k of the epoch).

Pipeline: ``TokenCorpus`` (documents) -> ``epoch_permutation`` (seed, epoch) -> ``PackingPlan``
(sequence -> segments) -> one window of S+1 tokens -> ``window_fields`` (the item). Changing
``seq_len`` or ``seed`` changes only the plan, never the shards.

Epochs: ``dataset[k]`` reads epoch ``dataset.epoch`` (``set_epoch``, default 0);
``dataset[SampleIndex(k, e)]`` reads epoch ``e`` whatever ``set_epoch``
said, which is how a sampler hands the epoch over with each index (worker copies never miss it).

Resume: ``stream_state(epoch, sequence)`` is what a later job checks the data against
(``describe()``: documents, tokens, tokenizer and shard digests, seq_len, seed, masking);
``resume(state)`` refuses, naming what differs, a state of other data. The position itself
is the loader's (``loaders.tokens.loader_source``), or ``GridSampler(start=)``'s.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from loaders.state_keys import KEY_DATA, KEY_VERSION
from loaders.cache import CacheConfig
from loaders.errors import ConfigError
from loaders.loader.batch_source import SourceRequest
from loaders.read.sample_index import SampleIndex, resolve_item
from loaders.read.topology import Topology
from loaders.validate import check_int
from loaders.tokens.collate import collate
from loaders.tokens.digest import token_digest
from loaders.read.grid import GlobalPosition, resume_grid
from loaders.tokens.loader_source import StreamPositions
from loaders.tokens.mixture_state import ScheduleSegment, data_differences
from loaders.tokens.packing import PackingPlan, DocumentSegments
from loaders.tokens.permutation import epoch_permutation
from loaders.tokens.reader import TokenCorpus, TokenizerBlock
from loaders.tokens.window import WindowFields, label_dtype, window_fields

__all__ = ["KEY_DATA", "KEY_VERSION", "STREAM_STATE_VERSION", "TokenDataset"]

STREAM_STATE_VERSION = 1  # of stream_state()

_CACHED_PLANS = 2  # the epoch being read and the next (a batch straddling set_epoch)
_DIGEST_CHUNK = 4096  # sequences per segments() call in order_digest


class TokenDataset(torch.utils.data.Dataset[WindowFields]):
    """Packed sequences of S tokens (plus the next token as labels) from dataprep token shards.

    Args:
        paths: a dataprep output directory of ``format: "tokens"``, or several (one corpus, in order;
            every one tokenized alike).
        seq_len: S, tokens per sequence (a window is S+1 tokens: inputs 0..S-1, labels 1..S).
        seed: base seed of the per-epoch document permutation (>= 0).
        topology: rank and world size of the global batch grid (``GridSampler``, ``loaders.DataLoader``);
            None = detected there.
        mask_across_documents: set -100 on every label whose input token is EOS.
        cache_dir, cache_limit, cache: the node cache a remote directory (``s3://``, ``gs://``,
            ``az://``) is read through, as for ``loaders.ShardDataset``; it holds the whole corpus
            (windows land on random documents of every shard), downloaded before the first batch.

    ``len()`` is the sequences of one epoch over all ranks, ``num_tokens // (S+1)``; the last
    ``tail_tokens`` (< S+1) tokens of each epoch's stream are not delivered. Items are dicts of
    numpy arrays (see ``loaders.tokens.window``); batch them with ``collate``, which
    ``loaders.DataLoader`` does by itself (``default_collate_fn``) when given no ``collate_fn``.
    Under ``loaders.DataLoader`` without a sampler, the global batch grid is the loader's
    (``batch_source``: every rank the same number of batches, an elastic resume).
    """

    # What loaders.DataLoader uses when the user gives no collate_fn (and batch_size is not None).
    default_collate_fn = staticmethod(collate)
    # Thread workers under loaders.DataLoader at any worker count (loaders.loader.worker_choice):
    # reading an item mostly holds the GIL (small numpy work on S tokens), so it does not declare
    # releases_gil, but one thread reads 1-2e7 tokens/s and worker processes were 5-6x slower,
    # pickling every batch out (python -m tools.bench.token_threads; README).
    light_items = True

    def __init__(self, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, seq_len: int,
                 seed: int = 0, topology: Topology | None = None, mask_across_documents: bool = False,
                 cache_dir: str | os.PathLike[str] | None = None, cache_limit: int | str | None = None,
                 cache: CacheConfig | None = None) -> None:
        self.seq_len = check_int("seq_len", seq_len, 1)
        self.seed = check_int("seed", seed, 0)
        self.topology = topology
        self.mask_across_documents = bool(mask_across_documents)
        self.corpus = TokenCorpus(paths, cache_dir=cache_dir, cache_limit=cache_limit, cache=cache)
        window = self.seq_len + 1
        if self.corpus.num_tokens < window:
            raise ConfigError(f"'seq_len' {self.seq_len} needs windows of {window} tokens, but "
                              f"{', '.join(map(str, self.corpus.paths))} hold {self.corpus.num_tokens} tokens in all; "
                              f"hint: seq_len <= {self.corpus.num_tokens - 1}")
        self.num_sequences = self.corpus.num_tokens // window
        self.tail_tokens = self.corpus.num_tokens - self.num_sequences * window
        self.epoch = 0
        self._plans: OrderedDict[int, PackingPlan] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> TokenizerBlock:
        return self.corpus.tokenizer

    @property
    def dtype(self) -> np.dtype:
        """dtype of ``input_ids`` (the shards' token dtype)."""
        return self.corpus.dtype

    @property
    def label_dtype(self) -> np.dtype:
        """dtype of ``labels``: the token dtype, or int32 when masking needs -100 and it cannot hold it."""
        return label_dtype(self.corpus.dtype, self.mask_across_documents)

    def set_epoch(self, epoch: int) -> None:
        """The epoch plain int indices read (a ``SampleIndex`` carries its own)."""
        self.epoch = check_int("epoch", epoch, 0)

    def __len__(self) -> int:
        return self.num_sequences

    def epoch_length(self, epoch: int, segment: ScheduleSegment | None = None) -> int:
        """Sequences in ``epoch`` (all ranks): the same in every epoch, ``len(self)`` (no schedule: ``segment``
        is a ``Mixture``'s)."""
        return self.num_sequences

    def dropped_sequences(self, batch_size: int, world_size: int = 1) -> int:
        """Sequences of each epoch that no rank reads with a global batch of ``batch_size x world_size``: the
        epoch's last incomplete global batch (< B W). With ``tail_tokens``, all that an epoch never delivers."""
        return resume_grid(GlobalPosition(0, 0), self.num_sequences, batch_size, world_size).grid.dropped

    def plan(self, epoch: int) -> PackingPlan:
        """The packing plan of ``epoch`` (built lazily, the last two kept)."""
        epoch = check_int("epoch", epoch, 0)
        with self._lock:
            plan = self._plans.get(epoch)
            if plan is None:
                permutation = epoch_permutation(self.corpus.num_documents, self.seed, epoch)
                plan = PackingPlan(self.corpus.lengths, permutation, self.seq_len, self.corpus.num_tokens)
                self._plans[epoch] = plan
                if len(self._plans) > _CACHED_PLANS:
                    self._plans.popitem(last=False)
            else:
                self._plans.move_to_end(epoch)
            return plan

    def _resolve(self, item: int | SampleIndex) -> tuple[int, int]:
        index, epoch, _ = resolve_item(item, self.epoch)
        if index < 0:
            index += self.num_sequences
        if not 0 <= index < self.num_sequences:
            raise IndexError(f"sequence {index} outside [0, {self.num_sequences}) of {self.corpus.paths[0]}")
        return index, epoch

    def segments(self, first: int, stop: int, epoch: int) -> DocumentSegments:
        """Where sequences ``[first, stop)`` of ``epoch`` come from (``loaders.tokens.packing.DocumentSegments``)."""
        return self.plan(epoch).segments(first, stop)

    def window(self, index: int, epoch: int) -> np.ndarray:
        """Sequence ``index``'s S+1 tokens in ``epoch``: a new array, dtype ``self.dtype``, [S+1]."""
        window = np.empty(self.seq_len + 1, dtype=self.corpus.dtype)
        at = 0
        for document, offset, length in self.plan(epoch).sequence_segments(index):
            window[at:at + length] = self.corpus.read(document, offset, length)
            at += length
        return window

    def __getitem__(self, item: int | SampleIndex) -> WindowFields:
        index, epoch = self._resolve(item)
        return window_fields(self.window(index, epoch), self.corpus.tokenizer.eos_id,
                             mask_across_documents=self.mask_across_documents)

    def digest_rows(self, first: int, stop: int, epoch: int) -> np.ndarray:
        """int64 [m, 5] rows (source, epoch, document, offset, length) of sequences [first, stop)."""
        segments = self.segments(first, stop, epoch)
        source, document = self.corpus.source_of(segments.document)
        return np.stack([source, np.full_like(source, epoch), document, segments.offset, segments.length], axis=1)

    def order_digest(self, start: int, stop: int, epoch: int | None = None,
                     segment: ScheduleSegment | None = None) -> str:
        """sha256 (hex) of the segments sequences ``[start, stop)`` of ``epoch`` hold (``loaders.tokens.digest``)."""
        epoch = self.epoch if epoch is None else epoch
        digest = token_digest()
        for first in range(start, stop, _DIGEST_CHUNK):
            digest.update(self.digest_rows(first, min(first + _DIGEST_CHUNK, stop), epoch))
        return digest.hexdigest()

    def describe(self) -> dict[str, Any]:
        """Plain values that a resume must find unchanged: the data, seq_len, seed, masking."""
        return {**self.corpus.describe(), "seq_len": self.seq_len, "seed": self.seed,
                "mask_across_documents": self.mask_across_documents}

    def stream_state(self, epoch: int, sequence: int, segment: ScheduleSegment | None = None) -> dict[str, Any]:
        """What a resume checks the data against: ``{"version": 1, "data": describe()}`` (the position is the
        caller's: ``loaders.tokens.loader_source``)."""
        return {KEY_VERSION: STREAM_STATE_VERSION, KEY_DATA: self.describe()}

    def resume(self, state: Mapping[str, Any], *, quiet: bool = False) -> None:
        """Check a ``stream_state``: ConfigError naming what differs (data, seq_len, seed, tokenizer, masking)."""
        if not isinstance(state, Mapping) or state.get(KEY_VERSION) != STREAM_STATE_VERSION or KEY_DATA not in state:
            got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            version = STREAM_STATE_VERSION
            raise ConfigError(f"not a TokenDataset state of version {version} (got {got}); hint: a state saved "
                              "over a Mixture resumes a Mixture")
        diff = data_differences(state[KEY_DATA], self.describe())
        if diff:
            raise ConfigError(f"TokenDataset over {self.corpus.paths[0]}: not the data the state was saved with "
                              f"({'; '.join(diff)}); hint: a resume needs the same shards, seq_len, seed and tokenizer")

    def batch_source(self, request: SourceRequest) -> StreamPositions:
        """What ``loaders.DataLoader`` reads this dataset by, given no sampler: its sequences by global position
        (``loaders.tokens.loader_source``)."""
        return StreamPositions(self)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"], state["_plans"]  # per-process caches, rebuilt on demand
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._plans = OrderedDict()
