"""Output plumbing shared by the writers: the byte-counting ``Sink`` and the empty-directory check."""

from __future__ import annotations

from pathlib import Path

from dataprep.errors import UsageError


class Sink:
    """Writes files and counts their bytes."""

    def __init__(self) -> None:
        self.bytes_written = 0

    def write(self, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` (replacing it) and add its length to ``bytes_written``."""
        path.write_bytes(data)
        self.bytes_written += len(data)


def prepare_dir(root: Path) -> None:
    """Create ``root``; UsageError if it exists and is not an empty directory."""
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise UsageError(f"{root}: exists and is not an empty directory; remove it or choose another OUT")
    root.mkdir(parents=True, exist_ok=True)
