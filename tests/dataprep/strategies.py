"""Hypothesis strategies for dataprep tests: small raw trees with awkward file names."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import strategies as st

DIRECTORIES = (b"", b"cat", b"dog", b"cat/sub", b"a.b")
STEMS = (b"a", b"A", b"a.b", b"a b", b"_x", b"b\xff", b"zz", b".h", b"a.seg", b"README")
SUFFIXES = (b"", b".", b".jpg", b".JPG", b".Jpg", b".png", b".webp", b".txt", b".TXT", b".json", b"._meta",
            b".\xff", b".seg.png", b".cls", b".md")

raw_trees = st.lists(
    st.tuples(st.sampled_from(DIRECTORIES), st.sampled_from(STEMS), st.sampled_from(SUFFIXES)),
    min_size=1,
    max_size=14,
)


def make_tree(root: Path, entries: list[tuple[bytes, bytes, bytes]]) -> list[bytes]:
    """Create the files of ``entries`` (directory, stem, suffix) under ``root``; returns their relative paths.

    A file whose path is also a directory of the tree is left out.
    """
    directories = {d for d, _, _ in entries if d} | {b"cat"}
    made: list[bytes] = []
    for directory, stem, suffix in entries:
        rel = (directory + b"/" if directory else b"") + stem + suffix
        if rel in made or rel in directories or any(d.startswith(rel + b"/") for d in directories):
            continue
        path = os.fsencode(root) + b"/" + rel
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(rel)
        made.append(rel)
    return made
