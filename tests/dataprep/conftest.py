"""Fixtures shared by the dataprep tests: small synthetic raw datasets, made once per session."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from dataprep.cli import main
from dataprep.synthetic import SyntheticReport, SyntheticSpec, make_dataset
from dataprep.tokenize.tokenizer import Tokenizer, load_tokenizer
from tests.dataprep.helpers import Result
from tests.dataprep.token_samples import trained_bpe


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


@pytest.fixture(scope="session")
def bpe_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE ``tokenizer.json``: 600 ids, ``<|endoftext|>`` = 0, trained on corpus text (tokenizers)."""
    pytest.importorskip("tokenizers")
    return trained_bpe(tmp_path_factory.mktemp("bpe") / "tokenizer.json")


@pytest.fixture(scope="session")
def bpe(bpe_path: Path) -> Tokenizer:
    """``bpe_path`` loaded as dataprep loads a tokenizer."""
    return load_tokenizer(bpe_path)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """``cli("shard", raw, out, ...)`` -> Result; a traceback (uncaught exception) fails the test as is."""

    def run(*args: object) -> Result:
        capsys.readouterr()
        try:
            rc = main([str(a) for a in args])
        except SystemExit as err:  # argparse usage errors
            rc = err.code if isinstance(err.code, int) else 2
        captured = capsys.readouterr()
        return Result(int(rc), captured.out, captured.err)

    return run
