"""Walk RAW: every entry under it once, in a deterministic order, with the symlink policy.

Order: depth first, the entries of each directory sorted by their names' bytes; that is
the order of the tuples of path components (``dataprep.inputs.listing`` merges two listings on
it). File names that are not valid UTF-8 are kept with ``surrogateescape``.

Every entry that is not a plain directory ends as exactly one item: a ``RawFile``, or a
``Reject`` saying why it is not read:

- a symlink whose target leaves RAW: ``symlink_outside`` (unless ``follow_symlinks``);
- a dangling symlink, a file that cannot be stat'ed, a directory that cannot be listed:
  ``unreadable``;
- a FIFO, socket or device: ``unsupported`` (reading a FIFO would block);
- a symlink to a directory inside RAW: ``duplicate``. The real directory is walked, never
  the link, so a link cannot rename or hide a class folder whatever the names' order
  (``a_link -> zebra`` leaves the class ``zebra``);
- with ``follow_symlinks``, a second path to a directory outside RAW already walked
  (or a cycle): ``duplicate``.

- a symlink to a file inside RAW: ``duplicate``, for the same reason: the target is
  read at its own path, so a link ``cat/alias.jpg -> ../dog/000.jpg`` cannot win the
  duplicate check by sorting first and relabel the dog as a cat.

``group_files`` turns the walk into groups of files of one directory that share a stem
(what a sample is made of), streaming: a directory's files arrive in sorted order but
interleaved with its subdirectories' files, and a group is handed on as soon as no later
name can join it, so memory holds a few groups, never a directory's listing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dataprep.inputs.records import Reject, RejectReason

__all__ = ["FileGroup", "RawFile", "group_files", "walk_files"]


@dataclass(frozen=True, slots=True)
class RawFile:
    """A regular file found under RAW: its path relative to RAW, absolute path, size in bytes and
    modification time in ns (from the walk's one stat of it)."""

    rel: str
    path: str
    size: int
    mtime_ns: int = 0


def walk_files(raw: Path, *, follow_symlinks: bool = False) -> Iterator[RawFile | Reject]:
    """Every regular file under ``raw`` in walk order, and a ``Reject`` for every entry not read (module doc)."""
    root = os.path.realpath(raw)
    walked = {root: "."}  # real path of a walked directory -> its path relative to RAW
    yield from _walk(str(raw), "", _Policy(root, follow_symlinks, walked))


@dataclass(frozen=True, slots=True)
class _Policy:
    root: str
    follow_symlinks: bool
    walked: dict[str, str]

    def is_inside(self, real: str) -> bool:
        return real == self.root or real.startswith(self.root + os.sep)

    def rel_of(self, real: str) -> str:
        return "." if real == self.root else os.path.relpath(real, self.root)


def _walk(directory: str, rel_dir: str, policy: _Policy) -> Iterator[RawFile | Reject]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: os.fsencode(e.name))
    except OSError as err:
        yield Reject(rel_dir or ".", RejectReason.UNREADABLE, f"cannot list directory: {err.strerror or err}")
        return
    for entry in entries:
        rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
        if entry.is_symlink():
            verdict = _symlink_verdict(entry, rel, policy)
            if verdict is not None:
                yield verdict
                continue
        if entry.is_dir():
            real = os.path.realpath(entry.path)
            if real in policy.walked:  # a cycle, or a second link to a directory outside RAW
                yield Reject(rel, RejectReason.DUPLICATE,
                             f"directory {policy.walked[real]} is already walked; not read again through {rel}")
                continue
            policy.walked[real] = rel
            yield from _walk(entry.path, rel, policy)
        else:
            yield _file_item(entry, rel)


