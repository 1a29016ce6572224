"""The loader's resume contract, run by every dataset kind read by global position (``check_elastic_resume``).

Image tar shards, Parquet shards, a token dataset and a token mixture, each: stopped mid-epoch and
resumed with other workers (the uninterrupted run's batches), stopped at the epoch's end, resumed
on other ranks with the same global batch, and on another batch size and world size whose global
batch does not divide the saved position (the rest of the epoch, nothing delivered twice).
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaders import DataLoader, Mixture, ParquetShardDataset, ShardDataset, TokenDataset, Topology
from tests.loaders.loader.sample_ranks import rows_of, tiny_image_shards
from tests.loaders.resume_harness import SEED, DatasetKind, Job, check_elastic_resume, end_jobs
from tests.loaders.tokens.corpus import write_tokens
from tests.loaders.tokens.ranks import EOS_ID, VOCAB_SIZE, SequenceMap, counting_documents

NUM_IMAGES = 98  # 40 read by 2 x 4 in 5 steps; 58 left for 3 x 5: 3 global batches and 13, padded with 2


def _sample_kind(make: Any) -> DatasetKind:
    @cache
    def order(epoch: int) -> list[int]:
        """What one rank reading one row at a time gets: the epoch's order of every rank."""
        loader: DataLoader[Any] = DataLoader(make(Topology()), batch_size=1, num_workers=0, seed=SEED, shuffle=True)
        loader.set_epoch(epoch)
        found = [rows_of(batch)[0] for batch in loader]
        end_jobs([loader])
        return found

    return DatasetKind(make=make, ids=lambda epoch, batch: rows_of(batch), order=order, pads=True)


def _stream_kind(stream: TokenDataset | Mixture) -> DatasetKind:
    @cache
    def sequences(epoch: int) -> SequenceMap:
        return SequenceMap(stream, epoch)

    def make(topology: Topology) -> TokenDataset | Mixture:
        mine = copy.copy(stream)
        mine.topology = topology
        return mine

    return DatasetKind(make=make, ids=lambda epoch, batch: sequences(epoch).of(batch),
                       order=lambda epoch: list(range(stream.epoch_length(epoch))), pads=False)


def _counting(root: Path, name: str, count: int, first: int, seed: int) -> TokenDataset:
    documents = counting_documents(np.random.default_rng(seed), count, mean_len=12, first=first)
    shards = write_tokens(root / name, documents, docs_per_shard=90, vocab_size=VOCAB_SIZE, eos_id=EOS_ID)
    return TokenDataset(shards, seq_len=8, seed=seed)


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory, table_shards: Path) -> dict[str, DatasetKind]:
    root = tmp_path_factory.mktemp("contract")
    images = tiny_image_shards(root / "images", NUM_IMAGES, per_shard=12)
    sources = {name: _counting(root, name, count, first, seed) for seed, (name, count, first) in
               enumerate([("web", 160, 10_000), ("code", 100, 20_000)])}
    return {
        "tar": _sample_kind(lambda topology: ShardDataset(images, fields=("cls",), topology=topology)),
        "parquet": _sample_kind(lambda topology: ParquetShardDataset(table_shards, columns=["id"],
                                                                     topology=topology)),
        "tokens": _stream_kind(_counting(root, "counting", 240, 0, 5)),
        "mixture": _stream_kind(Mixture(sources, weights={"web": 0.6, "code": 0.4})),
    }


# scenario: (saved job, steps before saving (None: the whole epoch), resumed job)
SCENARIOS: dict[str, tuple[Job, int | None, Job]] = {
    "mid-epoch-other-workers": ((2, 4, 0, "thread"), 3, (2, 4, 2, "process")),
    "epoch-end": ((2, 4, 2, "thread"), None, (2, 4, 0, "thread")),
    "other-ranks": ((4, 2, 0, "thread"), 3, (2, 4, 2, "thread")),
    "other-batch-size": ((2, 4, 0, "thread"), 5, (3, 5, 0, "thread")),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("kind", ["tar", "parquet", "tokens", "mixture"])
def test_every_dataset_kind_keeps_the_resume_contract(kinds: dict[str, DatasetKind], kind: str,
                                                      scenario: str) -> None:
    saved, stop, resumed = SCENARIOS[scenario]
    check_elastic_resume(kinds[kind], saved, stop, resumed)
