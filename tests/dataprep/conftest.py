"""Fixtures shared by the dataprep tests: small synthetic raw datasets, made once per session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dataprep.synthetic import SyntheticReport, SyntheticSpec, make_dataset


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> SyntheticReport:
    """A raw tree with images (and broken files), tables and text; shared read-only."""
    root = tmp_path_factory.mktemp("raw")
    return make_dataset(root, SyntheticSpec(images=60, classes=4, seed=1))


@pytest.fixture
def image_tree(synthetic: SyntheticReport, tmp_path: Path) -> Path:
    """A private copy of the synthetic image-folder tree that a test may modify."""
    dst = tmp_path / "images"
    shutil.copytree(synthetic.root / "images", dst, symlinks=True)
    return dst
