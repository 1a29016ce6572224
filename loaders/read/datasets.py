"""Map-style datasets over dataprep output directories, local or remote (through the node cache).

``ShardDataset`` reads tar shards through their index sidecars; ``ParquetShardDataset``
reads Parquet shards by row group. A remote URL (``s3://``, ``gs://``, ``az://``), or a
local folder given with ``cache_dir``, is read through ``loaders.cache`` (the node's
shard cache): its default order is ``"blocks"`` (see ``_cached_defaults``), batches are read
holding one lease per shard, and the sampler the loader makes plans the cache's prefetch.
Both yield samples as dicts::

    {"__key__": str, "__index__": int, "__shard__": str,
     "jpg": bytes, "cls": int, "txt": str, "json": dict, ...}

(media fields stay encoded bytes until a transform decodes them). Both accept an int or
a ``SampleIndex(index, epoch)`` (with its ``grid`` when read by global position:
``loaders.DataLoader`` with no sampler) in ``__getitem__``: a transform that
takes a second argument receives a numpy Generator keyed by (seed, epoch, index), so
augmentation is the same whatever the number of workers and after a resume.
``data_identity`` names the shards the indices address (what a resume checks).
"""

from __future__ import annotations

import abc
import inspect
import json
import os
import random
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils.data

from dataprep.remote import is_remote_url
from dataprep.formats.sizes import format_bytes
from loaders.cache import CacheConfig
from loaders.errors import SampleError, ShardError
from loaders.read.order import OrderMode, parse_mode, sample_rng, sample_seed
from loaders.read.parquet_meta import row_groups
from loaders.read.read_plan import working_set_bytes
from loaders.read.grid import data_identity
from loaders.read.sample_positions import SampleOrder
from loaders.read.sample_index import SampleIndex, resolve_item
from loaders.read.sampler import ShardSampler
from loaders.read.shard_files import CachedShardFiles, ShardFiles, cache_config, open_shard_files
from loaders.read.shards import TarShardSet
from loaders.read.topology import Topology
from loaders.read.transforms import transform_can_defer_decode, transform_releases_gil
from loaders.stage_clock import timed_stage
from loaders.validate import invalid

Sample = dict[str, Any]
Transform = Callable[..., Sample]


def decode_field(name: str, data: bytes) -> Any:
    """WebDataset's basic decoding: ``cls`` -> int, ``txt`` -> str, ``json`` -> object; else bytes."""
    if name == "cls":
        return int(data)
    if name == "txt":
        return data.decode("utf-8")
    if name == "json":
        return json.loads(data)
    return data


def takes_rng(transform: Callable[..., Any]) -> bool:
    """True when ``transform(sample, rng)`` is its signature (a SampleTransform)."""
    try:
        params = inspect.signature(transform).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


_warned_threads = False


def _with_sample_seed(transform: Transform, sample: Sample, seed: int) -> Sample:
    """``transform(sample)`` with the global RNGs seeded from ``seed``, never changing the training loop's.

    In a worker process the globals are the worker's own. In the main thread
    (``num_workers=0``) they are the training loop's: saved, seeded, and put back. In
    another thread (thread workers) they are shared with the training loop while it
    runs, so they are left alone (and the transform is not reproducible): give the
    transform an ``rng`` parameter instead.
    """
    global _warned_threads
    if torch.utils.data.get_worker_info() is not None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed % 2**63)
        return transform(sample)
    if threading.current_thread() is not threading.main_thread():
        if not _warned_threads:
            _warned_threads = True
            warnings.warn("a dataset transform without an 'rng' parameter runs in thread workers: the global RNGs "
                          "are the training loop's and are not reseeded, so it is not reproducible; take "
                          "f(sample, rng) or use worker processes", stacklevel=2)
        return transform(sample)
    saved = random.getstate(), np.random.get_state(), torch.default_generator.get_state()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.default_generator.manual_seed(seed % 2**63)
    try:
        return transform(sample)
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.default_generator.set_state(saved[2])


