"""loaders: shards -> batches on the device, fast and resumable (see loaders/README.md).

Public API: the drop-in ``DataLoader``; datasets over dataprep shards; token streams for
language models (``TokenDataset``, ``Mixture``; the rest in ``loaders.tokens``); the sampler
and topology; CPU decode transforms (``loaders.read.transforms``); device prefetch; batched
augmentation (``loaders.augment``); and the exception tree (``loaders.errors``).
"""

from __future__ import annotations

from loaders.errors import (
    BatchShapeError,
    ConfigError,
    LoaderError,
    SampleError,
    ShardError,
    SkipBudgetError,
    UnsendableBatchError,
    WorkerError,
    WorkerLostError,
)
from loaders.loader.dataloader import DataLoader
from loaders.loader.loader_stats import LoaderStats, TuningDecision
from loaders.loader.prefetch import DevicePrefetcher, to_device
from loaders.read.datasets import ParquetShardDataset, ShardDataset
from loaders.read.order import OrderMode, sample_rng, sample_seed
from loaders.read.sample_index import SampleIndex
from loaders.read.sampler import ShardSampler
from loaders.read.topology import Topology, cpus_available, default_num_workers
from loaders.read.transforms import CenterCropDecode, Compose, DecodeImage, DecodeLabel, RandomResizedCropDecode
from loaders.tokens import Mixture, TokenDataset

__all__ = [
    "BatchShapeError",
    "CenterCropDecode",
    "Compose",
    "ConfigError",
    "DataLoader",
    "DecodeImage",
    "DecodeLabel",
    "DevicePrefetcher",
    "LoaderError",
    "LoaderStats",
    "Mixture",
    "OrderMode",
    "ParquetShardDataset",
    "RandomResizedCropDecode",
    "SampleError",
    "SampleIndex",
    "ShardDataset",
    "ShardError",
    "ShardSampler",
    "SkipBudgetError",
    "TokenDataset",
    "Topology",
    "TuningDecision",
    "UnsendableBatchError",
    "WorkerError",
    "WorkerLostError",
    "cpus_available",
    "default_num_workers",
    "sample_rng",
    "sample_seed",
    "to_device",
]
