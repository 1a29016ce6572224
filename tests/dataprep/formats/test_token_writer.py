"""dataprep.formats.tokens.writer: Megatron-Core's own IndexedDataset reads every shard; rollover; interrupts."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dataprep.errors import UsageError
from dataprep.formats.manifest import ShardInfo, sha256_file
from dataprep.formats.samples import CleanRecord
from dataprep.formats.tokens.index import read_token_index
from dataprep.tokenize.tokenizer import Tokenizer, load_tokenizer
from dataprep.formats.writer import ShardWriter
from dataprep.formats.tokens.writer import INDEX_BYTES_PER_DOCUMENT, TokenizedDocument, TokenShardWriter
from tests.dataprep.token_samples import corpus_texts, word_level

indexed_dataset = pytest.importorskip("megatron.core.datasets.indexed_dataset")
tokenizers = pytest.importorskip("tokenizers")
ROOT = Path(__file__).resolve().parents[3]


def documents(tokenizer: Tokenizer, texts: list[str]) -> list[TokenizedDocument]:
    encoded = tokenizer.encode_batch(texts)
    return [TokenizedDocument(f"doc_{i:05d}", f"raw/{i}.txt", ids) for i, ids in enumerate(encoded)]


def write_all(out: Path, docs: list[TokenizedDocument], **kwargs: object) -> list[ShardInfo]:
    shards: list[ShardInfo] = []
    with TokenShardWriter(out, **kwargs) as writer:  # type: ignore[arg-type]
        for doc in docs:
            shards.extend(writer.write(doc))
        shards.extend(writer.close())
    return shards


def megatron_documents(out: Path, shards: list[ShardInfo]) -> list[list[int]]:
    """Every document of every shard, in order, as Megatron-Core's reader gives it."""
    docs: list[list[int]] = []
    for shard in shards:
        dataset = indexed_dataset.IndexedDataset(str(out / shard.name.removesuffix(".bin")))
        docs += [dataset[i].tolist() for i in range(len(dataset))]
    return docs


def final_names(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if not p.name.startswith("."))


def test_megatron_reads_every_document_as_the_tokenizer_encodes_it_plus_eos(tmp_path: Path, bpe: Tokenizer,
                                                                            bpe_path: Path) -> None:
    texts = corpus_texts(120)
    shards = write_all(tmp_path, documents(bpe, texts), dtype=bpe.dtype, max_samples_per_shard=50)
    assert [s.num_samples for s in shards] == [50, 50, 20]
    library = tokenizers.Tokenizer.from_file(str(bpe_path))
    assert megatron_documents(tmp_path, shards) == [[*library.encode(t).ids, bpe.eos_id] for t in texts]
    dataset = indexed_dataset.IndexedDataset(str(tmp_path / "shard-000000"))
    assert np.dtype(dataset.index.dtype) == np.uint16


