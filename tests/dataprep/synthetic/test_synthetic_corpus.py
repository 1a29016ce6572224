"""dataprep.synthetic's text corpus: deterministic, a realistic length spread, declared duplicates and broken inputs."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from dataprep.clean.options import TextOptions
from dataprep.clean.text import clean_text
from dataprep.errors import UsageError
from dataprep.inputs.records import RawRecord, Reject
from dataprep.synthetic import CorpusReport, SyntheticSpec, corpus_kind, main, make_dataset, train_bpe
from dataprep.synthetic.corpus import CORPUS_TABLE, CORPUS_TEXT_DIR, write_corpus
from dataprep.synthetic.sink import Sink
from dataprep.tokenize.tokenizer import load_tokenizer

tokenizers = pytest.importorskip("tokenizers")
DOCUMENTS = 400


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> CorpusReport:
    report = make_dataset(tmp_path_factory.mktemp("syn") / "raw",
                          SyntheticSpec(images=1, classes=1, tables=False, text=False, documents=DOCUMENTS))
    assert report.corpus is not None
    return report.corpus


def files(report: CorpusReport) -> list[bytes]:
    return [p.read_bytes() for p in sorted((report.root / CORPUS_TEXT_DIR).iterdir())]


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_another_seed_differs_and_document_i_does_not_depend_on_the_count(tmp_path: Path) -> None:
    first = write_corpus(tmp_path / "a", 3, 120, Sink())
    again = write_corpus(tmp_path / "b", 3, 120, Sink())
    other = write_corpus(tmp_path / "c", 4, 120, Sink())
    more = write_corpus(tmp_path / "d", 3, 240, Sink())
    assert tree(first.root) == tree(again.root) and first == CorpusReport(**{**vars(again), "root": first.root})
    changed = [name for name, data in tree(first.root).items() if tree(other.root)[name] != data]
    assert len(changed) > 100
    assert files(more)[:120] == files(first)
    assert first.bytes_written == sum(len(v) for v in tree(first.root).values())


def test_the_trained_tokenizer_is_deterministic_and_loads(corpus: CorpusReport, tmp_path: Path) -> None:
    assert corpus.tokenizer == corpus.root / "tokenizer.json"
    again = make_dataset(tmp_path / "raw", SyntheticSpec(images=1, classes=1, tables=False, text=False,
                                                         documents=DOCUMENTS))
    assert again.corpus is not None and again.corpus.tokenizer is not None
    assert again.corpus.tokenizer.read_bytes() == corpus.tokenizer.read_bytes()
    tokenizer = load_tokenizer(corpus.tokenizer)
    assert tokenizer.eos == "<|endoftext|>" and tokenizer.vocab_size == 2000


def test_lengths_spread_from_a_few_tokens_to_several_thousand(corpus: CorpusReport) -> None:
    assert corpus.tokenizer is not None
    tokenizer = load_tokenizer(corpus.tokenizer)
    texts = [data.decode("utf-8") for i, data in enumerate(files(corpus)) if corpus_kind(i) == "text"]
    lengths = np.array([len(d) for d in tokenizer.encode_batch(texts)])
    assert (lengths < 16).mean() >= 0.04  # many short documents
    assert 40 <= np.median(lengths) <= 200
    assert (lengths > 3000).sum() >= DOCUMENTS // 40 - 1  # the long tail, beyond a typical sequence length
    assert lengths.max() > 5000


def test_duplicates_are_exact_copies_and_every_copy_is_declared(corpus: CorpusReport) -> None:
    data = files(corpus)
    assert len(corpus.duplicates) >= DOCUMENTS // 25 - 2
    for copy, original in corpus.duplicates.items():
        assert original < copy and data[copy] == data[original] and corpus_kind(original) == "text"
    first_seen: dict[bytes, int] = {}
    undeclared = []
    for i, content in enumerate(data):
        if i in corpus.rejects:
            continue
        if content in first_seen and i not in corpus.duplicates:
            undeclared.append(i)
        first_seen.setdefault(content, i)
    assert undeclared == []
    assert corpus.kept == len(first_seen) == DOCUMENTS - len(corpus.duplicates) - len(corpus.rejects)


def test_broken_inputs_are_rejected_by_text_cleaning_as_declared(corpus: CorpusReport) -> None:
    reasons = {}
    for i, content in enumerate(files(corpus)):
        result = clean_text(RawRecord(f"doc_{i}", f"doc_{i}.txt", value=content), TextOptions())
        if isinstance(result, Reject):
            reasons[i] = str(result.reason)
    assert reasons == corpus.rejects
    assert sorted(set(reasons.values())) == ["empty_text", "invalid_utf8"]
    assert any(files(corpus)[i] == b"" for i in reasons)


def test_texts_are_nfc_with_paragraphs_and_non_ascii(corpus: CorpusReport) -> None:
    texts = [d.decode("utf-8") for i, d in enumerate(files(corpus)) if corpus_kind(i) == "text"]
    assert all(unicodedata.is_normalized("NFC", t) for t in texts)
    assert sum("\n\n" in t for t in texts) > len(texts) // 4
    assert sum(not t.isascii() for t in texts) > len(texts) // 2


def test_the_jsonl_table_holds_the_same_documents_in_the_same_order(corpus: CorpusReport) -> None:
    lines = (corpus.root / CORPUS_TABLE).read_bytes().splitlines()
    assert len(lines) == corpus.documents
    for i, (line, content) in enumerate(zip(lines, files(corpus), strict=True)):
        try:
            row = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            assert corpus.rejects[i] == "invalid_utf8"
            assert json.loads(line.decode("latin-1"))["id"] == i
            continue
        assert row == {"id": i, "text": content.decode("utf-8")}


def test_without_documents_no_corpus_and_bad_counts_are_refused(tmp_path: Path) -> None:
    report = make_dataset(tmp_path / "raw", SyntheticSpec(images=1, classes=1, tables=False, text=False))
    assert report.corpus is None and not (tmp_path / "raw" / "corpus").exists()
    with pytest.raises(UsageError, match="'documents' must be an int >= 0"):
        SyntheticSpec(documents=-1)


def test_train_bpe_refuses_a_vocabulary_too_small_for_the_bytes(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"'vocab_size' must be an int >= 257"):
        train_bpe(["text"], tmp_path / "t.json", vocab_size=100)


def test_cli_writes_the_corpus_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "raw"
    assert main([str(out), "--images", "1", "--classes", "1", "--no-tables", "--no-text", "--documents", "60"]) == 0
    printed = capsys.readouterr().out
    assert "corpus of 60 documents (1 duplicates, 3 broken) + tokenizer.json" in printed
    assert sorted(p.name for p in (out / "corpus").iterdir()) == ["table", "text", "tokenizer.json"]
    assert len(list((out / "corpus" / "text").iterdir())) == 60
