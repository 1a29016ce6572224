"""Pass 1: the deterministic input order of a run, before any decoding.

Media (image-folder, grouped): every raw record is listed in sorted key order, exact
duplicates are found (first by sorted key wins), records without a usable label are
rejected, and the list is permuted by ``seed`` so that classes mix inside every shard.
Duplicate search is cheap: only files of equal size are read, and only the first
64 KiB of them unless those collide too.

Tables and text stream in file order (bounded memory); their duplicates are found
while writing, in that order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dataprep.clean.tables import infer_schema, iter_table_rows
from dataprep.clean.text import iter_text_records
from dataprep.config import ShardConfig
from dataprep.records import RawRecord, Reject, RejectReason
from dataprep.sources import (
    IMAGE_EXTENSIONS,
    TABLE_EXTENSIONS,
    TEXT_EXTENSIONS,
    KeyAssigner,
    Layout,
    RawFile,
    extension,
    media_records,
    walk_files,
)

Item = RawRecord | Reject
_HEAD_BYTES = 64 * 1024
_SCHEMA_SAMPLE_ROWS = 1000


@dataclass(frozen=True)
class Plan:
    """The inputs of a run in their deterministic order.

    items: a list (media) or a re-iterable stream factory (tables, text).
    total: number of inputs when known up front, else None.
    label_map: class name -> index for the image-folder layout, else None.
    table_schema: column -> type name for tables, else None.
    """

    layout: Layout
    items: list[Item] | StreamFactory
    total: int | None
    label_map: dict[str, int] | None = None
    table_schema: dict[str, str] | None = None


@dataclass(frozen=True)
class StreamFactory:
    """Re-creates the stream of table rows or text records, in the same order every time."""

    config: ShardConfig
    layout: Layout

    def __iter__(self) -> Iterator[Item]:
        keys = KeyAssigner()
        wanted = TABLE_EXTENSIONS if self.layout is Layout.TABLE else TEXT_EXTENSIONS
        for item in _input_files(self.config):
            if isinstance(item, Reject):
                yield item
                continue
            ext = extension(item.rel)
            if ext not in wanted and not (self.layout is Layout.TEXT and Path(self.config.raw).is_file()):
                yield Reject(item.rel, RejectReason.UNSUPPORTED, f"'.{ext}' files are not part of a {self.layout} dataset")
                continue
            if self.layout is Layout.TABLE:
                records: Iterable[RawRecord] = iter_table_rows(Path(item.path), item.rel)
            else:
                records = iter_text_records(Path(item.path), item.rel, self.config.text.unit)
            stem = item.rel.rsplit(".", 1)[0] if "." in item.rel else item.rel
            for record in records:
                suffix = f"{record.row:08d}" if record.row is not None else "0"
                yield dataclasses.replace(record, key=keys.assign(f"{stem}/{suffix}"))


def _input_files(config: ShardConfig) -> Iterator[RawFile | Reject]:
    raw = Path(config.raw)
    if raw.is_file():
        yield RawFile(raw.name, os.fspath(raw), raw.stat().st_size)
    else:
        yield from walk_files(raw, follow_symlinks=config.follow_symlinks)


def make_plan(config: ShardConfig, layout: Layout) -> Plan:
    if layout in (Layout.TABLE, Layout.TEXT):
        stream = StreamFactory(config, layout)
        schema = None
        if layout is Layout.TABLE:
            schema = config.table.schema or infer_schema(_schema_sample(stream))
        return Plan(layout, stream, None, table_schema=schema)
    items: list[Item] = list(media_records(Path(config.raw), layout, follow_symlinks=config.follow_symlinks))
    label_map = None
    if layout is Layout.IMAGE_FOLDER:
        label_map = {name: i for i, name in enumerate(sorted({r.label for r in items if isinstance(r, RawRecord) and r.label}))}
        items = [_check_label(r) for r in items]
    items = mark_duplicates(items)
    if config.shuffle:
        order = np.random.default_rng(config.seed).permutation(len(items))
        items = [items[i] for i in order]
    return Plan(layout, items, len(items), label_map=label_map)


def _schema_sample(stream: StreamFactory) -> Iterator[dict[str, object]]:
    count = 0
    for item in stream:
        if isinstance(item, RawRecord) and isinstance(item.value, dict):
            yield item.value
            count += 1
            if count >= _SCHEMA_SAMPLE_ROWS:
                return


def _check_label(item: Item) -> Item:
    if isinstance(item, RawRecord) and item.label is None:
        return Reject(item.source, RejectReason.BAD_LABEL, "file is not inside a class folder (RAW/<class>/<file>)")
    return item


def primary_image(record: RawRecord) -> str | None:
    """Path of the record's image file (the first image field in sorted order), if any."""
    fields = sorted(f for f in record.files if f in IMAGE_EXTENSIONS)
    return record.files[fields[0]] if fields else None


def mark_duplicates(items: list[Item]) -> list[Item]:
    """Replace every record whose image bytes equal an earlier record's by a DUPLICATE reject."""
    paths: dict[int, str] = {}
    by_size: dict[int, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        path = primary_image(item) if isinstance(item, RawRecord) else None
        if path is None:
            continue
        try:
            size = os.stat(path).st_size
        except OSError:
            continue  # cleaning reports it as unreadable
        if size > 0:
            paths[i] = path
            by_size[size].append(i)
    out = list(items)
    for group in by_size.values():
        if len(group) > 1:
            for first, dup in _equal_content(paths, group):
                out[dup] = Reject(items[dup].source, RejectReason.DUPLICATE, f"same bytes as {items[first].source}")
    return out


def _equal_content(paths: dict[int, str], group: list[int]) -> Iterator[tuple[int, int]]:
    """(first, duplicate) index pairs among files of equal size, compared head first."""
    heads: dict[bytes, list[int]] = defaultdict(list)
    for i in group:
        if (head := _digest(paths[i], _HEAD_BYTES)) is not None:
            heads[head].append(i)
    for candidates in heads.values():
        if len(candidates) < 2:
            continue
        firsts: dict[bytes, int] = {}
        for i in candidates:
            digest = _digest(paths[i], None)
            if digest is None:
                continue
            if digest in firsts:
                yield firsts[digest], i
            else:
                firsts[digest] = i


def _digest(path: str, limit: int | None) -> bytes | None:
    """blake2b of a file's first ``limit`` bytes (all of it when None); None if unreadable."""
    hasher = hashlib.blake2b(digest_size=20)
    try:
        with open(path, "rb") as f:
            if limit is not None:
                hasher.update(f.read(limit))
            else:
                while chunk := f.read(1 << 20):
                    hasher.update(chunk)
    except OSError:
        return None
    return hasher.digest()
