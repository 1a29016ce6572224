"""Adopt WebDataset tar shards made by other tools: index sidecars and a manifest, tars untouched.

The adopted directory reads like one ``dataprep shard`` wrote: ``<shard>.tar.idx`` next to
each tar and ``manifest.json`` (layout ``"adopted"``, no rejects, no label map; a ``cls``
field, if any, is taken as it is), written last.
"""

from __future__ import annotations

import logging
from pathlib import Path

from dataprep.plan.checkpoint import state_dir
from dataprep.errors import FormatError, OutputExistsError, UsageError
from dataprep.formats.tar.index import index_path_for, index_tar, write_index
from dataprep.formats.manifest import (FORMAT_WDS, LAYOUT_ADOPTED, MANIFEST_NAME, Manifest, ShardInfo, Totals,
                                       read_manifest, sha256_file, write_manifest)

log = logging.getLogger(__name__)



def adopt(shard_dir: Path, *, pattern: str = "*.tar", command: tuple[str, ...] = ()) -> Manifest:
    """Index every tar in ``shard_dir`` matching ``pattern`` (sorted by name) and write the manifest.

    Raises ``UsageError`` if nothing matches, ``FormatError`` naming the file for a tar that
    is malformed or not grouped by key, and ``OutputExistsError`` if ``shard_dir`` already
    holds a manifest that is not from an earlier adoption.
    """
    directory = Path(shard_dir)
    _check_no_shard_run(directory)
    paths = find_shards(directory, pattern)
    _check_no_foreign_manifest(directory)
    shards = tuple(adopt_shard(path) for path in paths)
    total = sum(s.num_samples for s in shards)
    manifest = Manifest(
        format=FORMAT_WDS,
        layout=LAYOUT_ADOPTED,
        shards=shards,
        totals=Totals(inputs_seen=total, samples_kept=total, rejected=0),
        command=tuple(command),
        options={"pattern": pattern},
        label_map=None,
        schema=None,
        rejects=None,
    )
    write_manifest(directory, manifest)
    log.info("adopted %d shards, %d samples in %s", len(shards), total, directory)
    return manifest


def find_shards(directory: Path, pattern: str) -> list[Path]:
    """Regular, non-hidden files directly in ``directory`` matching ``pattern``, sorted by name."""
    if not directory.is_dir():
        raise UsageError(f"{directory}: not a directory")
    if not pattern or "/" in pattern or "**" in pattern:
        raise UsageError(f"pattern {pattern!r} must match file names directly in {directory} (no '/')")
    paths = sorted(
        (p for p in directory.glob(pattern) if p.is_file() and not p.name.startswith(".")),
        key=lambda p: p.name,
    )
    if not paths:
        raise UsageError(f"{directory}: no files match {pattern!r}")
    return paths


def adopt_shard(path: Path) -> ShardInfo:
    """Index one tar (sidecar written atomically next to it) and describe it for the manifest."""
    index = index_tar(path)
    if index.num_samples == 0:
        raise FormatError(f"{path}: holds no regular files; not a WebDataset shard")
    sidecar = index_path_for(path)
    index_sha256 = write_index(sidecar, index)
    # Hashing reads the tar once more; index_tar only read its headers.
    return ShardInfo(name=path.name, num_samples=index.num_samples, bytes=index.shard_bytes, sha256=sha256_file(path),
                     index=sidecar.name, fields=index.fields, index_sha256=index_sha256)


def _check_no_shard_run(directory: Path) -> None:
    """Refuse a folder where a ``dataprep shard`` run is unfinished: its shards are part of a run, not a dataset."""
    if state_dir(directory).is_dir():
        raise OutputExistsError(
            f"{directory} holds an unfinished `dataprep shard` run ({state_dir(directory)}): its shards are a part of "
            "the dataset. Finish it by rerunning the same `dataprep shard` command, or start it again with "
            "--overwrite; nothing was indexed"
        )


def _check_no_foreign_manifest(directory: Path) -> None:
    if not (directory / MANIFEST_NAME).exists():
        return
    try:
        layout = read_manifest(directory).layout
    except FormatError as err:
        raise OutputExistsError(f"{directory / MANIFEST_NAME}: exists and is unreadable; remove it to adopt the "
                                "shards") from err
    if layout != LAYOUT_ADOPTED:
        raise OutputExistsError(
            f"{directory / MANIFEST_NAME}: exists with layout {layout!r}; these shards already have a manifest "
            "(remove it to adopt)"
        )
