"""Shared by the token tests: corpus texts and small tokenizer.json files built with ``tokenizers`` (no hub)."""

from __future__ import annotations

from pathlib import Path

from dataprep.synthetic import iter_documents, train_bpe


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