def test_a_vocabulary_past_65500_ids_is_written_as_int32(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(word_level(tmp_path / "big.json", 70_000))
    out = tmp_path / "out"
    out.mkdir()
    texts = ["w69999 w1 w65535 w65536", "", "w0"]
    shards = write_all(out, documents(tokenizer, texts), dtype=tokenizer.dtype)
    dataset = indexed_dataset.IndexedDataset(str(out / "shard-000000"))
    assert np.dtype(dataset.index.dtype) == np.int32 == tokenizer.dtype
    assert megatron_documents(out, shards) == [[69_999, 1, 65_535, 65_536, 70_001], [70_001], [0, 70_001]]


def test_shard_info_describes_both_files(tmp_path: Path, bpe: Tokenizer) -> None:
    docs = documents(bpe, corpus_texts(30))
    [shard] = write_all(tmp_path, docs, dtype=bpe.dtype, prefix="shard-00003", start_shard=7)
    assert (shard.name, shard.index) == ("shard-00003-000007.bin", "shard-00003-000007.idx")
    assert final_names(tmp_path) == [shard.name, shard.index]
    bin_path, idx_path = tmp_path / shard.name, tmp_path / shard.index  # type: ignore[operator]
    assert shard.bytes == bin_path.stat().st_size == 2 * sum(len(d.tokens) for d in docs)
    assert shard.sha256 == sha256_file(bin_path) and shard.index_sha256 == sha256_file(idx_path)
    assert shard.num_samples == 30 and shard.num_tokens == sum(len(d.tokens) for d in docs)
    index = read_token_index(idx_path)
    assert index.num_sequences == 30 and index.num_tokens == shard.num_tokens


def test_clean_records_with_a_tokens_field_and_ids_of_another_integer_dtype(tmp_path: Path) -> None:
    records = [CleanRecord("a", "raw/a", {"tokens": np.array([1, 2, 65_535], dtype=np.int64)}),
               CleanRecord("b", "raw/b", {"tokens": np.array([7], dtype=np.int32), "text": "kept aside"})]
    shards = write_all(tmp_path, records, dtype=np.uint16)  # type: ignore[arg-type]
    assert megatron_documents(tmp_path, shards) == [[1, 2, 65_535], [7]]


def test_rollover_by_bytes_counts_both_files_and_is_greedy(tmp_path: Path, bpe: Tokenizer) -> None:
    docs = documents(bpe, corpus_texts(200))
    limit = 6000
    shards = write_all(tmp_path, docs, dtype=bpe.dtype, max_shard_bytes=limit)
    assert len(shards) > 3
    sizes = [d.tokens.nbytes + INDEX_BYTES_PER_DOCUMENT for d in docs]
    start = 0
    for shard in shards:
        on_disk = shard.bytes + (tmp_path / shard.index).stat().st_size  # type: ignore[operator]
        end = start + shard.num_samples
        assert on_disk <= limit or shard.num_samples == 1  # a document larger than the limit goes alone
        if end < len(docs):
            assert on_disk + sizes[end] > limit  # the next document did not fit
        start = end
    assert start == len(docs)
    assert megatron_documents(tmp_path, shards) == [d.tokens.tolist() for d in docs]


def test_identical_inputs_give_identical_bytes(tmp_path: Path, bpe: Tokenizer) -> None:
    docs = documents(bpe, corpus_texts(80))
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        write_all(tmp_path / run, docs, dtype=bpe.dtype, max_samples_per_shard=30)
    first = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    assert first == {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()} and len(first) == 6


# ----------------------------------------------------------------------------- interrupted writes


def test_an_exception_mid_shard_leaves_only_complete_shards(tmp_path: Path, bpe: Tokenizer) -> None:
    docs = documents(bpe, corpus_texts(25))
    written: list[ShardInfo] = []
    with pytest.raises(RuntimeError, match="stop here"):
        with TokenShardWriter(tmp_path, dtype=bpe.dtype, max_samples_per_shard=10) as writer:
            for doc in docs:
                written += writer.write(doc)
            raise RuntimeError("stop here")
    assert [s.name for s in written] == ["shard-000000.bin", "shard-000001.bin"]
    assert sorted(os.listdir(tmp_path)) == ["shard-000000.bin", "shard-000000.idx", "shard-000001.bin",
                                            "shard-000001.idx"]
    assert megatron_documents(tmp_path, written) == [d.tokens.tolist() for d in docs[:20]]
    with pytest.raises(ValueError, match="closed or aborted"):
        writer.write(docs[0])


def test_a_failed_index_rename_takes_the_bin_back(tmp_path: Path, bpe: Tokenizer) -> None:
    (tmp_path / "shard-000000.idx").mkdir()  # the .idx cannot be renamed into place
    writer = TokenShardWriter(tmp_path, dtype=bpe.dtype)
    writer.write(documents(bpe, ["one document"])[0])
    with pytest.raises(OSError) as failure:
        writer.close()
    assert "while completing shard" in "".join(getattr(failure.value, "__notes__", []))
    assert sorted(os.listdir(tmp_path)) == ["shard-000000.idx"]  # no .bin, no temporary file


KILLED_WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from pathlib import Path
    from dataprep.formats.tokens.writer import TokenShardWriter, TokenizedDocument
    writer = TokenShardWriter(Path(sys.argv[1]), dtype=np.uint16, max_samples_per_shard=10)
    for i in range(25):
        writer.write(TokenizedDocument(f"d{i}", "raw", np.arange(i + 1, dtype=np.uint16)))
    print("mid-shard", flush=True)
    sys.stdin.read()  # wait here until killed
""")


def test_a_killed_writer_leaves_no_partial_shard_under_a_final_name(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "mid-shard\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert final_names(tmp_path) == ["shard-000000.bin", "shard-000000.idx", "shard-000001.bin", "shard-000001.idx"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [".shard-000002.bin.tmp"]
    shards = [ShardInfo(f"shard-00000{n}.bin", 10, 0, "") for n in (0, 1)]
    assert megatron_documents(tmp_path, shards) == [list(range(i + 1)) for i in range(20)]


# ----------------------------------------------------------------------------- contract and refusals


def test_the_writer_is_a_shard_writer_and_an_empty_close_writes_nothing(tmp_path: Path) -> None:
    writer = TokenShardWriter(tmp_path, dtype=np.uint16)
    assert isinstance(writer, ShardWriter)
    assert writer.close() == [] and writer.close() == [] and os.listdir(tmp_path) == []


@pytest.mark.parametrize(("record", "error", "message"), [
    (TokenizedDocument("k", "s", np.array([70_000])), ValueError, r"'k': token ids 70000..70000 do not fit .* uint16"),
    (TokenizedDocument("k", "s", np.array([-1, 3])), ValueError, r"'k': token ids -1..3 do not fit"),
    (TokenizedDocument("k", "s", np.zeros((2, 2), np.uint16)), ValueError, r"'k': token ids must be a 1-D integer"),
    (TokenizedDocument("k", "s", np.zeros(3, np.float32)), ValueError, r"'k': token ids must be a 1-D integer"),
    (CleanRecord("k", "s", {"text": "hi"}), TypeError, r"'k': a token shard takes a 'tokens' field .*\['text'\]"),
    (CleanRecord("k", "s", {"tokens": [1, 2]}), TypeError, r"'k': a token shard takes a 'tokens' field .*got list"),
])
def test_a_document_that_does_not_fit_is_refused_naming_it_and_the_writer_goes_on(
        tmp_path: Path, record: object, error: type[Exception], message: str) -> None:
    with TokenShardWriter(tmp_path, dtype=np.uint16) as writer:
        with pytest.raises(error, match=message):
            writer.write(record)  # type: ignore[arg-type]
        writer.write(TokenizedDocument("ok", "s", np.array([5], np.uint16)))
    [shard] = writer.shards
    assert megatron_documents(tmp_path, [shard]) == [[5]]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"dtype": np.float32}, "'dtype' must be an integer dtype Megatron knows"),
    ({"dtype": np.uint32}, "'dtype' must be an integer dtype Megatron knows"),
    ({"dtype": np.uint16, "max_shard_bytes": 0}, "'max_shard_bytes' must be a positive int or None"),
    ({"dtype": np.uint16, "max_shard_bytes": None}, "at least one of"),
    ({"dtype": np.uint16, "prefix": ".hidden"}, "'prefix' must be a non-empty str"),
])
def test_bad_arguments_are_refused_at_construction(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TokenShardWriter(tmp_path, **kwargs)  # type: ignore[arg-type]


def test_a_missing_output_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        TokenShardWriter(tmp_path / "nope", dtype=np.uint16)


def test_sha256_is_computed_while_writing_not_reread(tmp_path: Path, bpe: Tokenizer) -> None:
    docs = documents(bpe, corpus_texts(10))
    [shard] = write_all(tmp_path, docs, dtype=bpe.dtype)
    expected = hashlib.sha256(b"".join(d.tokens.astype("<u2").tobytes() for d in docs)).hexdigest()
    assert shard.sha256 == expected
