"""dataprep.tokenize.stage: in order, kept text tokenized whatever the batches and threads, short ones rejected."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import numpy as np
import pytest

from dataprep.formats.samples import CleanRecord
from dataprep.inputs.records import Reject, RejectReason
from dataprep.tokenize.stage import TokenStage
from dataprep.tokenize.tokenizer import Tokenizer, load_tokenizer
from tests.dataprep.token_samples import corpus_texts


def results(texts: list[str]) -> Iterator[CleanRecord | Reject]:
    """Clean text records, every third input a reject from an earlier stage."""
    for i, text in enumerate(texts):
        if i % 3 == 2:
            yield Reject(f"{i}.txt", RejectReason.EMPTY_TEXT, "blank", i)
        else:
            yield CleanRecord(f"k{i}", f"{i}.txt", {"text": text, "__source__": f"{i}.txt", "__row__": i})


def run(stage: TokenStage, texts: list[str]) -> list[CleanRecord | Reject]:
    def generator() -> Generator[CleanRecord | Reject, None, None]:
        yield from results(texts)

    return list(stage.documents(generator()))


def as_values(out: list) -> list:
    return [(r.key, r.fields["tokens"].tolist()) if isinstance(r, CleanRecord) else (r.source, str(r.reason), r.row)
            for r in out]


@pytest.mark.parametrize("tokenizer", ["bytes", "bpe"])
def test_batches_and_threads_do_not_change_the_results(request: pytest.FixtureRequest, tokenizer: str) -> None:
    loaded: Tokenizer = load_tokenizer("bytes") if tokenizer == "bytes" else request.getfixturevalue("bpe")
    texts = [t or "x" for t in corpus_texts(80)]
    reference = as_values(run(TokenStage(loaded, threads=1, min_tokens=0), texts))
    expected = [(f"k{i}", loaded.encode(text).tolist()) if i % 3 != 2 else (f"{i}.txt", "empty_text", i)
                for i, text in enumerate(texts)]
    assert reference == expected
    for threads, documents, chars in ((3, 1, 1 << 20), (2, 7, 1 << 20), (2, 1000, 50), (4, 1000, 1 << 20)):
        stage = TokenStage(loaded, threads=threads, min_tokens=0, batch_documents=documents, batch_chars=chars)
        assert as_values(run(stage, texts)) == reference, (threads, documents, chars)


def test_documents_shorter_than_min_tokens_become_rejects_in_place() -> None:
    texts = ["abcd", "ab", "abc", "a", "abcdef"]
    out = run(TokenStage(load_tokenizer("bytes"), threads=2, min_tokens=3, batch_documents=2), texts)
    assert [type(r).__name__ for r in out] == ["CleanRecord", "Reject", "Reject", "Reject", "CleanRecord"]
    assert out[1].reason is RejectReason.TOO_FEW_TOKENS and out[1].row == 1
    assert out[1].detail == "2 tokens, fewer than --min-tokens 3 (the EOS not counted)"
    assert out[2].reason is RejectReason.EMPTY_TEXT  # an earlier reject passes through as it was
    assert out[4].fields["tokens"].dtype == np.uint16 and out[4].fields["tokens"][-1] == 256


def test_closing_the_stage_closes_what_feeds_it() -> None:
    closed: list[bool] = []

    def endless() -> Generator[CleanRecord | Reject, None, None]:
        try:
            i = 0
            while True:
                yield CleanRecord(f"k{i}", "s", {"text": "some text", "__row__": i})
                i += 1
        finally:
            closed.append(True)

    documents = TokenStage(load_tokenizer("bytes"), threads=2, min_tokens=1, batch_documents=4).documents(endless())
    assert next(documents).key == "k0"
    documents.close()
    assert closed == [True]


def test_a_record_without_text_is_a_type_error() -> None:
    def one() -> Generator[CleanRecord | Reject, None, None]:
        yield CleanRecord("k", "s", {"jpg": b"..."})

    with pytest.raises(TypeError, match="'k'.*clean text records"):
        list(TokenStage(load_tokenizer("bytes"), threads=1, min_tokens=1).documents(one()))
