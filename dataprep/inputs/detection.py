"""Layout detection: which layout a RAW holds, tolerating stray files and refusing to guess.

``choose_layout(raw, requested)`` returns a ``LayoutChoice``: the layout and one line a
user can read saying why (for the run summary and the manifest). Extensions compare
case-insensitively. Rules for a directory, from one walk:

- Images present:
  - more loose table or text files (not sharing a stem with an image) than images:
    ambiguous (a media layout, or ``table`` / ``text``);
  - images exactly one folder deep (``RAW/<class>/<file>``) and at other depths too:
    ambiguous (``image-folder`` or ``grouped``);
  - all images one folder deep: ``image-folder``, unless WebDataset names show a grouped
    dataset (``K.seg.png`` beside ``K.jpg``, or ``.cls`` files): then ambiguous;
  - else ``grouped``.
- No images: table and text files both (README, LICENSE and the like not counted):
  ambiguous; else ``table`` or ``text``; nothing of either: refused.

Stray files (a README or LICENSE at the root, ``.DS_Store`` in a class folder) never
change the layout: they become ``unsupported`` rejects of the layout chosen. An ambiguous
RAW is refused with a ``UsageError`` naming the ``--layout`` values that would settle it.

A RAW that is one file: a table extension is ``table``, a text extension ``text``;
anything else is refused (an image, a ``.log``: pass ``--layout text`` to read it as text).

Tables and text may be compressed: ``part-0.jsonl.gz`` counts as a ``.jsonl`` table, ``a.txt.zst`` as
text (``names.data_extension``; codecs in ``names.COMPRESSION_EXTENSIONS``). A ``.json`` file is a table
(JSON lines) where no image is; beside images it is a sample's metadata, never loose data.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from dataprep.errors import UsageError
from dataprep.inputs.records import Reject
from dataprep.inputs.names import (COMPRESSION_EXTENSIONS, DOC_STEMS, IMAGE_EXTENSIONS, TABLE_EXTENSIONS,
                                   TEXT_EXTENSIONS, codec_of, data_extension, extension, field_problem, first_dot_stem,
                                   is_hidden, last_dot_stem, printable)
from dataprep.inputs.walk import FileGroup, group_files, walk_files


_SHOWN = 3  # stray file names quoted in a reason


class Layout(enum.StrEnum):
    IMAGE_FOLDER = "image-folder"
    GROUPED = "grouped"
    TABLE = "table"
    TEXT = "text"

    @property
    def is_media(self) -> bool:
        """Image files (one input per unit of the plan), as opposed to tables and text (files of rows or lines)."""
        return self in (Layout.IMAGE_FOLDER, Layout.GROUPED)


@dataclass(frozen=True)
class LayoutChoice:
    """The layout of a run and why, in one line a user can read.

    reason: e.g. "image-folder: 3 class folders with 120 images; 1 stray file (README.md)
    will be rejected".
    """

    layout: Layout
    reason: str


def sample_stem(name: str, layout: Layout) -> str:
    """The stem under which a file joins a sample: last dot for image-folder, first dot for grouped.

    A hidden file stands alone (its whole name): it joins no sample.
    """
    if is_hidden(name):
        return name
    return first_dot_stem(name) if layout is Layout.GROUPED else last_dot_stem(name)


def choose_layout(raw: Path, requested: Layout | None, *, follow_symlinks: bool = False) -> LayoutChoice:
    """The layout of RAW: ``requested`` when given (checked against RAW), else detected (module doc).

    Raises UsageError when RAW does not exist, holds no file, cannot be read as the layout
    requested (one file for a media layout, one .log as a table), or is ambiguous; the
    message names the ``--layout`` values to pass. A requested layout of which RAW holds
    no input is the user's call: the reason says that every file will be rejected.
    """
    if requested is not None:
        try:
            requested = Layout(requested)  # a plain string from a caller other than the CLI
        except ValueError as err:
            raise UsageError(f"--layout {requested!r}: expected one of {', '.join(map(str, Layout))}") from err
    if raw.is_file():
        return _choose_for_file(raw, requested)
    if not raw.is_dir():
        raise UsageError(f"{raw}: no such file or directory (RAW must be a directory, or one table or text file)")
    census = _Census.of(raw, follow_symlinks=follow_symlinks)
    if census.files == 0:
        unread = (f"; {census.walk_rejects} entries could not be read (links leaving RAW?)"
                  if census.walk_rejects else "")
        raise UsageError(f"{raw}: no files found{unread} (is this the right RAW directory?)")
    if requested is None:
        return census.detect(raw)
    return census.check(requested)


def _choose_for_file(raw: Path, requested: Layout | None) -> LayoutChoice:
    ext, data_ext = extension(raw.name), data_extension(raw.name)
    kind = ("table" if data_ext in TABLE_EXTENSIONS else "text" if data_ext in TEXT_EXTENSIONS
            else "image" if ext in IMAGE_EXTENSIONS else None)
    shown = f"'.{_kind_name(raw.name)}'" if ext else "extension-less"
    if requested is not None and requested.is_media:
        raise UsageError(f"{raw}: --layout {requested} needs a directory of images, not one file")
    if kind == "image":
        raise UsageError(f"{raw}: RAW is a single image; dataprep shards a directory of them "
                         "(RAW/<class>/<file> for image-folder, or any tree for grouped): pass its folder")
    if requested is Layout.TABLE and kind != "table":
        raise UsageError(f"{raw}: --layout table reads {_listed(TABLE_EXTENSIONS)} files, not a {shown} file")
    if requested is Layout.TEXT or (requested is None and kind == "text"):
        how = "as requested (--layout text)" if requested else f"RAW is one {shown} file"
        return LayoutChoice(Layout.TEXT, f"text: {how}")
    if kind == "table":
        how = "as requested (--layout table)" if requested else f"RAW is one {shown} file"
        return LayoutChoice(Layout.TABLE, f"table: {how}")
    raise UsageError(f"{raw}: a {shown} file is neither a table ({_listed(TABLE_EXTENSIONS)}) nor text "
                     f"({_listed(TEXT_EXTENSIONS)}; {_COMPRESSED}); pass --layout text to read it as text")


def _listed(extensions: frozenset[str]) -> str:
    return ", ".join(f".{e}" for e in sorted(extensions))


def _kind_name(name: str) -> str:
    """What a census counts a file as: its data extension, with its codec's when compressed ('jsonl.gz')."""
    data_ext = data_extension(name)
    return f"{data_ext}.{extension(name)}" if codec_of(name) is not None and data_ext else extension(name)


