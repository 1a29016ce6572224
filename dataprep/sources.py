"""Enumerate raw inputs: RAW directory -> layout -> RawRecords in sorted key order.

Layouts (``Layout``), detected by ``detect_layout`` unless forced:

- image-folder: ``RAW/<class>/<file>``; the label is the top folder; sidecar files that
  share an image's stem (``cat/1.jpg`` + ``cat/1.txt``) join its sample.
- grouped: files sharing a key (path up to the first dot of the file name, the
  WebDataset convention) form one sample: ``a/0001.jpg``, ``a/0001.txt``, ``a/0001.json``.
- table: CSV, JSONL and Parquet files; one record per row.
- text: plain text files; one record per file or per line.

Traversal is sorted (by the file names' bytes), never follows a symlink out of RAW
unless asked, and copes with any file name: undecodable bytes are kept with
``surrogateescape`` and escaped out of sample keys.
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dataprep.errors import UsageError
from dataprep.records import RawRecord, Reject, RejectReason

IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "gif"})
TABLE_EXTENSIONS = frozenset({"csv", "jsonl", "ndjson", "parquet"})
TEXT_EXTENSIONS = frozenset({"txt", "text", "md"})
MAX_KEY_BYTES = 96
_UNSAFE_KEY_CHARS = re.compile(r"[^\w\-]", re.UNICODE)


class Layout(enum.StrEnum):
    IMAGE_FOLDER = "image-folder"
    GROUPED = "grouped"
    TABLE = "table"
    TEXT = "text"


@dataclass(frozen=True, slots=True)
class RawFile:
    """A regular file found under RAW: its path relative to RAW, absolute path and size in bytes."""

    rel: str
    path: str
    size: int


def walk_files(raw: Path, *, follow_symlinks: bool = False) -> Iterator[RawFile | Reject]:
    """Every regular file under ``raw`` in sorted order; symlinks leaving RAW become rejects.

    With ``follow_symlinks`` links are followed anywhere (directory cycles are cut).
    """
    root = os.path.realpath(raw)
    seen_dirs: set[str] = set()

    def walk(directory: str, rel_dir: str) -> Iterator[RawFile | Reject]:
        real = os.path.realpath(directory)
        if real in seen_dirs:
            return
        seen_dirs.add(real)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: os.fsencode(e.name))
        except OSError as err:
            yield Reject(rel_dir or ".", RejectReason.UNREADABLE, f"cannot list directory: {err.strerror}")
            return
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_symlink():
                target = os.path.realpath(entry.path)
                inside = target == root or target.startswith(root + os.sep)
                if not (inside or follow_symlinks):
                    yield Reject(rel, RejectReason.SYMLINK_OUTSIDE, f"symlink to {target} leaves RAW (use --follow-symlinks)")
                    continue
                if not os.path.exists(entry.path):
                    yield Reject(rel, RejectReason.UNREADABLE, f"dangling symlink to {target}")
                    continue
                if os.path.isdir(entry.path) and not follow_symlinks:
                    continue  # a link to a directory inside RAW: its files are reached directly
            if entry.is_dir():
                yield from walk(entry.path, rel)
            elif entry.is_file():
                try:
                    size = entry.stat().st_size
                except OSError as err:
                    yield Reject(rel, RejectReason.UNREADABLE, f"cannot stat: {err.strerror}")
                    continue
                yield RawFile(rel, entry.path, size)

    yield from walk(str(raw), "")


def extension(name: str) -> str:
    """Lower-case extension after the last dot of a file name ('' when none)."""
    base = name.rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[1].lower() if "." in base.lstrip(".") else ""


def detect_layout(raw: Path) -> Layout:
    """Guess the layout of RAW from the extensions and depth of its files."""
    if raw.is_file():
        ext = extension(raw.name)
        if ext in TABLE_EXTENSIONS:
            return Layout.TABLE
        return Layout.TEXT
    exts: set[str] = set()
    depths: set[int] = set()
    for item in walk_files(raw):
        if isinstance(item, RawFile):
            exts.add(extension(item.rel))
            depths.add(item.rel.count("/"))
    if not exts:
        raise UsageError(f"{raw}: no files found (is this the right RAW directory?)")
    if exts <= TABLE_EXTENSIONS:
        return Layout.TABLE
    if exts <= TEXT_EXTENSIONS:
        return Layout.TEXT
    if depths == {1} and exts & IMAGE_EXTENSIONS:
        return Layout.IMAGE_FOLDER
    return Layout.GROUPED


def safe_key(stem: str) -> str:
    """A WebDataset-safe key for a path stem: no '/', '..', leading dot or other dots.

    Characters other than letters, digits, '_' and '-' become '_' (path separators
    become '__'); keys longer than ``MAX_KEY_BYTES`` are cut and suffixed with a hash.
    """
    key = _UNSAFE_KEY_CHARS.sub("_", stem.replace("/", "__")) or "_"
    if len(key.encode("utf-8", "surrogateescape")) > MAX_KEY_BYTES:
        digest = hashlib.sha1(os.fsencode(stem)).hexdigest()[:12]
        key = key[: MAX_KEY_BYTES // 2] + "-" + digest
    return key


class KeyAssigner:
    """Makes keys unique within a run, deterministically (inputs arrive in sorted order)."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def assign(self, stem: str) -> str:
        key = safe_key(stem)
        if key in self._used:
            key = f"{key}-{hashlib.sha1(os.fsencode(stem)).hexdigest()[:10]}"
        self._used.add(key)
        return key


