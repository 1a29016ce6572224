"""Enumerate raw inputs: RAW directory -> layout -> RawRecords, every file accounted.

Layouts (``Layout``; chosen by ``choose_layout`` in ``dataprep.inputs.detection``, which says why):

- image-folder: ``RAW/<class>/<file>``; the label is the top folder. Every image file is
  a sample of its own (``photo.webp`` and ``photo.tiff`` are two); other files that share
  an image's stem up to the last dot (``cat/1.jpg`` + ``cat/1.txt``) join the sample of
  the first such image as sidecar fields.
- grouped: files sharing a key (path up to the first dot of the file name, the
  WebDataset convention) form one sample: ``a/0001.jpg``, ``a/0001.txt``, ``a/0001.json``.
- table: CSV, TSV, JSONL and Parquet files; one record per row.
- text: plain text files; one record per file or per line.

``media_records`` turns every file walked into exactly one ``RawRecord`` (as its image or a
sidecar) or one ``Reject``; nothing is silently dropped. Extensions compare
case-insensitively, yet ``a.JPG``, ``a.Jpg`` and ``a.jpg`` stay three inputs: in
image-folder three samples with distinct keys; in grouped the first gives the sample its
``jpg`` field and the others are rejected (``unsupported``, naming the file that already
gives it). Also ``unsupported``: hidden files (``.DS_Store``), files with no image of their
stem beside them (a README at the root, a LICENSE in a class folder), and sidecars whose
extension cannot name a field (none: ``cat/a``; ``cat/b._meta``; not valid UTF-8).

Traversal (``dataprep.inputs.walk``) is sorted by the file names' bytes, never follows a
symlink out of RAW unless asked, never lets a link rename a folder, and copes with any
file name: undecodable bytes are kept with ``surrogateescape`` and escaped out of keys.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

from dataprep.inputs.detection import Layout, LayoutChoice, choose_layout, sample_stem
from dataprep.inputs.names import (IMAGE_EXTENSIONS, TABLE_EXTENSIONS, TEXT_EXTENSIONS, extension, field_problem,
                                   is_hidden)
from dataprep.inputs.records import RawRecord, Reject, RejectReason
from dataprep.inputs.walk import FileGroup, RawFile, group_files, walk_files

__all__ = [
    "IMAGE_EXTENSIONS",
    "KeyAssigner",
    "KeySet",
    "Layout",
    "LayoutChoice",
    "MAX_KEY_BYTES",
    "RawFile",
    "TABLE_EXTENSIONS",
    "TEXT_EXTENSIONS",
    "choose_layout",
    "detect_layout",
    "extension",
    "group_records",
    "media_records",
    "safe_key",
    "walk_files",
]

MAX_KEY_BYTES = 96
_UNSAFE_KEY_CHARS = re.compile(r"[^\w\-]", re.UNICODE)


def detect_layout(raw: Path) -> Layout:
    """The layout of RAW as ``choose_layout(raw, None)`` detects it (UsageError when ambiguous)."""
    return choose_layout(raw, None).layout


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


class KeySet(Protocol):
    """The keys taken so far in a run: ``claim`` takes a key if it is free."""

    def claim(self, key: str) -> bool:
        """Take ``key`` and return True if no earlier claim took it, else return False (and take nothing)."""
        ...


class _KeysInMemory:
    """A ``KeySet`` in a Python set (~100 bytes per key); planning keeps one on disk (``plan.unique_keys``)."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def claim(self, key: str) -> bool:
        if key in self._used:
            return False
        self._used.add(key)
        return True


class KeyAssigner:
    """Makes keys unique within a run, deterministically (inputs arrive in a fixed order).

    A key already taken gets a hash of the stem; if even that is taken (the same stem
    assigned twice), a counter: two calls never return the same key. ``used``: where the
    keys taken are kept (a set in memory when None).
    """

    def __init__(self, used: KeySet | None = None) -> None:
        self._used = used if used is not None else _KeysInMemory()

    def assign(self, stem: str) -> str:
        key = safe_key(stem)
        if self._used.claim(key):
            return key
        base = f"{key}-{hashlib.sha1(os.fsencode(stem)).hexdigest()[:10]}"
        key, n = base, 1
        while not self._used.claim(key):
            n += 1
            key = f"{base}-{n}"
        return key


