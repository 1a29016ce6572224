"""Fixtures shared by the loaders tests: small dataprep outputs, made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataprep.cli import main as dataprep_main
from dataprep.synthetic import SyntheticSpec, make_dataset
from tests.samples import image_dataset


@pytest.fixture(scope="session")
def raw_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("loaders-raw")
    make_dataset(root, SyntheticSpec(images=48, classes=4, seed=3, broken=False))
    return root


@pytest.fixture(scope="session")
def image_shards(raw_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A read-only tar-shard directory: 48 images (short side 64), 4 classes, several shards."""
    root = tmp_path_factory.mktemp("loaders-shards")
    return image_dataset(root, raw_dataset / "images", per_shard=10, resize_short=64).shards


@pytest.fixture(scope="session")
def table_shards(raw_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("loaders-tables") / "shards"
    args = ["shard", str(raw_dataset / "tables"), str(out), "--samples-per-shard", "150", "--row-group-size", "4KB",
            "--workers", "1"]
    assert dataprep_main(args) == 0
    return out
