"""Where a dataset folder's bytes come from: a local folder by file descriptor, or the node cache by lease.

``ShardFiles`` is the one dataset-folder interface, read by image, Parquet and token datasets
alike (``open_shard_files(path, cache_config(...))``):

- ``where``, ``manifest()``; ``describe(name)``, an object's path or URL for messages;
  ``read_sidecar(name, parse)``, a small object read whole and parsed; ``check_shard(info)``;
- ``pread(name, size, offset)`` and ``local_path(name)``: a shard's bytes, inside
  ``batch(epoch, grid)``, the span of one batch's reads (``grid``: the epoch is read by
  global position on it, ``loaders.read.grid``);
- ``tail(name, size, nbytes)``: a shard's last bytes (a Parquet footer) without downloading the shard;
- ``set_plan(plan, shard_starts, topology)``: how every rank's samples are drawn, once the sampler is known;
- ``hold(names)``: objects a reader maps and reads anywhere from its first batch on (a token
  corpus's ``.idx`` and ``.bin``), held whole for as long as the files live in a process.

``LocalShardFiles`` opens descriptors lazily, one per shard and process (reopened after a
fork), shared by threads (pread moves no file position). ``CachedShardFiles`` reads through
``loaders.cache.ShardCache``: inside ``batch(epoch)`` each thread holds one lease at a time
(the shard it reads), released when it moves to another shard and when the batch ends, so a
worker waiting for its next batch holds nothing and a small cache always makes progress. The
first batch of an epoch in a process plans that epoch and the next one for every rank of the
node (``loaders.read.read_plan``), so the cache prefetches across the epoch boundary. A batch
read by global position brings its grid (batch size, world size, where the run began): the
plan follows it, so after an elastic resume each node plans its new ranks' shards from the
resume point on, in every process, whenever its copy of the dataset was made. Objects
``hold`` names are downloaded first (in order, ``max_downloads`` at a time; a ``cache_limit``
that cannot hold them all is refused naming the minimum), each held by a lease of its own
outside any batch; a pickled copy takes its own leases (on verified copies: nothing is
downloaded again), and so does a forked one on its first ``local_path``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from dataprep.formats import FormatError
from dataprep.formats.manifest import Manifest, ShardInfo, read_manifest
from dataprep.formats.sizes import format_bytes
from dataprep.remote import RemoteError, is_remote_url
from loaders.cache import CacheConfig, CacheLimitError, Lease, ShardCache
from loaders.errors import ConfigError, ShardError
from loaders.read.read_plan import ReadPlan, node_ranks, shard_uses, stream_name, stream_rank
from loaders.read.grid import GlobalGrid
from loaders.read.topology import Topology

__all__ = ["CachedShardFiles", "LocalShardFiles", "ShardFiles", "cache_config", "open_shard_files"]

log = logging.getLogger("loaders.read")
T = TypeVar("T")


class ShardFiles(Protocol):
    """What a dataset reads its shards through (module docstring)."""

    batched: bool  # reads hold something for the span of a batch: the dataset reads a batch at a time

    @property
    def where(self) -> str: ...
    def manifest(self) -> Manifest: ...
    def describe(self, name: str) -> str: ...
    def check_shard(self, info: ShardInfo) -> None: ...
    def read_sidecar(self, name: str, parse: Callable[[bytes], T]) -> T: ...
    def pread(self, name: str, size: int, offset: int) -> bytes: ...
    def local_path(self, name: str) -> Path: ...
    def tail(self, name: str, size: int, nbytes: int) -> bytes: ...
    def batch(self, epoch: int, grid: GlobalGrid | None = None) -> Any: ...
    def set_plan(self, plan: ReadPlan, shard_starts: np.ndarray, topology: Topology) -> None: ...
    def hold(self, names: Sequence[str]) -> None: ...
    def close(self) -> None: ...


def cache_config(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None,
                 cache_limit: int | str | None, cache: CacheConfig | None) -> CacheConfig | None:
    """The cache a dataset at ``path`` reads through (None: read the folder directly), from the dataset's
    arguments: ``cache_dir`` and ``cache_limit`` together, or a whole ``CacheConfig``; a remote URL needs one."""
    if cache is not None:
        if cache_dir is not None or cache_limit is not None:
            raise ConfigError("give either cache= (a CacheConfig) or cache_dir= and cache_limit=, not both")
        if not isinstance(cache, CacheConfig):
            raise ConfigError(f"'cache' must be a loaders.cache.CacheConfig or None (got {cache!r})")
        return cache
    if cache_dir is None and cache_limit is None:
        if is_remote_url(path):
            raise ConfigError(f"{path} is remote: give cache_dir= (a folder on this node's local disk) and "
                              "cache_limit= (bytes or a size such as '200GiB') to read it through the node cache")
        return None
    if cache_dir is None or cache_limit is None:
        missing = "cache_dir" if cache_dir is None else "cache_limit"
        raise ConfigError(f"cache_dir and cache_limit go together ({missing} is missing): the cache is a folder "
                          "with a hard size bound")
    return CacheConfig(cache_dir, cache_limit)


def open_shard_files(path: str | os.PathLike[str], config: CacheConfig | None) -> ShardFiles:
    """The files of the dataset at ``path``: through the node cache when ``config`` is given, else directly."""
    if config is None:
        return LocalShardFiles(path)
    return CachedShardFiles(ShardCache.open_dataset(path, cache_dir=config.cache_dir, cache_limit=config.cache_limit,
                                                    **_options(config)))


def _options(config: CacheConfig) -> dict[str, Any]:
    fixed = {"cache_dir", "cache_limit", "limit_bytes", "root"}
    return {name: getattr(config, name) for name in config.__dataclass_fields__ if name not in fixed}


class LocalShardFiles:
    """The shards of a local folder, read by descriptor (module docstring)."""

    batched = False

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._fds: dict[str, int] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return str(self.root)

    def manifest(self) -> Manifest:
        try:
            return read_manifest(self.root)
        except FormatError as err:
            raise ShardError(str(err)) from err

    def describe(self, name: str) -> str:
        return str(self.root / name)

    def check_shard(self, info: ShardInfo) -> None:
        path = self.root / info.name
        try:
            size = path.stat().st_size
        except OSError as err:
            raise ShardError(f"shard {path} listed in the manifest is missing or unreadable: {err.strerror}") from err
        if size != info.bytes:
            raise ShardError(f"shard {path} is {size} bytes, the manifest says {info.bytes} (truncated or replaced?)")

    def read_sidecar(self, name: str, parse: Callable[[bytes], T]) -> T:
        try:
            data = (self.root / name).read_bytes()
        except OSError as err:
            raise ShardError(f"{self.root / name}: cannot read it: {err.strerror}") from err
        return parse(data)

    def pread(self, name: str, size: int, offset: int) -> bytes:
        return os.pread(self._fd(name), size, offset)

    def local_path(self, name: str) -> Path:
        return self.root / name

    def tail(self, name: str, size: int, nbytes: int) -> bytes:
        with open(self.root / name, "rb") as f:
            return os.pread(f.fileno(), nbytes, size - nbytes)

    @contextmanager
    def batch(self, epoch: int, grid: GlobalGrid | None = None) -> Iterator[None]:
        yield

    def set_plan(self, plan: ReadPlan, shard_starts: np.ndarray, topology: Topology) -> None:
        return None  # the page cache needs no plan

    def hold(self, names: Sequence[str]) -> None:
        return None  # a folder's files stay where they are

    def _fd(self, name: str) -> int:
        if os.getpid() != self._pid:  # forked: descriptors are shared with the parent; reopen
            self._fds, self._pid, self._lock = {}, os.getpid(), threading.Lock()
        fd = self._fds.get(name)
        if fd is None:
            with self._lock:
                fd = self._fds.get(name)
                if fd is None:
                    path = self.root / name
                    try:
                        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                    except OSError as err:
                        raise ShardError(f"cannot open shard {path}: {err.strerror}") from err
                    self._fds[name] = fd
        return fd

    def close(self) -> None:
        if os.getpid() == self._pid:
            for fd in self._fds.values():
                os.close(fd)
        self._fds = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"])  # type: ignore[misc]  # __setstate__ rebuilds


class _Reader(threading.local):
    """One thread's reading: how deep in ``batch`` it is, the batch's epoch, the lease it holds."""

    depth = 0
    epoch = 0
    lease: Lease | None = None


class CachedShardFiles:
    """The shards of a dataset read through the node cache (module docstring)."""

    batched = True

    def __init__(self, cache: ShardCache) -> None:
        self.cache = cache
        self._plan: ReadPlan | None = None
        self._shard_starts: np.ndarray | None = None
        self._topology = Topology()
        self._names = [s.name for s in cache.catalog.manifest.shards]
        self._dataset = cache.catalog.identity[:12]  # streams of two datasets sharing a folder stay apart
        self._reader = _Reader()
        self._plan_lock = threading.Lock()
        self._grids: dict[int, GlobalGrid | None] = {}  # the grid each epoch was planned with, in this process
        self._held: dict[str, Lease] | None = None  # after hold(): every object's own lease, outside any batch

    @property
    def where(self) -> str:
        return self.cache.catalog.url

    def manifest(self) -> Manifest:
        return self.cache.catalog.manifest

    def describe(self, name: str) -> str:
        return self.cache.store.url_of(name)

    def check_shard(self, info: ShardInfo) -> None:
        return None  # a download is checked against the manifest's size and sha256 before anyone reads it

    def read_sidecar(self, name: str, parse: Callable[[bytes], T]) -> T:
        """Parse ``name``'s cached bytes; a copy that does not parse is dropped and downloaded once more."""
        for attempt in range(2):
            with self.cache.open(name) as lease:
                data = _read_all(lease)
            try:
                return parse(data)
            except ShardError as err:
                if attempt or not self.cache.discard(name):
                    err.add_note(f"read through the node cache in {self.cache.config.root}")
                    raise
                log.warning("%s: the cached copy does not parse (%s); downloading it again", self.describe(name), err)
        raise AssertionError("unreachable")

    def pread(self, name: str, size: int, offset: int) -> bytes:
        return self._hold(name).read(offset, size)

    def local_path(self, name: str) -> Path:
        if self._held is None:
            return self._hold(name).path
        lease = self._held.get(name)
        if lease is None or not lease.held:  # forked: the parent's leases are not this process's
            lease = self._held[name] = self.cache.open(name)
        return lease.path

    def tail(self, name: str, size: int, nbytes: int) -> bytes:
        """The last ``nbytes`` of shard ``name`` (``size`` bytes): from its cached copy, else one ranged read."""
        lease = self.cache.cached(name)
        if lease is not None:
            with lease:
                return lease.read(size - nbytes, nbytes)
        try:
            return b"".join(bytes(c) for c in self.cache.store.iter_range(name, size - nbytes, size))
        except RemoteError as err:
            raise ShardError(f"{self.describe(name)}: cannot read its last {nbytes} bytes: {err}") from err

    @contextmanager
    def batch(self, epoch: int, grid: GlobalGrid | None = None) -> Iterator[None]:
        """The reads of one batch of ``epoch`` (nested calls join the outer one); the lease ends with it.

        grid: the epoch is read by global position on it (else by ``DistributedSampler``'s split)."""
        reader = self._reader
        if reader.depth == 0:
            self._ensure_planned(epoch, grid)
            reader.epoch = epoch
        reader.depth += 1
        try:
            yield
        finally:
            reader.depth -= 1
            if reader.depth == 0 and reader.lease is not None:
                lease, reader.lease = reader.lease, None
                lease.release()

    def set_plan(self, plan: ReadPlan, shard_starts: np.ndarray, topology: Topology) -> None:
        self._plan, self._shard_starts, self._topology = plan, shard_starts, topology

    def hold(self, names: Sequence[str]) -> None:
        """Download ``names`` (in order) and hold each by its own lease from now on (module docstring);
        CacheLimitError when ``cache_limit`` cannot hold them all."""
        self._check_room(names)
        self.cache.plan(0, {f"{self._dataset}:corpus": list(names)})
        self._held = {name: self.cache.open(name) for name in names}

    def close(self) -> None:
        for lease in (self._held or {}).values():
            lease.release()
        self.cache.close()

    # -- internals --
    def _check_room(self, names: Sequence[str]) -> None:
        catalog, config = self.cache.catalog, self.cache.config
        sizes = {s.name: s.bytes for s in catalog.manifest.shards}
        try:
            need = sum(sizes[n] if n in sizes else self.cache.store.head(n).size for n in names)
        except RemoteError as err:
            raise ShardError(f"{catalog.url}: cannot list the sizes of the files to hold: {err}") from err
        need += -(-catalog.manifest_bytes // 4096) * 4096 + config.reserve_bytes + 4096 * len(names)
        if config.limit_bytes < need:
            raise CacheLimitError(
                f"cache_limit {config.describe_limit()} cannot hold {catalog.url}: token datasets read random "
                f"documents of every shard, so the cache holds the whole corpus: {need} bytes ({format_bytes(need)}) "
                "at least; raise cache_limit")

    def _hold(self, name: str) -> Lease:
        """This thread's lease on ``name``: the one it holds, or (releasing that first) a new one."""
        reader = self._reader
        lease = reader.lease
        if lease is not None and lease.held and lease.name == name:
            return lease
        if lease is not None:
            reader.lease = None
            lease.release()
        planned = self._plan is not None and reader.depth > 0
        stream = stream_name(self._dataset, self._topology.rank) if planned else None
        lease = self.cache.open(name, stream=stream, epoch=reader.epoch if planned else None)
        reader.lease = lease
        return lease

    def _ensure_planned(self, epoch: int, grid: GlobalGrid | None) -> None:
        """Plan ``epoch`` (on ``grid``) and the next one (from its start) for every rank of the node, once per
        process and grid."""
        if self._plan is None or self._shard_starts is None:
            return
        wanted = {epoch: grid, epoch + 1: None if grid is None else grid.fresh()}
        if not self._unplanned(wanted):
            return
        with self._plan_lock:
            todo = self._unplanned(wanted)
            world_size = self._topology.world_size if grid is None else grid.world_size
            ranks = self._node_ranks(world_size)
            for e, on in todo.items():
                uses = shard_uses(self._plan, self._shard_starts, e, ranks, on)
                self.cache.plan(e, {stream_name(self._dataset, r): [self._names[i] for i in shards.tolist()]
                                    for r, shards in uses.items()})
                self._grids[e] = on

    def _unplanned(self, wanted: dict[int, GlobalGrid | None]) -> dict[int, GlobalGrid | None]:
        planned = self.cache.planned_epochs
        return {e: g for e, g in wanted.items() if e not in planned or e not in self._grids or self._grids[e] != g}

    def _node_ranks(self, world_size: int) -> list[int]:
        """The ranks of this node: from the topology, and any rank whose readers use this folder now (ranks
        launched with RANK and WORLD_SIZE only do not know their neighbours); those of ``world_size`` ranks."""
        ranks = set(node_ranks(self._topology))
        for stream in self.cache.node_streams():
            rank = stream_rank(self._dataset, stream)
            if rank is not None:
                ranks.add(rank)
        return sorted(r for r in ranks if r < world_size)

    def __getstate__(self) -> dict[str, Any]:
        return {"cache": self.cache, "plan": self._plan, "shard_starts": self._shard_starts, "topology": self._topology,
                "held": None if self._held is None else list(self._held)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["cache"])  # type: ignore[misc]  # __setstate__ rebuilds
        self.set_plan(state["plan"], state["shard_starts"], state["topology"])
        if state["held"] is not None:  # the same manifest as the sender's (its catalog travels with it)
            self._held = {name: self.cache.open(name) for name in state["held"]}


def _read_all(lease: Lease) -> bytes:
    chunks, offset = [], 0
    while offset < lease.size:
        chunk = lease.read(offset, lease.size - offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)
