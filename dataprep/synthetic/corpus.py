"""The text corpus for tokenization: realistic document lengths, exact duplicates, broken inputs.

Document i (0-based) of a corpus of N is one of (``corpus_kind``):

- ``"text"``: UTF-8 prose (NFC; paragraphs of sentences over a Zipf-distributed vocabulary
  of made-up and real words, some non-ASCII). Lengths in words: log-normal, median about
  60, so many documents are short (about 1 in 20 under 10 words); 1 in ``LONG_EVERY`` is
  long, ``LONG_WORDS`` words (several thousand tokens with any tokenizer).
- ``"duplicate"``: the exact text of an earlier ``"text"`` document.
- ``"empty"`` (0 bytes or ``""``), ``"blank"`` (only whitespace): an ``empty_text`` reject.
- ``"invalid_utf8"``: prose with one Latin-1 encoded word: an ``invalid_utf8`` reject.

Written twice under ``top``, the same documents in the same order: ``text/doc_NNNNN.txt``
(one document per file) and ``table/documents.jsonl`` (one row ``{"id": i, "text": ...}``
per document; the invalid UTF-8 row carries the raw Latin-1 bytes inside its string).
``make_corpus`` adds ``tokenizer.json``, a byte-level BPE trained on the kept documents.
Each document comes from its own random stream (seed, corpus stream, i): document i is
the same whatever N.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from dataprep.inputs.records import RejectReason
from dataprep.synthetic.bpe import bpe_json
from dataprep.synthetic.sink import Sink, prepare_dir
from dataprep.synthetic.spec import STREAM_CORPUS, CorpusReport
from dataprep.synthetic.vocab import WORDS

CORPUS_TEXT_DIR = "text"
CORPUS_TABLE = "table/documents.jsonl"
CORPUS_TOKENIZER = "tokenizer.json"
TEXT_COLUMN = "text"
LONG_EVERY = 40
LONG_WORDS = (3000, 9000)  # words in a long document, uniform in [low, high)
MEDIAN_WORDS = 60
_SIGMA = 1.1  # of the log-normal length in words
_VOCABULARY = 4000
_ZIPF_S = 1.1
_SYLLABLES = ("ka", "ro", "mi", "te", "su", "an", "el", "or", "ix", "qu", "bra", "ste", "lon", "ver", "tho",
              "ne", "ul", "ph", "ght", "ing", "de", "la", "sch", "ou", "ai", "y", "tr", "ez")
# Positions in each block of 50 documents that are broken inputs, and the duplicates' position in blocks of 25.
_BROKEN_AT = {17: "empty", 33: "blank", 41: "invalid_utf8"}
_BROKEN_BLOCK = 50
_DUPLICATE_AT, _DUPLICATE_BLOCK = 12, 25
KIND_REASONS: dict[str, RejectReason] = {"empty": RejectReason.EMPTY_TEXT, "blank": RejectReason.EMPTY_TEXT,
                                         "invalid_utf8": RejectReason.INVALID_UTF8}


def corpus_kind(index: int) -> str:
    """What document ``index`` is: "text", "duplicate", "empty", "blank" or "invalid_utf8" (module docstring)."""
    if index % _BROKEN_BLOCK in _BROKEN_AT:
        return _BROKEN_AT[index % _BROKEN_BLOCK]
    if index >= _DUPLICATE_BLOCK and index % _DUPLICATE_BLOCK == _DUPLICATE_AT:
        return "duplicate"
    return "text"


@functools.lru_cache(maxsize=4)
def _vocabulary(seed: int) -> tuple[tuple[str, ...], np.ndarray]:
    """(words, cumulative Zipf probabilities): made-up words, with the real ones of ``vocab`` among the frequent."""
    rng = np.random.default_rng([seed, STREAM_CORPUS, 2**32])
    made_up = {"".join(rng.choice(_SYLLABLES, int(rng.integers(1, 5)))) for _ in range(2 * _VOCABULARY)}
    words = sorted(made_up)  # a set's order varies between runs; sorted, then shuffled by the seed
    rng.shuffle(words)
    del words[_VOCABULARY - len(WORDS):]
    words[5:5] = WORDS  # among the frequent words: non-ASCII bytes in every document
    weights = 1.0 / np.arange(1, len(words) + 1) ** _ZIPF_S
    return tuple(words), np.cumsum(weights / weights.sum())


def _word_count(rng: np.random.Generator, index: int) -> int:
    if index % LONG_EVERY == LONG_EVERY - 1:
        return int(rng.integers(*LONG_WORDS))
    return max(1, int(rng.lognormal(np.log(MEDIAN_WORDS), _SIGMA)))


def _prose(rng: np.random.Generator, words: int, seed: int) -> str:
    """``words`` words as sentences (4-20 words) and paragraphs (1-6 sentences), NFC."""
    vocabulary, cdf = _vocabulary(seed)
    picks = np.minimum(np.searchsorted(cdf, rng.random(words)), len(vocabulary) - 1)
    paragraphs: list[str] = []
    sentences: list[str] = []
    start = 0
    while start < words:
        end = min(words, start + int(rng.integers(4, 21)))
        sentence = " ".join(vocabulary[k] for k in picks[start:end])
        if rng.random() < 0.1:
            sentence += f", {int(rng.integers(0, 10_000))}"
        sentences.append(sentence[:1].upper() + sentence[1:] + str(rng.choice([".", ".", ".", "?", "!"])))
        start = end
        if len(sentences) >= int(rng.integers(1, 7)) or start >= words:
            paragraphs.append(" ".join(sentences))
            sentences = []
    return unicodedata.normalize("NFC", "\n\n".join(paragraphs) + "\n")


def corpus_text(seed: int, index: int) -> str:
    """The prose of document ``index`` had it kind "text" (the same text a "duplicate" copies from its original)."""
    rng = np.random.default_rng([seed, STREAM_CORPUS, index])
    return _prose(rng, _word_count(rng, index), seed)


def original_of(seed: int, index: int) -> int:
    """The earlier "text" document that duplicate ``index`` repeats."""
    rng = np.random.default_rng([seed, STREAM_CORPUS, index, 1])
    while True:
        candidate = int(rng.integers(0, index))
        if corpus_kind(candidate) == "text":
            return candidate


def document_bytes(seed: int, index: int) -> bytes:
    """The bytes of document ``index`` as its text file holds them."""
    kind = corpus_kind(index)
    if kind == "empty":
        return b""
    if kind == "blank":
        return b" \n\t \n"
    if kind == "duplicate":
        return corpus_text(seed, original_of(seed, index)).encode("utf-8")
    text = corpus_text(seed, index)
    if kind == "invalid_utf8":
        return text.encode("utf-8") + "Café crème à Zürich.\n".encode("latin-1")
    return text.encode("utf-8")


def iter_documents(seed: int, count: int) -> Iterator[str]:
    """The first ``count`` valid prose documents of the corpus (kind "text"), for benchmarks: no files."""
    index = 0
    produced = 0
    while produced < count:
        if corpus_kind(index) == "text":
            yield corpus_text(seed, index)
            produced += 1
        index += 1


def _table_line(index: int, data: bytes) -> bytes:
    """One JSONL row; bytes that are not UTF-8 go into the string as they are (a row the reader must reject)."""
    try:
        return (json.dumps({"id": index, TEXT_COLUMN: data.decode("utf-8")}, ensure_ascii=False) + "\n").encode()
    except UnicodeDecodeError:
        placeholder = "\x00bytes\x00"
        line = json.dumps({"id": index, TEXT_COLUMN: placeholder}, ensure_ascii=False).encode()
        return line.replace(json.dumps(placeholder).encode()[1:-1], data.replace(b"\n", b"\\n")) + b"\n"


def write_corpus(top: Path, seed: int, documents: int, sink: Sink) -> CorpusReport:
    """Write ``documents`` documents under ``top`` as text files and as a JSONL table (module docstring)."""
    prepare_dir(top)
    start_bytes = sink.bytes_written
    (top / CORPUS_TEXT_DIR).mkdir()
    (top / CORPUS_TABLE).parent.mkdir()
    digits = max(5, len(str(documents - 1)))
    duplicates: dict[int, int] = {}
    rejects: dict[int, str] = {}
    rows: list[bytes] = []
    for index in range(documents):
        kind = corpus_kind(index)
        if kind == "duplicate":
            duplicates[index] = original_of(seed, index)
        elif kind in KIND_REASONS:
            rejects[index] = str(KIND_REASONS[kind])
        data = document_bytes(seed, index)
        sink.write(top / CORPUS_TEXT_DIR / f"doc_{index:0{digits}d}.txt", data)
        rows.append(_table_line(index, data))
    sink.write(top / CORPUS_TABLE, b"".join(rows))
    kept = documents - len(duplicates) - len(rejects)
    return CorpusReport(root=top, documents=documents, kept=kept, duplicates=duplicates, rejects=rejects,
                        bytes_written=sink.bytes_written - start_bytes)


def make_corpus(top: Path, seed: int, documents: int, sink: Sink) -> CorpusReport:
    """``write_corpus``, then ``top/tokenizer.json``: a BPE trained on the kept documents (needs ``tokenizers``)."""
    report = write_corpus(top, seed, documents, sink)
    kept = (corpus_text(seed, i) for i in range(documents) if corpus_kind(i) == "text")
    text = bpe_json(kept).encode("utf-8")
    sink.write(top / CORPUS_TOKENIZER, text)
    return dataclasses.replace(report, tokenizer=top / CORPUS_TOKENIZER, bytes_written=report.bytes_written + len(text))
