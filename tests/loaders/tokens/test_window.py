"""Items and batches on crafted corpora: position_ids, document_ids, -100 labels, cu_seqlens, dtypes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.errors import ConfigError
from loaders.tokens import TokenDataset, collate
from loaders.tokens.window import label_dtype, window_fields
from tests.loaders.tokens.corpus import EOS, documents_with_eos, write_tokens

E = EOS


def test_window_fields_on_a_crafted_window() -> None:
    """EOS inside, EOS as the last input token, EOS at the window start: positions restart right after each."""
    window = np.array([5, 6, E, 7, E, E, 8, 9, E, 1], dtype=np.uint16)
    fields = window_fields(window, E, mask_across_documents=True)
    assert fields["input_ids"].tolist() == [5, 6, E, 7, E, E, 8, 9, E]
    assert fields["position_ids"].tolist() == [0, 1, 2, 0, 1, 0, 0, 1, 2]
    assert fields["document_ids"].tolist() == [0, 0, 0, 1, 1, 2, 3, 3, 3]
    assert fields["labels"].tolist() == [6, E, -100, E, -100, -100, 9, E, -100]
    assert fields["labels"].dtype == np.int32 and fields["position_ids"].dtype == np.int32
    assert fields["document_ids"].dtype == np.int32 and fields["input_ids"].dtype == np.uint16
    unmasked = window_fields(window, E, mask_across_documents=False)
    assert unmasked["labels"].tolist() == window[1:].tolist() and unmasked["labels"].dtype == np.uint16


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(st.sampled_from([1, 2, E]), min_size=2, max_size=60), mask=st.booleans())
def test_window_fields_equal_a_token_by_token_reference(tokens: list[int], mask: bool) -> None:
    fields = window_fields(np.array(tokens, dtype=np.uint16), E, mask_across_documents=mask)
    position, document, positions, documents, labels = 0, 0, [], [], []
    for i, token in enumerate(tokens[:-1]):
        if i and tokens[i - 1] == E:
            position, document = 0, document + 1
        positions.append(position)
        documents.append(document)
        labels.append(-100 if mask and token == E else tokens[i + 1])
        position += 1
    assert fields["position_ids"].tolist() == positions
    assert fields["document_ids"].tolist() == documents
    assert fields["labels"].tolist() == labels
    batch = collate([fields, fields])
    starts = [i for i, p in enumerate(positions + positions) if p == 0]
    assert batch["cu_seqlens"].tolist() == starts + [2 * len(positions)]


def test_window_starting_inside_a_document_and_ending_on_eos() -> None:
    window = np.array([3, 3, 3, E], dtype=np.int32)
    fields = window_fields(window, E, mask_across_documents=True)
    assert fields["position_ids"].tolist() == [0, 1, 2]
    assert fields["document_ids"].tolist() == [0, 0, 0]
    assert fields["labels"].tolist() == [3, 3, E]  # the EOS is a label here, not an input: kept


def test_label_dtypes() -> None:
    assert label_dtype(np.dtype(np.uint16), False) == np.uint16
    assert label_dtype(np.dtype(np.uint16), True) == np.int32
    assert label_dtype(np.dtype(np.int32), True) == np.int32
    assert label_dtype(np.dtype(np.uint8), True) == np.int32


def test_a_document_longer_than_several_windows(tmp_path: Path) -> None:
    """One 23-token document then EOS; S=4: windows 0..3 inside it (positions 0..3 each), window 4 crosses its end."""
    documents = documents_with_eos([list(range(10, 33)), [40, 41, 42, 43, 44, 45, 46]])
    dataset = TokenDataset(write_tokens(tmp_path / "out", documents), seq_len=4, mask_across_documents=True)
    stream = np.concatenate([documents[d] for d in dataset.plan(0).permutation(np.arange(2))])
    assert len(dataset) == len(stream) // 5
    for k in range(len(dataset)):
        item = dataset[k]
        window = stream[5 * k:5 * k + 5]
        assert item["input_ids"].tolist() == window[:4].tolist()
        after = np.concatenate([[True], window[:3] == E])
        expected_doc = np.cumsum(after) - 1
        assert item["document_ids"].tolist() == expected_doc.tolist()
        starts = np.flatnonzero(after)
        assert item["position_ids"].tolist() == (np.arange(4) - starts[expected_doc]).tolist()


def test_eos_at_a_window_edge_and_eos_only_documents(tmp_path: Path) -> None:
    """Documents of exactly S+1 tokens: every window ends on EOS; empty bodies are lone EOS tokens."""
    documents = documents_with_eos([[1, 2, 3], [4, 5, 6], [], [7, 8, 9], []])
    dataset = TokenDataset(write_tokens(tmp_path / "out", documents), seq_len=3, seed=0)
    stream = np.concatenate([documents[d] for d in dataset.plan(0).permutation(np.arange(5))])
    batch = collate([dataset[k] for k in range(len(dataset))])
    assert len(dataset) == len(stream) // 4
    flat_inputs = stream[: 4 * len(dataset)].reshape(-1, 4)[:, :3].reshape(-1)
    assert batch["input_ids"].reshape(-1).tolist() == flat_inputs.tolist()
    starts = [i for i in range(flat_inputs.shape[0]) if i % 3 == 0 or flat_inputs[i - 1] == E]
    assert batch["cu_seqlens"].tolist() == starts + [flat_inputs.shape[0]]
    assert batch["max_seqlen"] == max(np.diff(starts + [flat_inputs.shape[0]]))


def test_collate_shapes_dtypes_and_cu_seqlens() -> None:
    items = [window_fields(np.array(w, dtype=np.uint16), E, mask_across_documents=False)
             for w in ([1, 2, E, 3, 4], [E, 5, 6, 7, 8], [9, 9, 9, 9, E])]
    batch = collate(items)
    assert batch["input_ids"].shape == (3, 4) and batch["input_ids"].dtype == torch.uint16
    assert batch["labels"].dtype == torch.uint16
    assert batch["position_ids"].dtype == torch.int32 and batch["document_ids"].dtype == torch.int32
    # rows: [1 2 E | 3], [E | 5 6 7], [9 9 9 9]: segments start at 0, 3, 4, 5, 8; end 12
    assert batch["cu_seqlens"].tolist() == [0, 3, 4, 5, 8, 12]
    assert batch["cu_seqlens"].dtype == torch.int32
    assert batch["max_seqlen"] == 4
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0], [0, 0, 1, 2], [0, 1, 2, 3]]
    with pytest.raises(ValueError, match="empty batch"):
        collate([])


def test_int32_shards_give_int32_inputs(tmp_path: Path) -> None:
    documents = documents_with_eos([[70_000, 1, 2], [3, 4]], eos=99_999)
    out = write_tokens(tmp_path / "out", documents, vocab_size=100_000, eos_id=99_999)
    dataset = TokenDataset(out, seq_len=3, mask_across_documents=False)
    assert dataset.dtype == np.int32 and dataset[0]["input_ids"].dtype == np.int32
    assert 70_000 in np.concatenate([dataset[0]["input_ids"], dataset[0]["labels"]])


def test_changing_seq_len_or_seed_reads_the_same_shards(tmp_path: Path) -> None:
    """Other S and seeds re-plan over the same files (left untouched): each is its own reference stream."""
    documents = documents_with_eos([[i] * (i + 1) for i in range(30)])
    out = write_tokens(tmp_path / "out", documents)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir()}
    windows = set()
    for seq_len, seed in ((7, 0), (12, 0), (7, 5)):
        dataset = TokenDataset(out, seq_len=seq_len, seed=seed)
        stream = np.concatenate([documents[d] for d in dataset.plan(0).permutation(np.arange(30))])
        for k in range(len(dataset)):
            assert dataset.window(k, 0).tolist() == stream[k * (seq_len + 1):(k + 1) * (seq_len + 1)].tolist()
        windows.add(dataset.window(0, 0).tobytes())
    assert len(windows) == 3
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir()} == before


def test_seq_len_errors(tmp_path: Path) -> None:
    out = write_tokens(tmp_path / "out", documents_with_eos([[1, 2, 3]]))
    with pytest.raises(ConfigError, match=r"'seq_len' 4 needs windows of 5 tokens.*hold 4 tokens.*seq_len <= 3"):
        TokenDataset(out, seq_len=4)
    for bad in (0, -3, 2.0, True):
        with pytest.raises(ConfigError, match="'seq_len' must be a positive int"):
            TokenDataset(out, seq_len=bad)  # type: ignore[arg-type]
    assert len(TokenDataset(out, seq_len=3)) == 1