class _Keyed(abc.ABC):
    """Shared by both datasets: epoch, seed, transform dispatch, the default sampler and batch reads."""

    order: OrderMode
    block_size: int
    files: ShardFiles
    shard_starts: np.ndarray  # int64 [num_shards + 1]: each shard's first sample, then the total

    def _setup(self, transform: Transform | None, seed: int, order: OrderMode | str, block_size: int,
               topology: Topology | None) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise invalid("seed", "an int", seed)
        self.transform = transform
        self.seed = seed
        self.epoch = 0
        self.order = parse_mode(order)
        self.block_size = block_size
        self.topology = topology
        self._transform_takes_rng = transform is not None and takes_rng(transform)
        # What "auto" thread workers need (loaders.loader.worker_choice): reading releases the GIL,
        # and so do this package's decode transforms; a user's own transform is not known to (one
        # written with PIL holds it for part of its work: 0.88x stock in threads, issue 20), and one
        # drawing from the global RNGs is only reproducible where each call reseeds them (processes).
        self.releases_gil = transform_releases_gil(transform)
        # What DataLoader(decode="device" / "auto") needs: the images come from this package's decode
        # transforms with nothing after them reading the pixels, so workers may hand on decode plans.
        self.can_defer_decode = transform_can_defer_decode(transform)
        self._warn_if_the_cache_thrashes()

    @abc.abstractmethod
    def __len__(self) -> int:
        """Samples in the dataset (all shards)."""

    @abc.abstractmethod
    def __getitem__(self, item: int | SampleIndex) -> Sample:
        """Sample ``item`` (an int, or a ``SampleIndex`` with its epoch)."""

    @property
    def data_identity(self) -> str:
        """sha256 (hex) of the shards this dataset's indices address (names, samples, bytes, sha256)."""
        return data_identity(self.files.manifest().shards)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def default_sampler(self, shuffle: bool, seed: int | None = None, drop_last: bool = False) -> ShardSampler:
        """A distributed, resumable sampler over this dataset (topology detected unless given).

        Through the node cache, its order also plans the cache: every rank of the node, this epoch and the next.
        """
        seed = self.seed if seed is None else seed
        sampler = ShardSampler(len(self), shuffle=shuffle, seed=seed, mode=self.order, block_size=self.block_size,
                               drop_last=drop_last, topology=self.topology)
        self.files.set_plan(sampler.read_plan, self.shard_starts, sampler.topology)
        return sampler

    def batch_source(self, request: Any) -> SampleOrder:
        """What ``loaders.DataLoader`` reads this dataset by, given no sampler: its ``default_sampler``'s order by
        global position (``loaders.read.sample_positions``; ``request``: the loader's ``SourceRequest``)."""
        sampler = self.default_sampler(shuffle=request.shuffle, seed=request.seed, drop_last=request.drop_last)
        return SampleOrder.of(sampler, self.data_identity)

    @property
    def __getitems__(self) -> Callable[[Sequence[int | SampleIndex]], list[Sample]]:
        """A batch read at once (only through the node cache: it holds one lease per shard for the batch).

        Local reads keep the per-sample path (and the loader's "at sample i" in messages): the
        attribute does not exist for them, as ``hasattr`` and torch's fetcher see it.
        """
        if not self.files.batched:
            raise AttributeError(f"{type(self).__name__} over a local folder reads sample by sample")
        return self._read_batch

    def _read_batch(self, items: Sequence[int | SampleIndex]) -> list[Sample]:
        epoch = self._resolve(items[0])[1] if len(items) else self.epoch
        grid = items[0].grid if len(items) and isinstance(items[0], SampleIndex) else None
        with timed_stage("read"), self.files.batch(epoch, grid):  # the batch's leases; each sample's own parts
            return [self[item] for item in items]

    def close(self) -> None:
        """Let go of the shards (descriptors; through the cache: its prefetching and this process's positions)."""
        self.files.close()

    def _warn_if_the_cache_thrashes(self) -> None:
        if not isinstance(self.files, CachedShardFiles):
            return
        shards = self.files.manifest().shards
        need = working_set_bytes(self.order, self.block_size, [s.num_samples for s in shards],
                                 [s.bytes for s in shards])
        limit = self.files.cache.config.limit_bytes
        if need > limit:
            warnings.warn(f"{self.files.where}: order={self.order.value!r} (block_size {self.block_size}) reads from "
                          f"about {format_bytes(need)} of shards at once, more than cache_limit {format_bytes(limit)}: "
                          "shards will be downloaded again and again. Use order='blocks' with a smaller block_size, "
                          "or raise cache_limit", stacklevel=3)

    def _resolve(self, item: int | SampleIndex) -> tuple[int, int]:
        index, epoch, _ = resolve_item(item, self.epoch)
        return index, epoch

    def _apply(self, sample: Sample, index: int, epoch: int) -> Sample:
        if self.transform is None:
            return sample
        try:
            with timed_stage("transform"):  # less the decodes inside it (loaders.read.decode: "decode")
                if self._transform_takes_rng:
                    return self.transform(sample, sample_rng(self.seed, epoch, index))
                return _with_sample_seed(self.transform, sample, sample_seed(self.seed, epoch, index))
        except SampleError:
            raise
        except Exception as err:
            raise SampleError(f"transform failed on sample {sample.get('__key__')!r} (index {index}, "
                              f"shard {sample.get('__shard__')}): {err!r}", shard=str(sample.get("__shard__", "")),
                              key=str(sample.get("__key__", "")), index=index) from err


