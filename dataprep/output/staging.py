"""The staging folder of a run with object storage: where OUT's files wait for upload and RAW is mirrored.

A run whose OUT or RAW is a store URL works on this machine's disk in one folder,
``STAGING/dataprep-staging-KEY`` (``--staging STAGING``, default the system's temporary
folder; KEY: 16 hex digits of the sha256 of OUT's URL or path, so a rerun of the same command
finds the same folder), holding ``out/`` (OUT as the run sees it, ``dataprep.commands.object_output``)
and ``raw/`` (RAW's mirror, ``dataprep.inputs.raw_source``). The run locks it, empties ``out/`` (the
store holds the truth; a killed run's leftovers are stale) and removes the whole folder when
it ends, however it ends; only ``kill -9`` leaves it behind, and the rerun takes it over.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

STAGING_PREFIX = "dataprep-staging-"


def run_staging(key: str, root: Path | None) -> Path:
    """The staging folder of the run whose OUT is ``key`` (a URL or a resolved path) under ``root``."""
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    return base / f"{STAGING_PREFIX}{hashlib.sha256(key.encode()).hexdigest()[:16]}"
