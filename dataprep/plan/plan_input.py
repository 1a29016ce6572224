"""What planning reads of RAW (``PlanInput``): its walk, which paths to leave out, file sizes and content digests.

``RawTree`` is RAW on this machine's disk. The protocol lets a benchmark or a test feed the
planner a generated listing of 10^8 entries without making a file (``tools/bench/plan_bench.py``):
the walk's items are all planning needs, and content is read only for media files of
equal size (``digest``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from dataprep.inputs.listing import excluded_by
from dataprep.inputs.raw_source import RawSource
from dataprep.inputs.records import Reject
from dataprep.inputs.walk import RawFile, walk_files

__all__ = ["PlanInput", "RawTree"]


class PlanInput(Protocol):
    """RAW as planning reads it. ``items`` may be called more than once and gives the same items each time."""

    @property
    def single_file(self) -> bool:
        """RAW is one file (a table or text layout reads it whatever its extension)."""
        ...

    def items(self) -> Iterator[RawFile | Reject]:
        """Every file of RAW in walk order (``dataprep.inputs.walk``), and a Reject for each entry not read."""
        ...

    def exclusion(self) -> Callable[[str], bool] | None:
        """Predicate on a path relative to RAW: True for what is never an input (OUT, reached by a link); or None."""
        ...

    def size(self, path: str) -> int:
        """Bytes of the file at ``path`` (an item's ``path``); -1 when it cannot be stat'ed."""
        ...

    def digest(self, path: str, limit: int | None) -> bytes | None:
        """blake2b (20 bytes) of the file's first ``limit`` bytes (all of it when None); None if unreadable."""
        ...


@dataclass(frozen=True)
class RawTree:
    """RAW on this machine's disk (a ``PlanInput``): a folder walked, or one file."""

    raw: RawSource

    @property
    def single_file(self) -> bool:
        return self.raw.root.is_file()

    def items(self) -> Iterator[RawFile | Reject]:
        root = self.raw.root
        if root.is_file():
            st = root.stat()
            yield RawFile(root.name, os.fspath(root), st.st_size, st.st_mtime_ns)
            return
        yield from walk_files(root, follow_symlinks=self.raw.follow_symlinks)

    def exclusion(self) -> Callable[[str], bool] | None:
        return excluded_by(self.raw.root, self.raw.exclude, follow_symlinks=self.raw.follow_symlinks)

    def size(self, path: str) -> int:
        try:
            return os.stat(path).st_size
        except OSError:
            return -1  # cleaning reports it as unreadable

    def digest(self, path: str, limit: int | None) -> bytes | None:
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