def _split_stem(rel: str, layout: Layout) -> tuple[str, str]:
    """(stem, field) of a file: last dot for image-folder, first dot for grouped (WebDataset)."""
    head, _, base = rel.rpartition("/")
    if layout is Layout.GROUPED:
        stem, dot, field = base.partition(".")
    else:
        stem, dot, field = base.rpartition(".") if "." in base.lstrip(".") else (base, "", "")
    field = field.lower() if dot else ""
    return (f"{head}/{stem}" if head else stem), field


def media_records(raw: Path, layout: Layout, *, follow_symlinks: bool = False) -> Iterator[RawRecord | Reject]:
    """RawRecords of an image-folder or grouped tree, in sorted key order.

    Files of one sample are adjacent in sorted order only within a directory, so groups
    are built per directory. A group with two images in image-folder layout splits into
    one sample per image (sidecars join the first).
    """
    keys = KeyAssigner()
    group_dir: str | None = None
    groups: dict[str, dict[str, RawFile]] = {}

    def flush() -> Iterator[RawRecord | Reject]:
        for stem in sorted(groups, key=os.fsencode):
            yield from _group_records(stem, groups[stem], layout, keys)
        groups.clear()

    for item in walk_files(raw, follow_symlinks=follow_symlinks):
        if isinstance(item, Reject):
            yield item
            continue
        directory = item.rel.rpartition("/")[0]
        if directory != group_dir:
            yield from flush()
            group_dir = directory
        stem, field = _split_stem(item.rel, layout)
        group = groups.setdefault(stem, {})
        if field in group:  # e.g. a.JPG and a.jpg: distinct files, same field
            groups.setdefault(f"{stem}.{len(group)}", {})[field] = item
        else:
            group[field] = item
    yield from flush()


def _group_records(stem: str, files: dict[str, RawFile], layout: Layout, keys: KeyAssigner) -> Iterator[RawRecord | Reject]:
    images = sorted(f for f in files if f in IMAGE_EXTENSIONS)
    sidecars = {f: files[f].path for f in files if f not in IMAGE_EXTENSIONS}
    label = stem.split("/", 1)[0] if layout is Layout.IMAGE_FOLDER and "/" in stem else None
    if not images:
        yield RawRecord(keys.assign(stem), _source(files), sidecars, label)
        return
    if layout is Layout.GROUPED:
        yield RawRecord(keys.assign(stem), files[images[0]].rel, {f: r.path for f, r in files.items()}, label)
        return
    for n, field in enumerate(images):
        extra = sidecars if n == 0 else {}
        yield RawRecord(keys.assign(stem if n == 0 else f"{stem}.{field}"), files[field].rel, {field: files[field].path, **extra}, label)


def _source(files: dict[str, RawFile]) -> str:
    return files[sorted(files)[0]].rel
