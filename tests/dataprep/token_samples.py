"""Shared by the token tests: corpus texts and small tokenizer.json files built with ``tokenizers`` (no hub)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dataprep.synthetic import iter_documents, make_corpus, train_bpe
from dataprep.synthetic.corpus import CORPUS_TABLE, CORPUS_TEXT_DIR, document_bytes
from dataprep.synthetic.sink import Sink


def corpus_texts(count: int, seed: int = 0) -> list[str]:
    """``count`` prose documents of the synthetic corpus, with a few edge cases first (empty, one char, non-ASCII)."""
    edge = ["", "a", "Zürich 東京 naïve — ok.\n", "  spaced   out  ", "line one\nline two\r\n"]
    return (edge + list(iter_documents(seed, count)))[:count]


def trained_bpe(path: Path, *, vocab_size: int = 600, special_tokens: tuple[str, ...] = ("<|endoftext|>",)) -> Path:
    """A byte-level BPE trained on 300 corpus documents, written to ``path``."""
    return train_bpe(iter_documents(7, 300), path, vocab_size=vocab_size, special_tokens=special_tokens)


def word_level(path: Path, words: int, *, specials: tuple[str, ...] = ("<|endoftext|>",)) -> Path:
    """A word-level tokenizer: ``words`` words ``w0 w1 ...`` (whitespace split) and ``specials``, saved at ``path``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(words)}
    vocab["[UNK]"] = words
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(list(specials))
    tokenizer.save(str(path))
    return path


# ----------------------------------------------------------------------------- token runs over the synthetic corpus


@dataclass(frozen=True)
class TokenCorpus:
    """The synthetic corpus (``dataprep.synthetic``, ``--documents``) as every raw layout a token run reads.

    Each folder holds the same ``documents`` documents in the same order: ``text`` one file
    each, ``lines`` one line each (newlines of a document turned into spaces), ``jsonl``,
    ``csv`` and ``parquet`` a table with a ``text`` column (Parquet cannot hold the invalid
    UTF-8 document: it has a null text there instead, an ``empty_text`` reject). ``texts[i]``
    is document i's text (None: not valid UTF-8); ``tokenizer`` the corpus's BPE.
    """

    root: Path
    documents: int
    texts: tuple[str | None, ...]
    tokenizer: Path

    def folder(self, layout: str) -> Path:
        return self.root / layout

    def text_of(self, layout: str, index: int) -> str | None:
        """Document ``index`` as the raw of ``layout`` holds it (None: not valid UTF-8, or null)."""
        text = self.texts[index]
        if text is None:
            return None
        return _one_line(text) if layout == "lines" else text

    def kept(self, layout: str) -> list[str]:
        """The texts a run keeps from ``layout``, in output order: valid, not blank, first of their repeats."""
        seen: set[str] = set()
        kept = []
        for index in range(self.documents):
            text = self.text_of(layout, index)
            if text is None or not text.strip() or text in seen:
                continue
            seen.add(text)
            kept.append(text)
        return kept


def _one_line(text: str) -> str:
    return text.rstrip("\n").replace("\n", " ")


def make_token_corpus(root: Path, documents: int, seed: int = 0) -> TokenCorpus:
    """Write the synthetic corpus under ``root``, then the same documents as lines, CSV and Parquet."""
    report = make_corpus(root / "synthetic", seed, documents, Sink())
    assert report.tokenizer is not None
    data = [document_bytes(seed, i) for i in range(documents)]
    texts: list[str | None] = []
    for blob in data:
        try:
            texts.append(blob.decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(None)
    shutil.copytree(report.root / CORPUS_TEXT_DIR, root / "text")
    (root / "jsonl").mkdir()
    shutil.copy(report.root / CORPUS_TABLE, root / "jsonl" / "documents.jsonl")
    (root / "lines").mkdir()
    lines = [_one_line(t).encode() if t is not None else blob.replace(b"\n", b" ") for t, blob in zip(texts, data)]
    (root / "lines" / "corpus.txt").write_bytes(b"".join(line + b"\n" for line in lines))
    (root / "csv").mkdir()
    (root / "csv" / "documents.csv").write_bytes(b"id,text\n" + b"".join(
        f"{i},".encode() + b'"' + blob.replace(b'"', b'""') + b'"\n' for i, blob in enumerate(data)))
    (root / "parquet").mkdir()
    pq.write_table(pa.table({"id": list(range(documents)), "text": texts}), root / "parquet" / "documents.parquet")
    return TokenCorpus(root, documents, tuple(texts), report.tokenizer)


def megatron_documents(out: Path) -> list[list[int]]:
    """Every document of every shard of a finished OUT, in manifest order, as Megatron-Core's ``IndexedDataset``
    reads it (the reader of the ``megatron-core`` package, not ours)."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    manifest = json.loads((out / "manifest.json").read_text())
    documents: list[list[int]] = []
    for shard in manifest["shards"]:
        dataset = IndexedDataset(os.fspath(out / shard["name"].removesuffix(".bin")))
        documents += [dataset[i].tolist() for i in range(len(dataset))]
    return documents


def library_ids(tokenizer: Path, texts: list[str], eos: str = "<|endoftext|>") -> list[list[int]]:
    """``Tokenizer.from_file(tokenizer).encode(text).ids + [eos id]`` of each text: the library's own answer."""
    from tokenizers import Tokenizer

    library = Tokenizer.from_file(os.fspath(tokenizer))
    eos_id = library.token_to_id(eos)
    assert eos_id is not None, f"{tokenizer} has no {eos!r}"
    return [library.encode(text).ids + [eos_id] for text in texts]
