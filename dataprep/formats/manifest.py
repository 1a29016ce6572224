"""The manifest: ``OUT/manifest.json``, written last, describes a complete shard directory.

Schema, version 3 (keys are the module constants below)::

    {
      "version": 3,
      "format": "wds" | "parquet" | "tokens",
      "layout": "image-folder" | "grouped" | "table" | "text" | "adopted",
      "layout_reason": "every file is in a class folder ..." | null,  # why this layout (given or detected)
      "raw_listing_sha256": "..." | null,          # digest of RAW's (path, size, mtime) listing
      "command": ["dataprep", "shard", ...],      # argv as given
      "options": {...},                            # normalised options that shape the output
      "label_map": {"cat": 0, "dog": 1} | null,    # class name -> index, sorted by name
      "schema": [{"name": "jpg", "type": "binary"}, ...] | null,
      "shards": [{"name": "shard-000000.tar", "index": "shard-000000.tar.idx" | null,
                  "num_samples": 1000, "bytes": 123456, "sha256": "...", "fields": ["cls", "jpg"],
                  "num_tokens": null, "index_sha256": null}],
      "tokenizer": null,
      "totals": {"inputs_seen": 1010, "samples_kept": 1000, "rejected": 10,
                 "rejected_by_reason": {"truncated": 3, ...}},
      "rejects": "rejects.jsonl"
    }

Token output (``format: "tokens"``, see ``dataprep.formats.tokens.index``): each shard is a
Megatron-Core ``IndexedDataset`` pair, ``name`` the ``.bin`` (``bytes`` and ``sha256`` of it) and
``index`` the ``.idx`` (``index_sha256``); ``num_samples`` counts documents and ``num_tokens``
their tokens, EOS included. ``tokenizer`` records what made the ids::

      "tokenizer": {"name": "tokenizer.json" | "bytes", "sha256": "...", "vocab_size": 50257,
                    "eos": "<|endoftext|>", "eos_id": 50256, "dtype": "uint16" | "int32"}

``sha256`` is the sha256 of the tokenizer file's bytes (for ``bytes``, of the built-in
tokenizer's name). The token keys are ``null`` for the other formats.

Versions 1 (no ``layout_reason``, no ``raw_listing_sha256``) and 2 (no token keys) are still read.

Sample index *i* of the dataset is sample ``i - start`` of the shard whose cumulative
range holds it, in manifest order; ``Manifest.shard_starts`` gives those starts.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.errors import FormatError
from dataprep.formats.durable import atomic_write_bytes

MANIFEST_NAME = "manifest.json"
REJECTS_NAME = "rejects.jsonl"
MANIFEST_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)



class OutputFormat(enum.StrEnum):
    """The shard formats, by the name a manifest's ``format`` and ``dataprep shard --format`` give them: WebDataset
    tar shards, Parquet shards, Megatron token shards; ``AUTO`` only as a request (the run picks by the layout:
    never in a manifest). The one vocabulary of format names: every other module imports it."""

    AUTO = "auto"
    WDS = "wds"
    PARQUET = "parquet"
    TOKENS = "tokens"


# The written formats under the names their readers and writers import.
FORMAT_WDS, FORMAT_PARQUET, FORMAT_TOKENS = OutputFormat.WDS, OutputFormat.PARQUET, OutputFormat.TOKENS
# The layout of a manifest written by ``dataprep index`` for tar shards made by other tools.
LAYOUT_ADOPTED = "adopted"

_HASH_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class ShardInfo:
    """One shard as recorded in the manifest. ``index`` is None for Parquet shards.

    Token shards: ``name`` is the ``.bin``, ``index`` the ``.idx`` and ``index_sha256`` its
    sha256, ``num_samples`` documents and ``num_tokens`` tokens; both None for other formats.
    """

    name: str
    num_samples: int
    bytes: int
    sha256: str
    index: str | None = None
    fields: tuple[str, ...] = ()
    num_tokens: int | None = None
    index_sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "index": self.index,
            "num_samples": self.num_samples,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "fields": list(self.fields),
            "num_tokens": self.num_tokens,
            "index_sha256": self.index_sha256,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ShardInfo:
        tokens = doc.get("num_tokens")
        return cls(name=doc["name"], num_samples=int(doc["num_samples"]), bytes=int(doc["bytes"]),
                   sha256=doc["sha256"], index=doc.get("index"), fields=tuple(doc.get("fields", ())),
                   num_tokens=None if tokens is None else int(tokens), index_sha256=doc.get("index_sha256"))


@dataclass(frozen=True)
class Totals:
    """Accounting of a run: ``inputs_seen == samples_kept + rejected`` always holds."""

    inputs_seen: int = 0
    samples_kept: int = 0
    rejected: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs_seen": self.inputs_seen,
            "samples_kept": self.samples_kept,
            "rejected": self.rejected,
            "rejected_by_reason": dict(sorted(self.rejected_by_reason.items())),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Totals:
        return cls(inputs_seen=int(doc["inputs_seen"]), samples_kept=int(doc["samples_kept"]),
                   rejected=int(doc["rejected"]), rejected_by_reason=dict(doc.get("rejected_by_reason", {})))


@dataclass(frozen=True)
class Manifest:
    """A complete shard directory's description (see the module docstring for the schema)."""

    format: str
    layout: str
    shards: tuple[ShardInfo, ...]
    totals: Totals
    command: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    label_map: dict[str, int] | None = None
    schema: list[dict[str, str]] | None = None
    rejects: str | None = REJECTS_NAME
    layout_reason: str | None = None
    raw_listing_sha256: str | None = None
    tokenizer: dict[str, Any] | None = None
    version: int = MANIFEST_VERSION

    @property
    def num_samples(self) -> int:
        return sum(s.num_samples for s in self.shards)

    @property
    def shard_starts(self) -> np.ndarray:
        """int64 [num_shards + 1]: global index of each shard's first sample, then the total."""
        return np.concatenate([[0], np.cumsum([s.num_samples for s in self.shards], dtype=np.int64)]).astype(np.int64)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "format": self.format,
            "layout": self.layout,
            "layout_reason": self.layout_reason,
            "raw_listing_sha256": self.raw_listing_sha256,
            "command": list(self.command),
            "options": self.options,
            "label_map": self.label_map,
            "schema": self.schema,
            "shards": [s.to_json() for s in self.shards],
            "totals": self.totals.to_json(),
            "rejects": self.rejects,
            "tokenizer": self.tokenizer,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, where: str = MANIFEST_NAME) -> Manifest:
        version = doc.get("version")
        if version not in READABLE_VERSIONS:
            raise FormatError(f"{where}: manifest version {version!r} not supported "
                              f"(expected one of {READABLE_VERSIONS})")
        try:
            return cls(
                format=doc["format"],
                layout=doc["layout"],
                shards=tuple(ShardInfo.from_json(s) for s in doc["shards"]),
                totals=Totals.from_json(doc["totals"]),
                command=tuple(doc.get("command", ())),
                options=dict(doc.get("options", {})),
                label_map=doc.get("label_map"),
                schema=doc.get("schema"),
                rejects=doc.get("rejects"),
                layout_reason=doc.get("layout_reason"),
                raw_listing_sha256=doc.get("raw_listing_sha256"),
                tokenizer=doc.get("tokenizer"),
                version=version,
            )
        except (KeyError, TypeError, ValueError) as err:
            raise FormatError(f"{where}: malformed manifest: {err!r}") from err


def manifest_bytes(manifest: Manifest) -> bytes:
    """Canonical encoding: stable key order, 2-space indent, trailing newline.

    ASCII with ``\\u`` escapes: valid JSON for every reader, and names from undecodable file
    names (surrogateescape) round-trip exactly instead of failing to encode as UTF-8.
    """
    return (json.dumps(manifest.to_json(), indent=2) + "\n").encode("ascii")


def write_manifest(out_dir: str | os.PathLike[str], manifest: Manifest) -> Path:
    """Write ``OUT/manifest.json`` atomically; returns its path."""
    path = Path(out_dir) / MANIFEST_NAME
    atomic_write_bytes(path, manifest_bytes(manifest))
    return path


def read_manifest(out_dir: str | os.PathLike[str]) -> Manifest:
    """Read ``OUT/manifest.json``; ``FormatError`` names the file when missing or malformed."""
    path = Path(out_dir) / MANIFEST_NAME
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError as err:
        raise FormatError(f"{path}: no manifest (not a dataprep output directory, or the run did not finish)") from err
    except (OSError, ValueError) as err:
        raise FormatError(f"{path}: unreadable manifest: {err}") from err
    return Manifest.from_json(doc, where=str(path))
