"""Fixtures shared by the tools tests: one small synthetic image tree, sharded once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataprep import cli
from dataprep.synthetic import SyntheticSpec, make_dataset


@pytest.fixture(scope="session")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(raw image-folder tree, shard directory) of 24 photo-like images in 3 classes, 3 tar shards; read-only."""
    root = tmp_path_factory.mktemp("tools-data")
    make_dataset(root / "raw", SyntheticSpec(images=24, classes=3, broken=False, tables=False, text=False))
    raw, out = root / "raw" / "images", root / "shards"
    status = cli.main(["shard", str(raw), str(out), "--samples-per-shard", "10", "--workers", "1", "--no-progress"])
    if status != 0:
        pytest.fail(f"dataprep shard {raw} {out} exited with {status}")
    return raw, out
