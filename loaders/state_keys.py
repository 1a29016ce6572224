"""The keys every stage's state dict shares, each with one meaning (a stage's own keys live in its module).

A loader's state is a nest of plain values (``torch.save`` / ``torch.load(weights_only=True)``
keep it); every document in it carries its own ``KEY_VERSION``. A key means one thing wherever it
sits: ``"position"`` counts this rank's batches handed over (``progress.KEY_BATCH_POSITION``),
``"sample_position"`` a ``ShardSampler``'s samples of its rank's share (``sampler.KEY_SAMPLE_POSITION``),
``"global_position"`` the positions of an epoch consumed by all ranks (samples, sequences, a
mixture's positions: ``KEY_GLOBAL_POSITION``).
"""

from __future__ import annotations

__all__ = ["KEY_BATCH_SIZE", "KEY_DATA", "KEY_EPOCH", "KEY_GLOBAL_POSITION", "KEY_NUM_SAMPLES", "KEY_ORDER", "KEY_RANK",
           "KEY_SEED", "KEY_VERSION", "KEY_WORLD_SIZE"]

KEY_VERSION = "version"  # the version of the document that holds it
KEY_EPOCH = "epoch"  # the epoch the state is in
KEY_SEED = "seed"  # the base seed of the order
KEY_BATCH_SIZE = "batch_size"  # samples (or sequences) per batch on one rank
KEY_WORLD_SIZE = "world_size"  # ranks of the job that saved it
KEY_RANK = "rank"  # the rank that saved it
KEY_DATA = "data"  # what the data was (a digest and counts), to refuse other data on resume
KEY_GLOBAL_POSITION = "global_position"  # positions [0, global_position) of the epoch consumed by all ranks together
KEY_NUM_SAMPLES = "num_samples"  # samples of the dataset (all ranks)
KEY_ORDER = "order"  # how an epoch's order is drawn (mode, block size, seed)
