"""``train_bpe``: a small byte-level BPE ``tokenizer.json`` trained on given texts (tests, the demo, benchmarks).

``bpe_json`` gives the file's text, ``train_bpe`` writes it.

GPT-2 style: byte-level pre-tokenizer and decoder, no normaliser, no post-processor, the
special token ``<|endoftext|>`` as id 0 (so it is the default EOS). Needs the optional
``tokenizers`` library (``pip install 'shardfeed[tokens]'``); never touches the network.
Training is deterministic: the same texts and vocabulary size give the same file, byte
for byte. About a second for a few MB of text and a vocabulary of a few thousand.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from dataprep.errors import UsageError

DEFAULT_VOCAB_SIZE = 2000
ENDOFTEXT = "<|endoftext|>"


def train_bpe(texts: Iterable[str], path: str | os.PathLike[str], *, vocab_size: int = DEFAULT_VOCAB_SIZE,
              special_tokens: tuple[str, ...] = (ENDOFTEXT,)) -> Path:
    """Train a byte-level BPE on ``texts`` (``bpe_json``), write its ``tokenizer.json`` to ``path``; return ``path``."""
    out = Path(path)
    out.write_text(bpe_json(texts, vocab_size=vocab_size, special_tokens=special_tokens), encoding="utf-8")
    return out


def bpe_json(texts: Iterable[str], *, vocab_size: int = DEFAULT_VOCAB_SIZE,
             special_tokens: tuple[str, ...] = (ENDOFTEXT,)) -> str:
    """The ``tokenizer.json`` text of a byte-level BPE of at most ``vocab_size`` ids (256 bytes + specials + merges).

    ``UsageError`` when ``tokenizers`` is not installed or ``vocab_size`` cannot hold the
    256 byte tokens and the specials.
    """
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as err:
        raise UsageError("training a BPE tokenizer needs the 'tokenizers' library, which is not installed "
                         "(pip install 'shardfeed[tokens]')") from err
    floor = 256 + len(special_tokens)
    if type(vocab_size) is not int or vocab_size < floor:
        raise UsageError(f"'vocab_size' must be an int >= {floor} (256 bytes + {len(special_tokens)} special tokens; "
                         f"got {vocab_size!r})")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    return str(tokenizer.to_str(pretty=True))
