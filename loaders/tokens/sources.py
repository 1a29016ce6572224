"""Where a token corpus's directories are: a local folder, or a remote one held whole in the node cache.

``open_source(path, cache)`` gives a ``TokenShards``: its ``manifest``, ``where`` (for
messages) and ``path(name)``, the local file of one of its objects. ``LocalTokens`` is a
folder as today. ``CachedTokens`` reads ``s3://`` (``gs://``, ``az://``, or a slow folder
given a cache) through ``loaders.cache``: a token dataset's windows land on random
documents of every shard from the first batch on, so the cache must hold the whole
corpus (a smaller ``cache_limit`` is refused naming the minimum), every ``.idx`` and
``.bin`` is downloaded (in order, ``max_downloads`` at a time) before the dataset is
built, and each is held by a lease for as long as the source lives in a process (its
maps read the file). A pickled source carries its URL and configuration; the receiving
process takes its own leases (on verified copies: nothing is downloaded again).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from dataprep.formats import FormatError
from dataprep.formats.manifest import Manifest, read_manifest
from dataprep.remote import RemoteError
from dataprep.formats.sizes import format_bytes
from loaders.cache import CacheConfig, CacheLimitError, Lease, ShardCache
from loaders.errors import ShardError

__all__ = ["CachedTokens", "LocalTokens", "TokenShards", "open_source"]


class TokenShards(Protocol):
    """One token-shard directory (module docstring)."""

    where: str
    manifest: Manifest

    def path(self, name: str) -> Path: ...


class LocalTokens:
    """A local folder, read in place."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.where = str(self.root)
        try:
            self.manifest = read_manifest(self.root)
        except FormatError as err:
            raise ShardError(f"{self.root}: cannot read the token shards' manifest: {err}") from err

    def path(self, name: str) -> Path:
        return self.root / name


class CachedTokens:
    """A token directory held whole in the node cache (module docstring)."""

    def __init__(self, url: str | os.PathLike[str], config: CacheConfig) -> None:
        options = {k: getattr(config, k) for k in config.__dataclass_fields__
                   if k not in ("cache_dir", "cache_limit", "limit_bytes", "root")}
        self.cache = ShardCache.open_dataset(url, cache_dir=config.cache_dir, cache_limit=config.cache_limit, **options)
        names = [n for s in self.cache.catalog.manifest.shards for n in ((s.index,) if s.index else ())]
        names += [s.name for s in self.cache.catalog.manifest.shards if s.num_tokens]
        self._check_room(names)
        self.cache.plan(0, {f"{self.cache.catalog.identity[:12]}:corpus": names})
        self._hold(names)

    def _hold(self, names: list[str]) -> None:
        self.where = self.cache.catalog.url
        self.manifest = self.cache.catalog.manifest
        self._leases: dict[str, Lease] = {name: self.cache.open(name) for name in names}

    def _check_room(self, names: list[str]) -> None:
        sizes = {s.name: s.bytes for s in self.cache.catalog.manifest.shards}
        try:
            need = sum(sizes[n] if n in sizes else self.cache.store.head(n).size for n in names)
        except RemoteError as err:
            raise ShardError(f"{self.cache.catalog.url}: cannot list its token shards' sizes: {err}") from err
        need += -(-self.cache.catalog.manifest_bytes // 4096) * 4096 + self.cache.config.reserve_bytes \
            + 4096 * len(names)
        config = self.cache.config
        if config.limit_bytes < need:
            raise CacheLimitError(
                f"cache_limit {config.describe_limit()} cannot hold {self.cache.catalog.url}: token datasets read "
                "random documents of every shard, so the cache holds the whole corpus: "
                f"{need} bytes ({format_bytes(need)}) at least; raise cache_limit")

    def path(self, name: str) -> Path:
        lease = self._leases.get(name)
        if lease is None or not lease.held:  # forked: the parent's leases are not this process's
            lease = self._leases[name] = self.cache.open(name)
        return lease.path

    def close(self) -> None:
        for lease in self._leases.values():
            lease.release()
        self.cache.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"cache": self.cache, "names": list(self._leases)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.cache = state["cache"]  # the same manifest as the sender's (its catalog travels with it)
        self._hold(state["names"])


def open_source(path: str | os.PathLike[str], cache: CacheConfig | None) -> TokenShards:
    """The directory at ``path``: through the node cache when ``cache`` is given (required for a remote URL)."""
    if cache is None:
        return LocalTokens(path)
    return CachedTokens(path, cache)
