"""The packing plan and TokenDataset's items against a naive reference (concatenate, cut windows)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.errors import ConfigError
from loaders.read.sample_index import SampleIndex
from loaders.tokens import TokenDataset
from loaders.tokens.packing import BLOCK_DOCS, PackingPlan
from loaders.tokens.permutation import FeistelPermutation
from tests.loaders.tokens.corpus import documents_with_eos, packed_stream, random_documents, write_tokens
from tests.loaders.tokens.strategies import bodies, seeds, seq_lens


def _reference(documents: list[np.ndarray], dataset: TokenDataset, epoch: int) -> np.ndarray:
    """The epoch's packed stream built the slow way: documents in the epoch's order, concatenated."""
    order = dataset.plan(epoch).permutation(np.arange(len(documents)))
    return packed_stream(documents, order)


@settings(max_examples=60, deadline=None)
@given(raw=bodies, seq_len=seq_lens, seed=seeds, epoch=st.integers(0, 5), per_shard=st.integers(1, 50),
       mask=st.booleans())
def test_items_equal_the_naive_reference(raw: list[list[int]], seq_len: int, seed: int, epoch: int,
                                         per_shard: int, mask: bool) -> None:
    documents = documents_with_eos(raw)
    total = sum(len(d) for d in documents)
    with tempfile.TemporaryDirectory() as tmp:
        out = write_tokens(Path(tmp) / "out", documents, docs_per_shard=per_shard)
        if total < seq_len + 1:
            with pytest.raises(ConfigError, match=f"hint: seq_len <= {total - 1}"):
                TokenDataset(out, seq_len=seq_len)
            return
        dataset = TokenDataset(out, seq_len=seq_len, seed=seed, mask_across_documents=mask)
        stream = _reference(documents, dataset, epoch)
        window = seq_len + 1
        assert len(dataset) == total // window and dataset.tail_tokens == total % window
        for k in range(len(dataset)):
            item = dataset[SampleIndex(k, epoch)]
            expected = stream[k * window:(k + 1) * window]
            assert np.array_equal(item["input_ids"], expected[:-1])
            labels = expected[1:].copy()
            if mask:
                labels[expected[:-1] == 256] = -100
            assert np.array_equal(item["labels"], labels)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 60), min_size=1, max_size=300), seq_len=seq_lens, key=seeds,
       chunk=st.integers(1, 9))
def test_every_token_once_except_the_tail(lengths: list[int], seq_len: int, key: int, chunk: int) -> None:
    """The segments of all sequences, in any chunking, tile the permuted stream's first n (S+1) tokens exactly."""
    lengths_array = np.array(lengths, dtype=np.int32)
    total = int(lengths_array.sum())
    perm = FeistelPermutation(len(lengths), key)
    plan = PackingPlan(lengths_array, perm, seq_len, total)
    order = perm(np.arange(len(lengths)))
    starts = np.concatenate([[0], np.cumsum(lengths_array[order])])
    start_of = dict(zip(order.tolist(), starts[:-1].tolist()))
    covered = []
    for first in range(0, plan.num_sequences, chunk):
        segments = plan.segments(first, min(first + chunk, plan.num_sequences))
        assert (segments.length > 0).all()
        assert (segments.offset + segments.length <= lengths_array[segments.document]).all()
        for sequence, document, offset, length in zip(*(a.tolist() for a in segments)):
            begin = start_of[document] + offset
            assert sequence * (seq_len + 1) <= begin and begin + length <= (sequence + 1) * (seq_len + 1)
            covered.append((begin, begin + length))
    delivered = plan.num_sequences * (seq_len + 1)
    assert total - delivered == plan.tail_tokens < seq_len + 1
    position = 0
    for begin, end in covered:  # in stream order, contiguous, no gap and no overlap
        assert begin == position
        position = end
    assert position == delivered


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 60), min_size=1, max_size=300), seq_len=seq_lens, key=seeds)
def test_one_sequence_path_equals_the_range_path(lengths: list[int], seq_len: int, key: int) -> None:
    """``sequence_segments`` (items) and ``segments`` (digests, ranges) describe every sequence alike."""
    lengths_array = np.array(lengths, dtype=np.int32)
    plan = PackingPlan(lengths_array, FeistelPermutation(len(lengths), key), seq_len, int(lengths_array.sum()))
    whole = plan.segments(0, plan.num_sequences)
    for k in range(plan.num_sequences):
        mine = whole.sequence == k
        expected = list(zip(whole.document[mine].tolist(), whole.offset[mine].tolist(), whole.length[mine].tolist()))
        assert plan.sequence_segments(k) == expected
    with pytest.raises(IndexError):
        plan.sequence_segments(plan.num_sequences)


def test_first_batch_does_not_build_the_epoch() -> None:
    """Sequence 0 of a 10^6-document epoch computes a few blocks' prefix sums, not the epoch's."""
    n = 1_000_000
    lengths = np.full(n, 7, dtype=np.int32)
    plan = PackingPlan(lengths, FeistelPermutation(n, 1), 15, 7 * n)
    plan.segments(0, 4)
    assert plan._known * BLOCK_DOCS < n // 50
    assert plan.index_bytes <= 2 * n  # checkpoints (8 bytes per block) + a few cached blocks
    last = plan.num_sequences - 1
    tail = plan.segments(last, last + 1)
    assert int(tail.length.sum()) == 16
    assert plan._known == -(-n // BLOCK_DOCS)
    assert plan.index_bytes <= 2 * n


def test_sequences_across_block_boundaries(tmp_path: Path) -> None:
    """More documents than several blocks, windows spanning block edges: still the reference."""
    rng = np.random.default_rng(5)
    documents = random_documents(rng, 3 * BLOCK_DOCS + 17, mean_len=3)
    dataset = TokenDataset(write_tokens(tmp_path / "out", documents, docs_per_shard=5000), seq_len=50, seed=9)
    stream = _reference(documents, dataset, 0)
    for k in range(len(dataset)):
        assert np.array_equal(dataset.window(k, 0), stream[k * 51:(k + 1) * 51])


def test_out_of_range_sequences(tmp_path: Path) -> None:
    dataset = TokenDataset(write_tokens(tmp_path / "out", documents_with_eos([[1] * 30])), seq_len=4)
    assert len(dataset) == 6
    assert np.array_equal(dataset[-1]["input_ids"], dataset[5]["input_ids"])
    with pytest.raises(IndexError, match=r"sequence 6 outside \[0, 6\)"):
        dataset[6]
    with pytest.raises(IndexError):
        dataset.plan(0).segments(5, 7)
    with pytest.raises(TypeError, match="int or SampleIndex"):
        dataset["0"]  # type: ignore[index]
