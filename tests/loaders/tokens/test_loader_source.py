"""loaders.DataLoader over a TokenDataset or Mixture with no sampler: the global grid, the token batch, workers,
pinning and the device path, the order digest, from the training loop's side."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch

from loaders import ConfigError, DataLoader, Mixture, TokenDataset
from loaders.tokens import GlobalPosition, collate, resume_grid
from tests.loaders.tokens.conftest import SEQ_LEN
from tests.loaders.tokens.ranks import EOS_ID, SequenceMap, close, global_steps, grid, job

TOPOLOGIES = [(1, 5, 0, "thread"), (2, 3, 2, "thread"), (4, 2, 0, "thread"), (2, 4, 2, "process")]


def _tokens(batch: dict[str, Any]) -> np.ndarray:
    """Every window's S+1 tokens (inputs, then the last label) of a batch, flat."""
    inputs, labels = batch["input_ids"].numpy().astype(np.int64), batch["labels"].numpy().astype(np.int64)
    return np.concatenate([inputs, labels[:, -1:]], axis=1).reshape(-1)


@pytest.mark.parametrize(("world_size", "batch_size", "num_workers", "worker_type"), TOPOLOGIES)
def test_every_token_once_per_epoch_but_the_tail_and_the_dropped_remainder(
        counting: TokenDataset, world_size: int, batch_size: int, num_workers: int, worker_type: str) -> None:
    corpus = np.concatenate([counting.corpus.read(d, 0, int(n)) for d, n in enumerate(counting.corpus.lengths)])
    words = np.sort(corpus[corpus != EOS_ID].astype(np.int64))
    loaders = job(counting, world_size, batch_size, num_workers, worker_type)
    dropped = counting.dropped_sequences(batch_size, world_size)
    assert 0 <= counting.tail_tokens < SEQ_LEN + 1 and 0 <= dropped < batch_size * world_size
    for epoch in (0, 1):
        delivered = np.concatenate([_tokens(batch) for loader in loaders for batch in loader])
        assert delivered.shape[0] == counting.corpus.num_tokens - counting.tail_tokens - dropped * (SEQ_LEN + 1)
        seen = np.sort(delivered[delivered != EOS_ID])
        assert np.unique(seen).shape[0] == seen.shape[0]  # no token twice
        assert np.isin(seen, words).all() and words.shape[0] - seen.shape[0] <= (dropped + 1) * (SEQ_LEN + 1)
        assert all(loader.epoch == epoch + 1 for loader in loaders)
    close(loaders)


@pytest.mark.parametrize(("world_size", "batch_size"), [(1, 6), (3, 2), (4, 3)])
def test_each_step_is_one_global_batch_of_the_grid(counting: TokenDataset, three_sources: Mixture,
                                                   world_size: int, batch_size: int) -> None:
    for stream in (counting, three_sources):
        loaders = job(stream, world_size, batch_size)
        n = stream.epoch_length(0)
        expected = resume_grid(GlobalPosition(0, 0), n, batch_size, world_size).grid.num_batches
        assert {len(loader) for loader in loaders} == {expected}
        steps = global_steps(loaders, SequenceMap(stream, 0))
        assert steps == list(grid(0, n, batch_size * world_size))


def test_batches_carry_the_token_fields_without_a_collate_fn(counting: TokenDataset) -> None:
    (loader,) = job(counting, 1, 4)
    assert loader.collate_fn is collate and loader.worker_type == "thread"  # declared by the dataset
    batch = next(iter(loader))
    assert set(batch) == {"input_ids", "labels", "position_ids", "document_ids", "cu_seqlens", "max_seqlen"}
    assert batch["input_ids"].dtype == torch.uint16 and batch["input_ids"].shape == (4, SEQ_LEN)
    assert batch["cu_seqlens"].dtype == torch.int32 and batch["cu_seqlens"][-1] == 4 * SEQ_LEN
    assert batch["position_ids"].dtype == torch.int32 and isinstance(batch["max_seqlen"], int)
    mine = next(iter(DataLoader(counting, batch_size=4, num_workers=0, collate_fn=torch.utils.data.default_collate)))
    assert "cu_seqlens" not in mine and torch.equal(mine["input_ids"], batch["input_ids"])  # the user's collate_fn
    single = next(iter(DataLoader(counting, batch_size=None, num_workers=0)))  # no batching: torch's convert
    assert single["input_ids"].shape == (SEQ_LEN,) and torch.equal(single["input_ids"], batch["input_ids"][0])


