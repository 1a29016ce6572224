"""What the cache may hold for one dataset: every object the manifest names, keyed by content.

A ``Catalog`` is built from the manifest's bytes (whatever the dataset kind: tar, Parquet,
token shards all list ``shards`` with ``sha256``; sidecars with ``index`` and, for tokens,
``index_sha256``). Each ``CacheEntry`` has a local ``key``: the sha256 of its content when
the manifest records it, so a rewritten shard can never be served for the new one, and
otherwise a digest of (manifest identity, name), so the entry dies with the manifest.
``identity`` is the sha256 of the manifest's bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from dataprep.formats import FormatError
from dataprep.formats.manifest import MANIFEST_NAME, Manifest
from loaders.errors import ShardError

__all__ = ["CacheEntry", "Catalog"]


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One object: ``name`` relative to the dataset URL, ``size`` in bytes (None: ask the store), ``sha256``."""

    name: str
    size: int | None
    sha256: str | None
    key: str


@dataclass(frozen=True)
class Catalog:
    """The objects of the dataset at ``url`` as of the manifest whose sha256 is ``identity``."""

    url: str
    identity: str
    manifest: Manifest
    entries: Mapping[str, CacheEntry]
    manifest_bytes: int = 0

    @classmethod
    def from_manifest_bytes(cls, url: str, data: bytes) -> Catalog:
        """The catalog of a manifest (``FormatError`` from its parser becomes ``ShardError`` naming the URL)."""
        identity = hashlib.sha256(data).hexdigest()
        where = f"{url.rstrip('/')}/{MANIFEST_NAME}"
        try:
            manifest = Manifest.from_json(json.loads(data), where=where)
        except (ValueError, FormatError) as err:
            raise ShardError(f"{where}: not a readable manifest: {err}") from err
        entries: dict[str, CacheEntry] = {}
        for shard in manifest.shards:
            entries[shard.name] = CacheEntry(shard.name, shard.bytes, shard.sha256, shard.sha256)
            if shard.index:
                entries[shard.index] = _entry(shard.index, shard.index_sha256, identity)
        return cls(url=url, identity=identity, manifest=manifest, entries=entries, manifest_bytes=len(data))

    def entry(self, name: str) -> CacheEntry:
        """The entry of ``name``; an object the manifest does not list gets one tied to this manifest."""
        found = self.entries.get(name)
        return found if found is not None else _entry(name, None, self.identity)

    def by_key(self) -> dict[str, CacheEntry]:
        return {e.key: e for e in self.entries.values()}

    @property
    def largest_shard_bytes(self) -> int:
        return max((s.bytes for s in self.manifest.shards), default=0)


def _entry(name: str, sha256: str | None, identity: str) -> CacheEntry:
    key = sha256 if sha256 else hashlib.sha256(f"{identity}/{name}".encode()).hexdigest()
    return CacheEntry(name, None, sha256, key)
