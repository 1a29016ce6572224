"""TokenDataset and Mixture under the stock torch DataLoader (0 and 2 worker processes) and loaders.DataLoader."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data

import loaders
from loaders.read.topology import Topology
from loaders.tokens import GlobalPosition, GridSampler, Mixture, TokenDataset, collate
from tests.loaders.tokens.corpus import random_documents, write_tokens


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> TokenDataset:
    root = tmp_path_factory.mktemp("loaders-tokens")
    documents = random_documents(np.random.default_rng(8), 400, mean_len=15)
    return TokenDataset(write_tokens(root / "out", documents, docs_per_shard=150), seq_len=12, seed=3,
                        mask_across_documents=True)


def _expected(dataset: torch.utils.data.Dataset, indices: Sequence[object]) -> dict[str, Any]:
    return collate([dataset[i] for i in indices])


def _equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stock_dataloader(dataset: TokenDataset, num_workers: int) -> None:
    loader: torch.utils.data.DataLoader = torch.utils.data.DataLoader(dataset, batch_size=8,
                                                                      num_workers=num_workers, collate_fn=collate)
    batches = list(loader)
    assert len(batches) == -(-len(dataset) // 8)
    for b, batch in enumerate(batches):
        _equal(batch, _expected(dataset, list(range(8 * b, min(8 * b + 8, len(dataset))))))
    assert batches[0]["input_ids"].dtype == torch.uint16 and batches[0]["labels"].dtype == torch.int32


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stock_dataloader_with_the_grid_sampler_per_rank(dataset: TokenDataset, num_workers: int) -> None:
    """Two ranks: the same number of batches, disjoint rows, SampleIndex carrying the epoch into the workers."""
    seen = []
    for rank in range(2):
        sampler = GridSampler(dataset, 4, topology=Topology(rank=rank, world_size=2))
        sampler.set_epoch(1)
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=num_workers,
                                             collate_fn=dataset.default_collate_fn, persistent_workers=num_workers > 0)
        batches = list(loader)
        assert len(batches) == len(dataset) // 8
        indices = list(sampler)
        assert {i.epoch for i in indices} == {1}
        for b, batch in enumerate(batches):
            _equal(batch, _expected(dataset, indices[4 * b:4 * b + 4]))
        seen.append([i.index for i in indices])
    assert sorted(seen[0] + seen[1]) == list(range(8 * (len(dataset) // 8)))


def test_grid_sampler_resumes_from_a_global_position(dataset: TokenDataset) -> None:
    sampler = GridSampler(dataset, 3, topology=Topology(rank=1, world_size=2), start=GlobalPosition(0, 10))
    indices = [i.index for i in sampler]
    assert indices[:3] == [13, 14, 15] and len(indices) == len(sampler) == 3 * ((len(dataset) - 10) // 6)
    sampler.set_epoch(1)
    assert [i.index for i in sampler][:3] == [3, 4, 5]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_mixture_under_the_stock_dataloader(dataset: TokenDataset, tmp_path: Path, num_workers: int) -> None:
    other = TokenDataset(write_tokens(tmp_path / "other", random_documents(np.random.default_rng(9), 200)),
                         seq_len=12, mask_across_documents=True)
    mixture = Mixture({"a": dataset, "b": other}, weights={"a": 0.75, "b": 0.25})
    loader: torch.utils.data.DataLoader = torch.utils.data.DataLoader(mixture, batch_size=5,
                                                                      num_workers=num_workers, collate_fn=collate)
    batches = list(loader)
    for b, batch in enumerate(batches):
        _equal(batch, _expected(mixture, list(range(5 * b, min(5 * b + 5, len(mixture))))))


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_loaders_dataloader_as_a_plain_map_style_dataset(dataset: TokenDataset, worker_type: str) -> None:
    """With a sampler given, loaders.DataLoader reads it as any map-style dataset (the grid is for no sampler)."""
    loader: loaders.DataLoader = loaders.DataLoader(dataset, batch_size=8, num_workers=2, collate_fn=collate, seed=0,
                                                    worker_type=worker_type,
                                                    sampler=torch.utils.data.SequentialSampler(dataset))
    batches = list(loader)
    assert len(batches) == -(-len(dataset) // 8)
    for b, batch in enumerate(batches):
        _equal(batch, _expected(dataset, list(range(8 * b, min(8 * b + 8, len(dataset))))))
    default = next(iter(loaders.DataLoader(dataset, batch_size=4, num_workers=0)))
    assert default["input_ids"].shape == (4, 12) and default["position_ids"].dtype == torch.int32


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_reweighted_mixture_resumes_under_the_stock_dataloader(dataset: TokenDataset, tmp_path: Path,
                                                                  num_workers: int) -> None:
    """Without loaders.DataLoader: ``Mixture.resume(state)`` gives the segment, ``GridSampler(start=, segment=)``
    hands it to the worker processes with every index."""
    other = TokenDataset(write_tokens(tmp_path / "other", random_documents(np.random.default_rng(9), 200)),
                         seq_len=12, mask_across_documents=True)
    state = Mixture({"a": dataset, "b": other}, weights={"a": 0.75, "b": 0.25}).stream_state(0, 30)
    reweighted = Mixture({"a": dataset, "b": other}, weights={"a": 0.25, "b": 0.75})
    segment = reweighted.resume(state)
    sampler = GridSampler(reweighted, 4, topology=Topology(rank=1, world_size=2), start=GlobalPosition(0, 30),
                          segment=segment)
    loader: torch.utils.data.DataLoader = torch.utils.data.DataLoader(
        reweighted, batch_size=4, sampler=sampler, num_workers=num_workers, collate_fn=collate)
    batches = list(loader)
    end = reweighted.epoch_length(0, segment)
    assert len(batches) == (end - 30) // 8 and len(batches) == len(sampler) // 4
    for b, batch in enumerate(batches):  # rank 1's rows of global batch b from position 30: 34..37, 42..45, ...
        _equal(batch, collate([reweighted.sources["ab"[s]][i] for s, i in
                               (reweighted.source_item(30 + 8 * b + 4 + r, 0, segment) for r in range(4))]))
