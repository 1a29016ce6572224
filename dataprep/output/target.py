"""``OutTarget``: OUT as a run writes it, a folder of this machine, and the store URL it stands for."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class OutTarget:
    """OUT of a run: ``folder`` on this machine (for a store URL, its staging folder).

    url: OUT's store URL (None: OUT is the folder); timeout_s: a store request without
    progress this long, retries included, fails the run naming the URL.
    """

    folder: Path
    url: str | None = None
    timeout_s: float = 60.0

    @property
    def name(self) -> str:
        """OUT as the user named it: its URL, or its path."""
        return self.url or os.fspath(self.folder)

    @property
    def is_remote(self) -> bool:
        return self.url is not None