_COMPRESSED = f"each also compressed: {', '.join(f'.{e}' for e in COMPRESSION_EXTENSIONS)}"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


@dataclass
class _Names:
    """A count of files and the first few of their paths."""

    count: int = 0
    shown: list[str] = field(default_factory=list)

    def add(self, rel: str) -> None:
        self.count += 1
        if len(self.shown) < _SHOWN:
            self.shown.append(printable(rel))

    def merged(self, other: _Names) -> _Names:
        return _Names(self.count + other.count, (self.shown + other.shown)[:_SHOWN])

    def text(self) -> str:
        more = ", ..." if self.count > len(self.shown) else ""
        return ", ".join(self.shown) + more


@dataclass
class _Census:
    """What one walk of RAW found, by kind of file (extensions compared case-insensitively).

    images: by depth (0 = RAW/<file>, 1 = RAW/<class>/<file>, 2 = deeper). texts counts
    text files other than docs (README.md), doc_texts those. Strays are the files a layout
    rejects as ``unsupported``: ``strays`` for image-folder (not an image, no image of its
    stem beside it, or no valid field name), ``grouped_strays`` likewise by first-dot
    stem, and the files of another extension for table and text. loose_data: the strays
    that are tables or text (not docs). wds_names: K.x.ext names beside a K.ext.
    """

    files: int = 0
    walk_rejects: int = 0
    images: dict[int, _Names] = field(default_factory=lambda: {0: _Names(), 1: _Names(), 2: _Names()})
    classes: set[str] = field(default_factory=set)
    tables: Counter[str] = field(default_factory=Counter)
    texts: Counter[str] = field(default_factory=Counter)
    doc_texts: int = 0
    strays: _Names = field(default_factory=_Names)
    grouped_strays: _Names = field(default_factory=_Names)
    table_strays: _Names = field(default_factory=_Names)
    text_strays: _Names = field(default_factory=_Names)
    loose_data: int = 0
    wds_names: _Names = field(default_factory=_Names)
    cls_files: _Names = field(default_factory=_Names)

    @classmethod
    def of(cls, raw: Path, *, follow_symlinks: bool) -> _Census:
        census = cls()
        for item in group_files(walk_files(raw, follow_symlinks=follow_symlinks), _first_dot_group):
            if isinstance(item, Reject):
                census.walk_rejects += 1
            else:
                census.add(item)
        return census

    @property
    def image_count(self) -> int:
        return sum(n.count for n in self.images.values())

    def add(self, group: FileGroup) -> None:
        """Count the files of one first-dot group (a WebDataset sample's worth of files)."""
        depth = min(group.directory.count("/") + 1 if group.directory else 0, 2)
        names = {f.rel: f.rel.rpartition("/")[2] for f in group.files}
        visible = [rel for rel, name in names.items() if not is_hidden(name)]
        image_stems = {last_dot_stem(names[rel]) for rel in visible if extension(names[rel]) in IMAGE_EXTENSIONS}
        has_plain = any(names[rel].count(".") == 1 for rel in visible)
        for rel, name in names.items():
            self.files += 1
            ext = extension(name)
            self._count_kind(rel, name, ext, depth)
            if is_hidden(name):
                self.strays.add(rel)
                self.grouped_strays.add(rel)
                continue
            if name.count(".") >= 2 and has_plain and image_stems:
                self.wds_names.add(rel)
            if ext in IMAGE_EXTENSIONS:
                continue
            if not image_stems or field_problem(name.partition(".")[2].lower()) is not None:
                self.grouped_strays.add(rel)
            if depth == 0 or last_dot_stem(name) not in image_stems or field_problem(ext) is not None:
                self.strays.add(rel)
                self.loose_data += _is_loose_data(name)

    def _count_kind(self, rel: str, name: str, ext: str, depth: int) -> None:
        hidden, data_ext = is_hidden(name), data_extension(name)
        if data_ext in TABLE_EXTENSIONS and not hidden:
            self.tables[_kind_name(name)] += 1
        else:
            self.table_strays.add(rel)
        if data_ext in TEXT_EXTENSIONS and not hidden:
            if _is_doc(name):
                self.doc_texts += 1
            else:
                self.texts[_kind_name(name)] += 1
        else:
            self.text_strays.add(rel)
        if hidden:
            return
        if ext == "cls":
            self.cls_files.add(rel)
        if ext in IMAGE_EXTENSIONS:
            self.images[depth].add(rel)
            if depth == 1:
                self.classes.add(rel.partition("/")[0])

    # ------------------------------------------------------------------ decisions

    def detect(self, raw: Path) -> LayoutChoice:
        if self.image_count:
            return self._detect_media(raw)
        tables, texts = sum(self.tables.values()), sum(self.texts.values())
        if tables and texts:
            raise UsageError(
                f"{raw}: holds {_plural(tables, 'table file')} ({_exts(self.tables)}) and "
                f"{_plural(texts, 'text file')} "
                f"({_exts(self.texts)}); pass --layout table (the text files are then rejected) "
                "or --layout text (the tables are then rejected)"
            )
        if tables:
            return LayoutChoice(Layout.TABLE, self._describe(Layout.TABLE))
        if texts or self.doc_texts:
            return LayoutChoice(Layout.TEXT, self._describe(Layout.TEXT))
        raise UsageError(
            f"{raw}: no images, tables or text among its {_plural(self.files, 'file')} (e.g. {self.strays.text()}); "
            f"dataprep reads images ({_listed(IMAGE_EXTENSIONS)}), tables ({_listed(TABLE_EXTENSIONS)}) "
            f"and text ({_listed(TEXT_EXTENSIONS)}); tables and text {_COMPRESSED}"
        )

    def _detect_media(self, raw: Path) -> LayoutChoice:
        images = self.image_count
        if self.loose_data > images:
            kind = "table" if sum(self.tables.values()) >= sum(self.texts.values()) else "text"
            raise UsageError(
                f"{raw}: holds {_plural(images, 'image')} and {_plural(self.loose_data, 'table or text file')} "
                "that belong "
                f"to no image; pass --layout {kind} (the images are then rejected), or --layout image-folder "
                "or --layout grouped (the other files are then rejected)"
            )
        one_deep, elsewhere = self.images[1], self.images[0].merged(self.images[2])
        if one_deep.count and elsewhere.count:
            raise UsageError(
                f"{raw}: {_plural(one_deep.count, 'image')} one folder deep (e.g. {one_deep.shown[0]}) and "
                f"{elsewhere.count:,} at other depths (e.g. {elsewhere.text()}); pass --layout image-folder "
                "(labels are the top folders; images at the root are rejected as bad_label) or --layout grouped "
                "(no labels; the files sharing a name up to its first dot form one sample)"
            )
        if one_deep.count and (self.wds_names.count or self.cls_files.count):
            signs = self.wds_names.merged(self.cls_files)
            raise UsageError(
                f"{raw}: images are one folder deep (RAW/<class>/<file>), but names such as {signs.text()} follow "
                "WebDataset's convention (a sample is the files sharing a name up to its first dot); pass "
                "--layout grouped (those files join one sample; no labels from folders) or --layout image-folder "
                "(labels are the folders; every image is its own sample)"
            )
        if one_deep.count:
            return LayoutChoice(Layout.IMAGE_FOLDER, self._describe(Layout.IMAGE_FOLDER))
        why = "grouped: images not one folder deep (RAW/<class>/<file>), so no class folders;"
        return LayoutChoice(Layout.GROUPED, self._describe(Layout.GROUPED).replace("grouped:", why, 1))

    def check(self, requested: Layout) -> LayoutChoice:
        """The choice for ``--layout requested``; the reason warns when RAW holds no input of that layout."""
        images = f"images ({_listed(IMAGE_EXTENSIONS)})"
        wanted = {
            Layout.IMAGE_FOLDER: (self.image_count, images),
            Layout.GROUPED: (self.image_count, images),
            Layout.TABLE: (sum(self.tables.values()), f"table files ({_listed(TABLE_EXTENSIONS)})"),
            Layout.TEXT: (sum(self.texts.values()) + self.doc_texts, f"text files ({_listed(TEXT_EXTENSIONS)})"),
        }
        count, what = wanted[requested]
        if count == 0:  # the user's call: every file becomes a reject (the run then fails unless told otherwise)
            reason = (f"{requested} (as requested with --layout): no {what} among {_plural(self.files, 'file')}; "
                      "all will be rejected")
            return LayoutChoice(requested, reason)
        return LayoutChoice(requested, self._describe(requested).replace(":", " (as requested with --layout):", 1))

    def _describe(self, layout: Layout) -> str:
        if layout is Layout.IMAGE_FOLDER:
            head = (f"image-folder: {_plural(len(self.classes), 'class folder')} with "
                    f"{_plural(self.images[1].count, 'image')}")
            misplaced = self.images[0].count + self.images[2].count
            if misplaced:
                head += f"; {_plural(misplaced, 'image')} at other depths (those at the root are rejected as bad_label)"
            return head + _rejected(self.strays)
        if layout is Layout.GROUPED:
            head = (f"grouped: {_plural(self.image_count, 'image')}; the files sharing a name up to its first dot "
                    "form one sample")
            return head + _rejected(self.grouped_strays)
        if layout is Layout.TABLE:
            tables = _plural(sum(self.tables.values()), "table file")
            return f"table: {tables} ({_exts(self.tables)})" + _rejected(self.table_strays)
        count = sum(self.texts.values()) + self.doc_texts
        kinds = _exts(self.texts) or "docs"
        return f"text: {_plural(count, 'text file')} ({kinds})" + _rejected(self.text_strays)


def _first_dot_group(name: str) -> str:
    return sample_stem(name, Layout.GROUPED)


def _is_doc(name: str) -> bool:
    return first_dot_stem(name).lower() in DOC_STEMS


def _is_loose_data(name: str) -> bool:
    """A table or text file (compressed too) that is no doc; a plain ``.json`` is metadata beside images."""
    data_ext = data_extension(name)
    is_data = data_ext in TABLE_EXTENSIONS or data_ext in TEXT_EXTENSIONS
    return is_data and extension(name) != "json" and not _is_doc(name)


def _exts(counts: Counter[str]) -> str:
    return ", ".join(f".{e}" if not e.startswith("(") else e for e in sorted(counts))


def _rejected(strays: _Names) -> str:
    if not strays.count:
        return ""
    return f"; {_plural(strays.count, 'stray file')} ({strays.text()}) will be rejected"