def media_records(raw: Path, layout: Layout, *, follow_symlinks: bool = False) -> Iterator[RawRecord | Reject]:
    """RawRecords of an image-folder or grouped tree, and a Reject for every file that is in none.

    Order: deterministic (the walk's, group by group; see ``dataprep.inputs.walk.group_files``).
    Every file walked is in exactly one record's ``files`` or is one Reject's ``source``.
    """
    return group_records(walk_files(raw, follow_symlinks=follow_symlinks), layout, KeyAssigner())


def group_records(items: Iterable[RawFile | Reject], layout: Layout, keys: KeyAssigner) -> Iterator[RawRecord | Reject]:
    """``media_records`` of walked ``items`` (``walk_files``' order), with keys from ``keys``."""
    grouped = layout is Layout.GROUPED
    for item in group_files(items, lambda name: sample_stem(name, layout)):
        if isinstance(item, Reject):
            yield item
        elif grouped:
            yield from _grouped_records(item, keys)
        else:
            yield from _image_folder_records(item, keys)


def _hidden(f: RawFile) -> Reject:
    return Reject(f.rel, RejectReason.UNSUPPORTED, "a hidden file (its name starts with '.'); not part of any sample")


def _image_folder_records(group: FileGroup, keys: KeyAssigner) -> Iterator[RawRecord | Reject]:
    """One sample per image of the group; the other files join the first image as sidecars, or are rejected."""
    images: list[tuple[str, RawFile]] = []
    others: list[tuple[str, RawFile]] = []
    for f in group.files:
        name = f.rel.rpartition("/")[2]
        if is_hidden(name):
            yield _hidden(f)
            continue
        field = extension(name)
        (images if field in IMAGE_EXTENSIONS else others).append((field, f))
    if not images:
        for _, f in others:
            yield Reject(f.rel, RejectReason.UNSUPPORTED,
                         f"not an image ({_ext_text(f)}), and no image named {group.stem}.<ext> beside it to join "
                         "as a sidecar")
        return
    images.sort(key=lambda item: (item[0], os.fsencode(item[1].rel)))
    sidecars: dict[str, RawFile] = {}
    for field, f in others:
        problem = field_problem(field)
        if problem is not None:
            yield Reject(f.rel, RejectReason.UNSUPPORTED, f"cannot be a sidecar of {images[0][1].rel}: {problem}")
        elif field in sidecars:
            yield Reject(f.rel, RejectReason.UNSUPPORTED,
                         f"a second {field!r} sidecar of {images[0][1].rel}: {sidecars[field].rel} already gives "
                         "that field "
                         "(extensions compare case-insensitively)")
        else:
            sidecars[field] = f
    label = group.directory.partition("/")[0] if group.directory else None
    for n, (field, f) in enumerate(images):
        # The first image keeps the plain stem as its key; the others add their extension as written.
        stem = group.rel_stem if n == 0 else f"{group.rel_stem}.{f.rel.rpartition('.')[2]}"
        files = {field: f.path}
        if n == 0:
            files.update({name: s.path for name, s in sidecars.items()})
        yield RawRecord(keys.assign(stem), f.rel, files, label)


def _grouped_records(group: FileGroup, keys: KeyAssigner) -> Iterator[RawRecord | Reject]:
    """One sample of the group's files, by field (the name after its first dot, lower case)."""
    files: dict[str, RawFile] = {}
    for f in group.files:
        name = f.rel.rpartition("/")[2]
        field = name.partition(".")[2].lower()
        problem = field_problem(field)
        if is_hidden(name):
            yield _hidden(f)
        elif problem is not None:
            yield Reject(f.rel, RejectReason.UNSUPPORTED, f"cannot be a field of sample {group.rel_stem}: {problem}")
        elif field in files:
            yield Reject(f.rel, RejectReason.UNSUPPORTED,
                         f"sample {group.rel_stem} already has a {field!r} field from {files[field].rel} "
                         "(field names compare case-insensitively)")
        else:
            files[field] = f
    if not files:
        return
    images = sorted(name for name in files if name in IMAGE_EXTENSIONS)
    source = files[images[0]].rel if images else files[min(files, key=os.fsencode)].rel
    yield RawRecord(keys.assign(group.rel_stem), source, {name: f.path for name, f in files.items()}, None)


def _ext_text(f: RawFile) -> str:
    ext = extension(f.rel)
    return f"'.{ext}'" if ext else "no extension"