def _symlink_verdict(entry: os.DirEntry[str], rel: str, policy: _Policy) -> Reject | None:
    """A Reject for a symlink that is not to be followed, else None (walk or read it)."""
    target = os.path.realpath(entry.path)
    inside = policy.is_inside(target)
    if not (inside or policy.follow_symlinks):
        return Reject(rel, RejectReason.SYMLINK_OUTSIDE, f"symlink to {target} leaves RAW (use --follow-symlinks)")
    if not os.path.exists(entry.path):
        return Reject(rel, RejectReason.UNREADABLE, f"dangling symlink to {target}")
    # Everything inside RAW is walked at its own path: read through a link too, the link
    # could sort first, win the duplicate check and relabel the real file (another class).
    if inside and os.path.isdir(entry.path):
        return Reject(rel, RejectReason.DUPLICATE,
                      f"symlink to directory {policy.rel_of(target)} inside RAW; its files are read there, "
                      "not through the link")
    if inside:
        return Reject(rel, RejectReason.DUPLICATE,
                      f"symlink to file {policy.rel_of(target)} inside RAW; it is read there, not through the link")
    return None


def _file_item(entry: os.DirEntry[str], rel: str) -> RawFile | Reject:
    try:
        st = entry.stat()
    except OSError as err:
        return Reject(rel, RejectReason.UNREADABLE, f"cannot stat: {err.strerror or err}")
    if not stat.S_ISREG(st.st_mode):
        kind = ("FIFO" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode)
                else "device or special file")
        return Reject(rel, RejectReason.UNSUPPORTED, f"not a regular file (a {kind})")
    return RawFile(rel, entry.path, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True, slots=True)
class FileGroup:
    """Files of one directory whose names share a stem, in sorted name order.

    directory: path of the directory relative to RAW ('' for RAW itself); stem: the
    shared stem of the names (no '/'); files: at least one.
    """

    directory: str
    stem: str
    files: tuple[RawFile, ...]

    @property
    def rel_stem(self) -> str:
        """The stem as a path relative to RAW: 'cat/1' for cat/1.jpg."""
        return f"{self.directory}/{self.stem}" if self.directory else self.stem


def group_files(items: Iterable[RawFile | Reject], stem_of: Callable[[str], str]) -> Iterator[FileGroup | Reject]:
    """Group walked files by (directory, ``stem_of(name)``); Rejects pass through at once.

    ``stem_of`` must return a prefix of the name (the name up to its first or last dot),
    which is what makes a group complete once a name in its directory no longer starts
    with its stem (names arrive sorted by their bytes). Groups of a directory come in
    sorted stem order among those completed together; every file is in exactly one group.
    """
    stack: list[_OpenDirectory] = []
    for item in items:
        if isinstance(item, Reject):
            yield item
            continue
        directory, _, name = item.rel.rpartition("/")
        while stack and not _holds(stack[-1].directory, directory):
            yield from stack.pop().close(None)
        if not stack or stack[-1].directory != directory:
            if stack:  # the walk entered a subdirectory of the top one: groups before it are complete
                child = directory[len(stack[-1].directory):].lstrip("/").partition("/")[0]
                yield from stack[-1].close(child)
            stack.append(_OpenDirectory(directory, {}))
        top = stack[-1]
        yield from top.close(name)
        top.groups.setdefault(stem_of(name), []).append(item)
    while stack:
        yield from stack.pop().close(None)


def _holds(ancestor: str, directory: str) -> bool:
    """Whether ``directory`` is ``ancestor`` or below it (paths relative to RAW, '' is RAW)."""
    return directory == ancestor or ancestor == "" or directory.startswith(ancestor + "/")


@dataclass(slots=True)
class _OpenDirectory:
    directory: str
    groups: dict[str, list[RawFile]]

    def close(self, next_name: str | None) -> Iterator[FileGroup]:
        """Hand on the groups no name from ``next_name`` on can join (all when None)."""
        done = [s for s in self.groups if next_name is None or not next_name.startswith(s)]
        for stem in sorted(done, key=os.fsencode):
            yield FileGroup(self.directory, stem, tuple(self.groups.pop(stem)))