def test_token_datasets_are_read_by_threads_at_any_worker_count(counting: TokenDataset, three_sources: Mixture) -> None:
    """``light_items``: past 4 workers, where a dataset that only releases the GIL gets processes, a token
    dataset still gets threads (pickling its batches out of processes costs more than reading them)."""
    for dataset in (counting, three_sources):
        loader = DataLoader(dataset, batch_size=4, num_workers=8)
        assert loader.worker_type == "thread"
        first = [b["input_ids"] for b, _ in zip(loader, range(3), strict=False)]
        inline = [b["input_ids"] for b, _ in zip(DataLoader(dataset, batch_size=4, num_workers=0), range(3),
                                                  strict=False)]
        assert all(torch.equal(a, b) for a, b in zip(first, inline, strict=True))
        loader.close()


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_pin_memory_without_cuda_and_the_device_path_on_the_cpu(counting: TokenDataset, worker_type: str) -> None:
    expected = list(DataLoader(counting, batch_size=5, num_workers=0))
    with pytest.warns(UserWarning, match="(not pinned|pinned memory won.t be used)") if \
            not torch.cuda.is_available() else warnings.catch_warnings():
        pinned = list(DataLoader(counting, batch_size=5, num_workers=2, worker_type=worker_type, pin_memory=True))
    on_device = list(DataLoader(counting, batch_size=5, num_workers=2, worker_type=worker_type, device="cpu"))
    assert len(pinned) == len(on_device) == len(expected)
    for got in (pinned, on_device):
        for a, b in zip(got, expected):
            assert a.keys() == b.keys() and "cu_seqlens" in a and a["max_seqlen"] == b["max_seqlen"]
            assert all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a if k != "max_seqlen")


def test_the_loaders_order_digest_is_the_datasets_for_its_epoch(counting: TokenDataset, three_sources: Mixture) -> None:
    for stream in (counting, three_sources):
        (loader,) = job(stream, 1, 4)
        n = stream.epoch_length(0)
        assert loader.order_digest(0, n) == stream.order_digest(0, n, 0)
        list(loader)  # the epoch is over: the next one is read now
        assert loader.epoch == 1 and loader.order_digest(3, 40) == stream.order_digest(3, 40, 1)
        assert loader.order_digest(3, 40, epoch=0) == stream.order_digest(3, 40, 0) != loader.order_digest(3, 40)
    with pytest.raises(ConfigError, match="'stop' 2 precedes 'start' 3"):
        loader.order_digest(3, 2)
    sampled = DataLoader(counting, batch_size=4, num_workers=0, sampler=range(len(counting)))
    with pytest.raises(ConfigError, match="a sampler it did not draw, so it knows no global positions"):
        sampled.order_digest(0, 4)


def test_a_second_iterator_reads_the_epoch_from_its_start_beside_the_first(counting: TokenDataset) -> None:
    (loader,) = job(counting, 1, 6)
    sequences = SequenceMap(counting, 0)
    outer = iter(loader)
    head = [sequences.of(next(outer)) for _ in range(3)]
    inner = [sequences.of(batch) for batch in loader]  # detached: the epoch from its start, the outer one untouched
    rest = [sequences.of(batch) for batch in outer]
    assert inner == head + rest == list(grid(0, len(counting), 6))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_pinned_batches_reach_the_gpu_in_their_compact_dtype(counting: TokenDataset, worker_type: str) -> None:
    """uint16 tokens are copied to the device as uint16 (half the bytes of int32), then cast there (.long())."""
    expected = list(DataLoader(counting, batch_size=5, num_workers=0, pin_memory=False))
    pinned = list(DataLoader(counting, batch_size=5, num_workers=2, worker_type=worker_type, pin_memory=True))
    assert all(batch[k].is_pinned() for batch in pinned for k in batch if k != "max_seqlen")
    on_gpu = list(DataLoader(counting, batch_size=5, num_workers=2, worker_type=worker_type, device="cuda"))
    for got, want in zip(on_gpu, expected):
        assert got["input_ids"].device.type == "cuda" and got["input_ids"].dtype == torch.uint16
        assert torch.equal(got["input_ids"].long().cpu(), want["input_ids"].long())
        assert torch.equal(got["cu_seqlens"].cpu(), want["cu_seqlens"]) and got["max_seqlen"] == want["max_seqlen"]
        embedded = torch.nn.functional.embedding(got["input_ids"].long(), torch.ones(EOS_ID + 1, 2, device="cuda"))
        assert embedded.shape == (5, SEQ_LEN, 2)