def _cached_defaults(files: ShardFiles, order: OrderMode | str | None, block_size: int | None,
                     local: tuple[OrderMode, int]) -> tuple[OrderMode | str, int]:
    """The order and block size a dataset reads in when not given: ``local`` for a local folder; through the
    cache, blocks of one shard's worth of consecutive samples (the median shard's sample count).

    Why blocks: a global permutation reads every shard in every batch, so the cache must hold
    the whole dataset or download shards again and again; blocks of about one shard keep each
    rank on one or two shards at a time (the ranks of a node on the same ones, since they split
    each block), and the cache prefetches the next blocks. The price is mixing: a batch draws
    from one or two shards (dataprep shuffles samples across shards when it writes them);
    a larger ``block_size`` mixes more and needs a cache that holds that many shards at once.
    """
    if not files.batched:
        return (local[0] if order is None else order), (local[1] if block_size is None else block_size)
    counts = sorted(s.num_samples for s in files.manifest().shards)
    one_shard = max(1, counts[len(counts) // 2]) if counts else 1
    return (OrderMode.BLOCKS if order is None else order), (one_shard if block_size is None else block_size)


class ShardDataset(_Keyed, torch.utils.data.Dataset):
    """Samples of the tar shards written by ``dataprep shard`` (or adopted by ``dataprep index``).

    Args:
        path: the dataprep output: a local directory, or a URL (``s3://bucket/prefix``,
            ``gs://``, ``az://``), read through the node cache.
        fields: fields to read (column projection), e.g. ("jpg", "cls"); None = all.
        transform: ``f(sample)`` or ``f(sample, rng)``; the latter gets per-sample randomness.
        seed: base seed of the order and of per-sample randomness.
        order: "global" (full permutation per epoch), "blocks" (shuffled blocks of
            ``block_size`` consecutive samples, for slow disks and caches) or "sequential".
            None: "global" for a local folder, "blocks" through the cache.
        block_size: None: 1024 for a local folder; through the cache, one shard's samples.
        topology: rank and world size; None = detected from torch.distributed / env.
        cache_dir, cache_limit: the node cache (``loaders.cache``) to read through: a folder
            on local disk that every rank and worker of the node shares, and its hard size
            bound (bytes or a size such as "200GiB"). Required for a remote URL; for a local
            folder (a network filesystem) they make it read through the cache too.
        cache: a whole ``loaders.cache.CacheConfig`` (time-outs, parallel downloads) instead
            of ``cache_dir`` and ``cache_limit``.

    Missing or unreadable shards raise ``ShardError`` here, at construction (remote shards:
    when first read; the manifest and the index sidecars are read here).
    """

    def __init__(self, path: str | os.PathLike[str], *, fields: Sequence[str] | None = None,
                 transform: Transform | None = None, seed: int = 0, order: OrderMode | str | None = None,
                 block_size: int | None = None, topology: Topology | None = None,
                 cache_dir: str | os.PathLike[str] | None = None, cache_limit: int | str | None = None,
                 cache: CacheConfig | None = None) -> None:
        files = open_shard_files(path, cache_config(path, cache_dir, cache_limit, cache))
        self.shards = TarShardSet(files, fields=fields)
        self.path: Path | str = str(path) if is_remote_url(path) else Path(path)
        self.shard_starts = self.shards.shard_start
        self._setup(transform, seed, *_cached_defaults(files, order, block_size, (OrderMode.GLOBAL, 1024)), topology)

    @property
    def files(self) -> ShardFiles:  # type: ignore[override]  # the shard set's: one owner
        return self.shards.files

    @property
    def label_map(self) -> dict[str, int] | None:
        return self.shards.manifest.label_map

    def __len__(self) -> int:
        return self.shards.num_samples

    def __getitem__(self, item: int | SampleIndex) -> Sample:
        index, epoch = self._resolve(item)
        if index < 0:
            index += len(self)
        with timed_stage("read"), self.files.batch(epoch):
            raw = self.shards.read(index)
        sample: Sample = {"__key__": self.shards.key(index), "__index__": index,
                          "__shard__": self.shards.shard_name(index)}
        try:
            for name, data in raw.items():
                sample[name] = decode_field(name, data)
        except (ValueError, UnicodeDecodeError) as err:
            raise self.shards.sample_error(index, f"field {name!r} does not decode: {err}") from err
        return self._apply(sample, index, epoch)


class ParquetShardDataset(_Keyed, torch.utils.data.Dataset):
    """Rows of the Parquet shards written by ``dataprep shard`` (tables, text, or images).

    ``columns`` projects (None = all). Rows are read a row group at a time and the last
    row group is cached per thread, so ``order="blocks"`` with blocks of about one row
    group reads each group once; the default sampler uses that. ``path`` and the cache
    arguments as for ``ShardDataset``; the row groups are listed from each shard's footer
    (a remote shard's last bytes), so opening downloads no shard.
    """

    def __init__(self, path: str | os.PathLike[str], *, columns: Sequence[str] | None = None,
                 transform: Transform | None = None, seed: int = 0, order: OrderMode | str = "blocks",
                 block_size: int | None = None, topology: Topology | None = None,
                 cache_dir: str | os.PathLike[str] | None = None, cache_limit: int | str | None = None,
                 cache: CacheConfig | None = None) -> None:
        from dataprep.formats.manifest import FORMAT_PARQUET

        self.files = open_shard_files(path, cache_config(path, cache_dir, cache_limit, cache))
        self.path: Path | str = str(path) if is_remote_url(path) else Path(path)
        manifest = self.files.manifest()
        if manifest.format != FORMAT_PARQUET:
            raise ShardError(f"{self.files.where}: holds {manifest.format} shards; use ShardDataset")
        self.columns = list(columns) if columns is not None else None
        self.shard_names = [info.name for info in manifest.shards]
        per_shard = row_groups(self.files, manifest.shards)
        groups = [(f, g, rows) for f, counts in enumerate(per_shard) for g, rows in enumerate(counts)]
        self.group_file = np.array([g[0] for g in groups], dtype=np.int32)
        self.group_index = np.array([g[1] for g in groups], dtype=np.int32)
        self.group_start = np.concatenate([[0], np.cumsum([g[2] for g in groups])]).astype(np.int64)
        self.shard_starts = np.concatenate([[0], np.cumsum([sum(c) for c in per_shard])]).astype(np.int64)
        rows = [g[2] for g in groups]
        self._setup(transform, seed, order, block_size or (int(np.median(rows)) if rows else 1), topology)
        self._local = threading.local()

    def __len__(self) -> int:
        return int(self.group_start[-1])

    def _group(self, g: int) -> dict[str, list[Any]]:
        import pyarrow.parquet as pq

        cache = getattr(self._local, "cache", None)
        if cache is not None and cache[0] == g:
            return cache[1]
        name = self.shard_names[int(self.group_file[g])]
        try:
            table = pq.ParquetFile(self.files.local_path(name)).read_row_group(int(self.group_index[g]),
                                                                               columns=self.columns)
        except OSError as err:
            raise SampleError(f"{self.files.describe(name)}: row group {int(self.group_index[g])} unreadable: {err}",
                              shard=name) from err
        columns = table.to_pydict()
        self._local.cache = (g, columns)
        return columns

    def __getitem__(self, item: int | SampleIndex) -> Sample:
        index, epoch = self._resolve(item)
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} out of range for {len(self)} rows in {self.files.where}")
        g = int(np.searchsorted(self.group_start, index, side="right")) - 1
        with timed_stage("read"), self.files.batch(epoch):
            columns = self._group(g)
        row = index - int(self.group_start[g])
        sample: Sample = {name: values[row] for name, values in columns.items()}
        sample["__index__"] = index
        sample["__shard__"] = self.shard_names[int(self.group_file[g])]
        return self._apply(sample, index, epoch)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_local", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()
