"""Token streams whose every token differs, shared by the loader tests: one shuffled dataset, mixtures of three."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loaders.tokens import Mixture, TokenDataset
from tests.loaders.tokens.corpus import write_tokens
from tests.loaders.tokens.ranks import EOS_ID, VOCAB_SIZE, counting_documents

SEQ_LEN = 8
MIXTURE_WEIGHTS = {"web": 0.5, "code": 0.3, "books": 0.2}


def _write(root: Path, name: str, count: int, first: int, seed: int, docs_per_shard: int | None = None) -> Path:
    documents = counting_documents(np.random.default_rng(seed), count, mean_len=12, first=first)
    return write_tokens(root / name, documents, docs_per_shard=docs_per_shard, vocab_size=VOCAB_SIZE, eos_id=EOS_ID)


@pytest.fixture(scope="session")
def counting_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~240 documents (~3,100 tokens, all different but EOS) in 3 shards."""
    return _write(tmp_path_factory.mktemp("counting"), "shards", 240, 0, seed=1, docs_per_shard=90)


@pytest.fixture(scope="session")
def counting(counting_shards: Path) -> TokenDataset:
    """~340 sequences of 8 tokens, documents permuted per epoch (seed 5)."""
    return TokenDataset(counting_shards, seq_len=SEQ_LEN, seed=5)


@pytest.fixture(scope="session")
def mixture_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TokenDataset]:
    root = tmp_path_factory.mktemp("mixture-sources")
    sizes = {"web": (200, 10_000), "code": (120, 20_000), "books": (60, 30_000)}
    return {name: TokenDataset(_write(root, name, count, first, seed=i), seq_len=SEQ_LEN, seed=i)
            for i, (name, (count, first)) in enumerate(sizes.items())}


@pytest.fixture(scope="session")
def three_sources(mixture_sources: dict[str, TokenDataset]) -> Mixture:
    """Three sources weighted 0.5 / 0.3 / 0.2, exhaustion "stop"."""
    return Mixture(mixture_sources, weights=MIXTURE_WEIGHTS)


@pytest.fixture(scope="session")
def cycling_sources(mixture_sources: dict[str, TokenDataset]) -> Mixture:
    """The same three sources, exhaustion "cycle": "books" (90 sequences) runs out and starts a new pass."""
    return Mixture(mixture_sources, weights={"web": 0.3, "code": 0.3, "books": 0.4}, exhaustion="cycle",
                   num_sequences=400)
