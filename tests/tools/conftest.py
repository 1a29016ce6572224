"""Fixtures shared by the tools tests: one small synthetic image tree, sharded once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.samples import image_dataset


@pytest.fixture(scope="session")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(raw image-folder tree, shard directory) of 24 photo-like images in 3 classes, 3 tar shards; read-only."""
    made = image_dataset(tmp_path_factory.mktemp("tools-data"), 24, classes=3, seed=0)
    assert made.raw is not None
    return made.raw, made.shards
