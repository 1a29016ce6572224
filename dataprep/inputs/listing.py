"""RAW's listing: every file's (path, size, mtime) in walk order, its digest, and what changed.

A run writes the listing of RAW next to its plan (``OUT/.dataprep/listing.bin``) and keeps
its sha256 in the plan; a resumed run lists RAW again and refuses to go on when the digest
differs, naming the first files added, removed or changed. The listing file holds one
entry per file, ``path NUL size SPACE mtime_ns NUL`` (path as the bytes of the file name
relative to RAW; size -1 for an entry that is not a readable regular file: a symlink
leaving RAW, a dangling link, a directory that cannot be listed).

Walk order (sorted names within a directory, depth first) is the order of the tuples of
path components, so two listings compare in one streaming merge: memory holds one entry
of each, never the listing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dataprep.inputs.records import Reject
from dataprep.inputs.sources import walk_files

LISTING_NAME = "listing.bin"
MAX_CHANGES_SHOWN = 5
_BUFFER_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Entry:
    """One file of RAW: path relative to RAW (bytes), size in bytes (-1: not a readable file), mtime in ns."""

    path: bytes
    size: int
    mtime_ns: int

    def encode(self) -> bytes:
        return self.path + b"\0" + b"%d %d" % (self.size, self.mtime_ns) + b"\0"


def excluded_by(raw: Path, out: Path | None, *, follow_symlinks: bool) -> Callable[[str], bool] | None:
    """Predicate on a walked file's path relative to RAW: True when it is really inside OUT.

    Only a walk that follows symlinks can reach OUT (OUT inside RAW is refused), through a
    link to OUT or to a folder holding it; dataprep's own output and state are never inputs.
    None when nothing needs excluding.
    """
    if out is None or not follow_symlinks or not raw.is_dir():
        return None
    out_real = os.path.realpath(out) + os.sep

    def is_inside_out(rel: str) -> bool:
        return (os.path.realpath(os.path.join(raw, rel)) + os.sep).startswith(out_real)

    return is_inside_out


def list_raw(raw: Path, *, follow_symlinks: bool, exclude: Path | None = None) -> Iterator[Entry]:
    """Entries of RAW (a directory, or a single file) in walk order; none inside ``exclude`` (OUT)."""
    if raw.is_file():
        st = raw.stat()
        yield Entry(os.fsencode(raw.name), st.st_size, st.st_mtime_ns)
        return
    skip = excluded_by(raw, exclude, follow_symlinks=follow_symlinks)
    for item in walk_files(raw, follow_symlinks=follow_symlinks):
        if skip is not None and skip(item.source if isinstance(item, Reject) else item.rel):
            continue
        if isinstance(item, Reject):
            yield Entry(os.fsencode(item.source), -1, 0)
        else:  # size and mtime from the walk's own stat of the file: one stat per file
            yield Entry(os.fsencode(item.rel), item.size, item.mtime_ns)


def write_listing(raw: Path, path: Path, *, follow_symlinks: bool, exclude: Path | None = None) -> str:
    """Write RAW's listing to ``path`` (fsync'd); returns its hex sha256."""
    digest = hashlib.sha256()
    with open(path, "wb", buffering=_BUFFER_BYTES) as f:
        for entry in list_raw(raw, follow_symlinks=follow_symlinks, exclude=exclude):
            data = entry.encode()
            digest.update(data)
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest()


def listing_digest(raw: Path, *, follow_symlinks: bool, exclude: Path | None = None) -> str:
    """Hex sha256 of RAW's listing as it is now (what ``write_listing`` would return)."""
    digest = hashlib.sha256()
    for entry in list_raw(raw, follow_symlinks=follow_symlinks, exclude=exclude):
        digest.update(entry.encode())
    return digest.hexdigest()


def read_listing(path: Path) -> Iterator[Entry]:
    """The entries of a listing file, in order."""
    with open(path, "rb", buffering=_BUFFER_BYTES) as f:
        tail, name = b"", None
        while chunk := f.read(_BUFFER_BYTES):
            tokens = (tail + chunk).split(b"\0")
            tail = tokens.pop()  # incomplete until the next NUL
            for token in tokens:
                if name is None:
                    name = token
                    continue
                size, mtime_ns = token.split(b" ")
                yield Entry(name, int(size), int(mtime_ns))
                name = None


def _order(entry: Entry) -> list[bytes]:
    return entry.path.split(b"/")


def changes(old: Iterator[Entry], new: Iterator[Entry], *, limit: int = MAX_CHANGES_SHOWN) -> list[str]:
    """Up to ``limit`` descriptions of how ``new`` differs from ``old`` ('added x', 'removed y', ...)."""
    found: list[str] = []
    a, b = next(old, None), next(new, None)
    while len(found) < limit:
        if a is not None and (b is None or _order(a) < _order(b)):
            found.append(f"removed {os.fsdecode(a.path)}")
            a = next(old, None)
        elif b is not None and (a is None or _order(b) < _order(a)):
            found.append(f"added {os.fsdecode(b.path)}")
            b = next(new, None)
        elif a is not None and b is not None:
            if a.size != b.size:
                found.append(f"changed {os.fsdecode(a.path)} (size {a.size} -> {b.size} bytes)")
            elif a.mtime_ns != b.mtime_ns:
                found.append(f"changed {os.fsdecode(a.path)} (modified since the plan was made)")
            a, b = next(old, None), next(new, None)
        else:
            break
    return found
