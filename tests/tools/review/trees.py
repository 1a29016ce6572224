"""The small checkouts the review's tests are built on: files written from dedented text, packages made whole."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write each ``files`` entry (path relative to ``root`` -> dedented text), then an empty ``__init__.py``
    in every folder of dataprep, loaders and tools that has none (tests stays a namespace). Returns ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for package in ("dataprep", "loaders", "tools"):
        for folder in [root / package, *(p for p in (root / package).rglob("*") if p.is_dir())]:
            if folder.is_dir():
                (folder / "__init__.py").touch()
    return root
