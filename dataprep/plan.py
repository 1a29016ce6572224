"""Pass 1: the deterministic input order of a run, before any decoding.

Media (image-folder, grouped): every raw record is listed in sorted key order, exact
duplicates are found (first by sorted key wins), records without a usable label are
rejected, and the list is permuted by ``seed`` so that classes mix inside every shard.
Duplicate search is cheap: only files of equal size are read, and only the first
64 KiB of them unless those collide too.

The planned media inputs are spilled to ``OUT/.dataprep/plan.bin`` (one pickled item
each) and addressed through numpy arrays, so the main process holds about 70 bytes per
input (offset, size, order, and the key set that keeps keys unique) instead of ~525
bytes of Python objects (tracemalloc; tests/dataprep/test_pipeline.py).

Tables and text stream in file order (bounded memory); their duplicates are found
while writing, in that order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
from array import array
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

    items: ``PlannedItems`` (media) or a re-iterable ``StreamFactory`` (tables, text).
    total: number of inputs when known up front, else None.
    label_map: class name -> index for the image-folder layout, else None.
    table_schema: column -> type name for tables, else None.
    """

    layout: Layout
    items: PlannedItems | StreamFactory
    total: int | None
    label_map: dict[str, int] | None = None
    table_schema: dict[str, str] | None = None


class PlannedItems:
    """Media inputs spilled to a file, read back in plan order.

    offsets: int64 [N + 1] byte ranges of the pickled items in sorted key order;
    order: int64 [N] the permutation to write them in; replaced: index -> Reject for
    duplicates found after spilling (few).
    """

    def __init__(self, path: Path, offsets: np.ndarray, order: np.ndarray, replaced: dict[int, Reject]) -> None:
        self.path, self.offsets, self.order, self.replaced = path, offsets, order, replaced

    def __len__(self) -> int:
        return int(self.order.shape[0])

    def load(self, i: int, fd: int) -> Item:
        """The item with sorted index ``i``."""
        if i in self.replaced:
            return self.replaced[i]
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        item: Item = pickle.loads(os.pread(fd, end - start, start))
        return item

    def at(self, position: int) -> Item:
        """The item at ``position`` in plan order."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return self.load(int(self.order[position]), fd)
        finally:
            os.close(fd)

    def iter_from(self, position: int) -> Iterator[Item]:
        """Items in plan order, skipping the first ``position``."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            for i in self.order[position:].tolist():
                yield self.load(i, fd)
        finally:
            os.close(fd)


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


def make_plan(config: ShardConfig, layout: Layout, spill_dir: Path) -> Plan:
    if layout in (Layout.TABLE, Layout.TEXT):
        stream = StreamFactory(config, layout)
        schema = None
        if layout is Layout.TABLE:
            schema = config.table.schema or infer_schema(_schema_sample(stream))
        return Plan(layout, stream, None, table_schema=schema)
    path = spill_dir / "plan.bin"
    offsets, sizes, labels = _spill(media_records(Path(config.raw), layout, follow_symlinks=config.follow_symlinks),
                                    path, check_label=layout is Layout.IMAGE_FOLDER)
    label_map = {name: i for i, name in enumerate(sorted(labels))} if layout is Layout.IMAGE_FOLDER else None
    items = PlannedItems(path, offsets, np.arange(len(sizes), dtype=np.int64), {})
    items.replaced.update(find_duplicates(items, sizes))
    if config.shuffle:
        items.order = np.random.default_rng(config.seed).permutation(len(sizes)).astype(np.int64)
    return Plan(layout, items, len(items), label_map=label_map)


def _spill(records: Iterable[Item], path: Path, *, check_label: bool) -> tuple[np.ndarray, np.ndarray, set[str]]:
    """Pickle items to ``path``; returns offsets int64 [N+1], image sizes int64 [N] (-1: none), labels."""
    offsets, sizes = array("q", [0]), array("q")
    labels: set[str] = set()
    with open(path, "wb") as f:
        for item in records:
            if check_label and isinstance(item, RawRecord):
                if item.label is None:
                    item = Reject(item.source, RejectReason.BAD_LABEL, "file is not inside a class folder (RAW/<class>/<file>)")
                else:
                    labels.add(item.label)
            sizes.append(_image_size(item))
            f.write(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
            offsets.append(f.tell())
    return np.frombuffer(offsets, dtype=np.int64), np.frombuffer(sizes, dtype=np.int64), labels


def _image_size(item: Item) -> int:
    path = primary_image(item) if isinstance(item, RawRecord) else None
    if path is None:
        return -1
    try:
        return os.stat(path).st_size
    except OSError:
        return -1  # cleaning reports it as unreadable


def _schema_sample(stream: StreamFactory) -> Iterator[dict[str, object]]:
    count = 0
    for item in stream:
        if isinstance(item, RawRecord) and isinstance(item.value, dict):
            yield item.value
            count += 1
            if count >= _SCHEMA_SAMPLE_ROWS:
                return


def primary_image(record: RawRecord) -> str | None:
    """Path of the record's image file (the first image field in sorted order), if any."""
    fields = sorted(f for f in record.files if f in IMAGE_EXTENSIONS)
    return record.files[fields[0]] if fields else None


def find_duplicates(items: PlannedItems, sizes: np.ndarray) -> dict[int, Reject]:
    """Sorted index -> DUPLICATE reject for every input whose image bytes equal an earlier one's.

    Only inputs of equal size are compared; records are loaded from the spill file one at
    a time, so memory holds a digest per candidate, never a group of records.
    """
    by_size = np.argsort(sizes, kind="stable")  # stable: sorted key order within a size
    ordered = sizes[by_size]
    starts = np.flatnonzero(np.diff(ordered, prepend=-2) != 0)
    bounds = np.append(starts, len(ordered))
    duplicates: dict[int, Reject] = {}
    fd = os.open(items.path, os.O_RDONLY)
    try:
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if hi - lo < 2 or ordered[lo] <= 0:
                continue
            for first, dup in _equal_content(items, fd, by_size[lo:hi].tolist()):
                duplicates[dup] = Reject(items.load(dup, fd).source, RejectReason.DUPLICATE,
                                         f"same bytes as {items.load(first, fd).source}")
    finally:
        os.close(fd)
    return duplicates


def _equal_content(items: PlannedItems, fd: int, group: list[int]) -> Iterator[tuple[int, int]]:
    """(first, duplicate) index pairs among files of equal size, compared head first."""
    heads: dict[bytes, list[int]] = defaultdict(list)
    for i in group:
        if (head := _digest(_image_path(items, fd, i), _HEAD_BYTES)) is not None:
            heads[head].append(i)
    for candidates in heads.values():
        if len(candidates) < 2:
            continue
        firsts: dict[bytes, int] = {}
        for i in candidates:
            digest = _digest(_image_path(items, fd, i), None)
            if digest is None:
                continue
            if digest in firsts:
                yield firsts[digest], i
            else:
                firsts[digest] = i


def _image_path(items: PlannedItems, fd: int, i: int) -> str | None:
    item = items.load(i, fd)
    return primary_image(item) if isinstance(item, RawRecord) else None


def _digest(path: str | None, limit: int | None) -> bytes | None:
    """blake2b of a file's first ``limit`` bytes (all of it when None); None if unreadable."""
    if path is None:
        return None
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
