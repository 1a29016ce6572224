"""order_digest: equal for the same sequences however computed, different when anything is skipped or repeated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loaders.tokens import Mixture, TokenDataset
from loaders.tokens.digest import digest_rows, token_digest
from tests.loaders.tokens.corpus import random_documents, write_tokens


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> TokenDataset:
    rng = np.random.default_rng(2)
    root = tmp_path_factory.mktemp("digest")
    a = write_tokens(root / "a", random_documents(rng, 300, mean_len=12), docs_per_shard=70)
    b = write_tokens(root / "b", random_documents(rng, 100, mean_len=30))
    return TokenDataset([a, b], seq_len=16, seed=4)


def _rows(dataset: TokenDataset, sequences: list[int], epoch: int = 0) -> list[np.ndarray]:
    return [dataset.digest_rows(k, k + 1, epoch) for k in sequences]


def test_digest_is_that_of_its_sequences_in_order(dataset: TokenDataset) -> None:
    n = len(dataset)
    whole = dataset.order_digest(0, n, epoch=0)
    assert whole == digest_rows(_rows(dataset, list(range(n))))  # chunking does not matter
    assert whole == dataset.order_digest(0, n)  # epoch from set_epoch (0)
    skipped = digest_rows(_rows(dataset, [k for k in range(n) if k != 37]))
    repeated = digest_rows(_rows(dataset, list(range(n)) + [n - 1]))
    swapped = digest_rows(_rows(dataset, [1, 0] + list(range(2, n))))
    assert len({whole, skipped, repeated, swapped}) == 4
    assert dataset.order_digest(0, n, epoch=1) != whole
    assert dataset.order_digest(0, 5, epoch=0) != dataset.order_digest(0, 6, epoch=0)


def test_rows_name_source_epoch_document_offset_length(dataset: TokenDataset) -> None:
    rows = dataset.digest_rows(0, len(dataset), 3)
    assert rows.shape[1] == 5 and set(rows[:, 0].tolist()) == {0, 1} and set(rows[:, 1].tolist()) == {3}
    assert (rows[rows[:, 0] == 1, 2] < 100).all() and (rows[:, 4] > 0).all()
    assert rows[:, 4].sum() == len(dataset) * 17


def test_mixture_digest(dataset: TokenDataset, tmp_path: Path) -> None:
    other = TokenDataset(write_tokens(tmp_path / "c", random_documents(np.random.default_rng(3), 80)), seq_len=16)
    mixture = Mixture({"x": dataset, "y": other}, weights={"x": 3, "y": 1})
    n = len(mixture)
    whole = mixture.order_digest(0, n, epoch=0)
    assert whole == mixture.order_digest(0, n)
    assert mixture.order_digest(0, n - 1, epoch=0) != whole
    assert Mixture({"x": dataset, "y": other}, weights={"x": 1, "y": 1}).order_digest(0, n // 2, 0) != \
        mixture.order_digest(0, n // 2, 0)


def test_rows_must_be_five_int64_columns() -> None:
    with pytest.raises(ValueError, match=r"int64 \[m, 5\]"):
        token_digest().update(np.zeros((2, 4)))
