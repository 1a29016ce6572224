"""The token shard format is Megatron-Core's: its own reader reads what ``encode_token_index`` describes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dataprep.errors import FormatError
from dataprep.formats.tokens.index import IDX_HEADER_BYTES, encode_token_index, read_token_index, token_dtype

indexed_dataset = pytest.importorskip("megatron.core.datasets.indexed_dataset")


def write_shard(prefix: Path, docs: list[np.ndarray], dtype: np.dtype) -> None:
    prefix.with_suffix(".bin").write_bytes(b"".join(d.astype(dtype).tobytes() for d in docs))
    prefix.with_suffix(".idx").write_bytes(encode_token_index(dtype, np.array([len(d) for d in docs])))


@pytest.mark.parametrize("vocab", [300, 65_499, 65_500, 200_000])
def test_megatron_reads_every_document_back(tmp_path: Path, vocab: int) -> None:
    rng = np.random.default_rng(vocab)
    docs = [rng.integers(0, vocab, size=n) for n in (1, 7, 0, 1000, 2)]
    dtype = token_dtype(vocab)
    write_shard(tmp_path / "shard", docs, dtype)
    megatron = indexed_dataset.IndexedDataset(str(tmp_path / "shard"))
    assert len(megatron) == len(docs)
    assert np.dtype(megatron.index.dtype) == dtype == (np.uint16 if vocab < 65_500 else np.int32)
    for i, doc in enumerate(docs):
        np.testing.assert_array_equal(megatron[i], doc)
    ours = read_token_index(tmp_path / "shard.idx")
    np.testing.assert_array_equal(ours.lengths, [len(d) for d in docs])
    np.testing.assert_array_equal(ours.documents, np.arange(len(docs) + 1))
    assert ours.num_tokens == sum(len(d) for d in docs)


def test_a_malformed_index_is_refused_naming_the_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "bad.idx"
    good = encode_token_index(np.dtype(np.uint16), np.array([3, 4]))
    path.write_bytes(b"NOTMEGA!!" + good[9:])
    with pytest.raises(FormatError, match=r"bad\.idx.*byte 0"):
        read_token_index(path)
    path.write_bytes(good[:17] + b"\x63" + good[18:])
    with pytest.raises(FormatError, match="dtype code 99 at byte 17"):
        read_token_index(path)
    path.write_bytes(good[:IDX_HEADER_BYTES + 5])
    with pytest.raises(FormatError, match="truncated"):
        read_token_index(path)
    path.write_bytes(b"")
    with pytest.raises(FormatError, match="cannot map"):
        read_token_index(path)
