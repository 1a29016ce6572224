"""TokenCorpus: manifests and shards checked at construction, documents in order, maps reopened after pickling."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from dataprep.formats.manifest import Manifest, read_manifest, write_manifest
from loaders.errors import ShardError, ShardIntegrityError
from loaders.tokens import TokenDataset
from loaders.tokens.reader import TokenCorpus
from tests.loaders.tokens.corpus import documents_with_eos, write_tokens


@pytest.fixture
def two_sources(tmp_path: Path) -> tuple[Path, Path, list[np.ndarray]]:
    first = documents_with_eos([[1, 2], [3], [4, 5, 6], []])
    second = documents_with_eos([[7] * 9, [8, 8]])
    a = write_tokens(tmp_path / "a", first, docs_per_shard=2)
    b = write_tokens(tmp_path / "b", second, docs_per_shard=1)
    return a, b, first + second


def test_documents_of_several_directories_in_order(two_sources: tuple[Path, Path, list[np.ndarray]]) -> None:
    a, b, documents = two_sources
    corpus = TokenCorpus([a, b])
    assert corpus.num_documents == 6 and corpus.num_tokens == sum(len(d) for d in documents)
    assert isinstance(corpus.lengths, np.ndarray) and corpus.lengths.dtype == np.int32
    assert corpus.lengths.tolist() == [len(d) for d in documents]
    for i, document in enumerate(documents):
        assert corpus.read(i, 0, len(document)).tolist() == document.tolist()
    assert corpus.read(4, 3, 4).tolist() == [7] * 4
    source, within = corpus.source_of(np.arange(6))
    assert source.tolist() == [0, 0, 0, 0, 1, 1] and within.tolist() == [0, 1, 2, 3, 0, 1]


def test_a_single_shard_is_mapped_not_copied(tmp_path: Path) -> None:
    corpus = TokenCorpus(write_tokens(tmp_path / "a", documents_with_eos([[1, 2], [3]])))
    assert isinstance(corpus.lengths.base, np.memmap) or isinstance(corpus.lengths, np.memmap)


def test_pickled_corpus_reopens_its_maps(two_sources: tuple[Path, Path, list[np.ndarray]]) -> None:
    a, b, documents = two_sources
    corpus = TokenCorpus([a, b])
    corpus.read(0, 0, 1)  # a .bin map is open
    blob = pickle.dumps(corpus)
    assert len(blob) < 4096  # paths and manifests, no data
    copy = pickle.loads(blob)
    assert copy.read(4, 0, 10).tolist() == documents[4].tolist()
    assert copy.lengths.tolist() == corpus.lengths.tolist()


def test_a_folder_given_a_cache_is_read_from_its_verified_copies_held_whole(
        two_sources: tuple[Path, Path, list[np.ndarray]], tmp_path: Path) -> None:
    a, _, documents = two_sources
    cache = tmp_path / "cache"
    corpus = TokenCorpus(a, cache_dir=cache, cache_limit="64MiB")
    assert all(p.is_relative_to(cache) for p in corpus.bin_paths)  # downloaded before the first read
    copy = pickle.loads(pickle.dumps(corpus))  # takes its own leases on the same copies
    assert copy.bin_paths == corpus.bin_paths
    for i, document in enumerate(documents[:4]):
        assert corpus.read(i, 0, len(document)).tolist() == copy.read(i, 0, len(document)).tolist() \
            == document.tolist()
    bin_file = a / "shard-000000.bin"
    flipped = bytearray(bin_file.read_bytes())
    flipped[0] ^= 1
    bin_file.write_bytes(bytes(flipped))
    with pytest.raises(ShardIntegrityError, match=r"shard-000000\.bin .*sha256 is [0-9a-f]+, the manifest says"):
        TokenCorpus(a, cache_dir=tmp_path / "another", cache_limit="64MiB")


def test_not_token_shards(tmp_path: Path, image_shards: Path) -> None:
    with pytest.raises(ShardError, match=r"format 'wds', not token shards.*--tokenizer"):
        TokenCorpus(image_shards)
    with pytest.raises(ShardError, match="no manifest"):
        TokenCorpus(tmp_path)


def test_different_tokenizers_name_both_directories(tmp_path: Path) -> None:
    a = write_tokens(tmp_path / "a", documents_with_eos([[1]]))
    b = write_tokens(tmp_path / "b", documents_with_eos([[1]]), tokenizer_sha256="c" * 64)
    c = write_tokens(tmp_path / "c", documents_with_eos([[1]], eos=300), vocab_size=400, eos_id=300)
    with pytest.raises(ShardError, match=f"{a} and {b} were tokenized differently .*sha256: b+ vs c+"):
        TokenCorpus([a, b])
    with pytest.raises(ShardError, match=r"eos_id: 256 vs 300; vocab_size: 257 vs 400"):
        TokenCorpus([a, c])


def test_shard_sizes_are_checked_against_the_manifest(tmp_path: Path) -> None:
    out = write_tokens(tmp_path / "a", documents_with_eos([[1, 2, 3], [4]]))
    binary = out / "shard-000000.bin"
    binary.write_bytes(binary.read_bytes()[:-2])
    with pytest.raises(ShardError, match=r"shard-000000.bin: .*10 bytes on disk, the manifest says 12 bytes.*verify"):
        TokenCorpus(out)
    binary.unlink()
    with pytest.raises(ShardError, match="shard-000000.bin: token shard missing"):
        TokenCorpus(out)


def test_index_disagreeing_with_the_manifest(tmp_path: Path) -> None:
    out = write_tokens(tmp_path / "a", documents_with_eos([[1, 2, 3], [4]]))
    other = write_tokens(tmp_path / "b", documents_with_eos([[1, 2], [3], [4]]))
    (out / "shard-000000.idx").write_bytes((other / "shard-000000.idx").read_bytes())
    with pytest.raises(ShardError, match="3 documents in the .idx, 2 in the manifest"):
        TokenCorpus(out)
    (out / "shard-000000.idx").write_bytes(b"garbage")
    with pytest.raises(ShardError, match="unreadable token index"):
        TokenCorpus(out)


def test_index_pointing_past_the_bin(tmp_path: Path) -> None:
    """Same counts and sizes, but the .idx's documents end elsewhere than the .bin does."""
    out = write_tokens(tmp_path / "a", documents_with_eos([[1, 2, 3], [4]]))
    other = write_tokens(tmp_path / "b", documents_with_eos([[1], [2, 3, 4]]))
    manifest = read_manifest(out)
    (out / "shard-000000.idx").write_bytes((other / "shard-000000.idx").read_bytes())
    write_manifest(out, manifest)
    assert TokenCorpus(out).lengths.tolist() == [2, 4]  # consistent: last document ends at the last byte
    shard = manifest.shards[0]
    longer = Manifest(**{**manifest.__dict__, "shards": (shard.__class__(**{**shard.__dict__, "num_tokens": 7}),)})
    write_manifest(out, longer)
    with pytest.raises(ShardError, match="the manifest says 12 bytes and 7 tokens"):
        TokenDataset(out, seq_len=2)
