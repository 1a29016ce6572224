"""The write loop's token stage: kept text documents -> token ids (EOS appended), in batches, in plan order.

It sits between deduplication and the writer (``dataprep.engines.write_loop``) when a run writes
token shards. It takes the cleaned results in plan order, collects up to
``BATCH_DOCUMENTS`` of them (or ``BATCH_CHARS`` characters of kept text), tokenizes the
kept ones in one call on ``threads`` threads (``TokenEncoder``; while the next batch is
collected), and gives every result back in the same order: a kept document becomes a
``CleanRecord`` whose ``tokens`` field holds its ids, or a ``too_few_tokens`` reject;
rejects pass through. Deduplication runs before it, so no time goes to tokenizing
duplicates.

A document's ids do not depend on its batch or on the number of threads (the tokenizer's
padding and truncation are off, ``dataprep.tokenize.tokenizer``), so the output bytes depend on
neither: the same on 1 core, N cores, or a Ray task on one thread.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass

import numpy as np

from dataprep.formats.samples import CleanRecord, EncodedSample
from dataprep.inputs.records import Reject, RejectReason
from dataprep.tokenize.tokenizer import TokenEncoder, Tokenizer
from dataprep.errors import require_int
from dataprep.formats.tokens.writer import TOKENS_FIELD

Result = CleanRecord | EncodedSample | Reject
TEXT_FIELD = "text"  # the field of a clean text record (``dataprep.clean.text``)
# A batch: enough documents to keep every thread busy (``TokenEncoder``), a bounded amount of text.
BATCH_DOCUMENTS = 512
BATCH_CHARS = 4 * 2**20


@dataclass(frozen=True)
class TokenStage:
    """Tokenizes the kept text documents of a stream of results (module docstring).

    tokenizer: the run's ``Tokenizer``; threads: tokenizing threads (``--workers``; 1 in a
    Ray task); min_tokens: the fewest tokens, EOS not counted, a kept document has.
    """

    tokenizer: Tokenizer
    threads: int
    min_tokens: int
    batch_documents: int = BATCH_DOCUMENTS
    batch_chars: int = BATCH_CHARS

    def __post_init__(self) -> None:
        require_int("threads", self.threads, minimum=1, error=ValueError)
        require_int("min_tokens", self.min_tokens, minimum=0, error=ValueError)
        require_int("batch_documents", self.batch_documents, minimum=1, error=ValueError)
        require_int("batch_chars", self.batch_chars, minimum=1, error=ValueError)

    def documents(self, results: Generator[Result, None, None]) -> Generator[Result, None, None]:
        """``results`` in order, each kept text document tokenized (closing this closes ``results``).

        With several threads a batch is tokenized while the next one is collected and the
        one before it written (one thread hands batches to the encoder's threads): the
        serial work of the loop (receiving cleaned text, deduplication, writing) overlaps
        tokenization instead of leaving the cores idle. With one thread everything runs on
        the calling thread.
        """
        with closing(results), TokenEncoder(self.tokenizer, threads=self.threads) as encoder:
            if self.threads == 1:
                for batch in self._batches(results):
                    yield from self._tokenized(batch, encoder.encode_batch(_texts(batch)))
                return
            with ThreadPoolExecutor(1, thread_name_prefix="dataprep-token-batches") as ahead:
                pending: tuple[list[Result], Future[list[np.ndarray]]] | None = None
                for batch in self._batches(results):
                    submitted = (batch, ahead.submit(encoder.encode_batch, _texts(batch)))
                    if pending is not None:
                        yield from self._tokenized(pending[0], pending[1].result())
                    pending = submitted
                if pending is not None:
                    yield from self._tokenized(pending[0], pending[1].result())

    def _batches(self, results: Iterator[Result]) -> Iterator[list[Result]]:
        batch: list[Result] = []
        documents = chars = 0
        for result in results:
            batch.append(result)
            if isinstance(result, CleanRecord):
                documents += 1
                chars += len(_text_of(result))
            if documents >= self.batch_documents or chars >= self.batch_chars:
                yield batch
                batch, documents, chars = [], 0, 0
        if batch:
            yield batch

    def _tokenized(self, batch: list[Result], encoded: list[np.ndarray]) -> Iterator[Result]:
        """The batch in order, its kept documents replaced by their ids (``encoded``, one per kept document)."""
        ids = iter(encoded)
        for result in batch:
            yield self._document(result, next(ids)) if isinstance(result, CleanRecord) else result

    def _document(self, record: CleanRecord, tokens: np.ndarray) -> CleanRecord | Reject:
        """The record as token ids, or a ``too_few_tokens`` reject."""
        count = int(tokens.shape[0]) - 1  # the EOS is not the document's
        if count < self.min_tokens:
            row = record.fields.get("__row__")
            detail = f"{count} tokens, fewer than --min-tokens {self.min_tokens} (the EOS not counted)"
            return Reject(record.source, RejectReason.TOO_FEW_TOKENS, detail, row if isinstance(row, int) else None)
        return CleanRecord(record.key, record.source, {TOKENS_FIELD: tokens})


def _texts(batch: list[Result]) -> list[str]:
    """The text of every kept document of the batch, in order."""
    return [_text_of(result) for result in batch if isinstance(result, CleanRecord)]


def _text_of(record: CleanRecord) -> str:
    text = record.fields.get(TEXT_FIELD)
    if not isinstance(text, str):
        raise TypeError(f"sample {record.key!r}: the token stage takes clean text records with a {TEXT_FIELD!r} "
                        f"field (got fields {sorted(record.fields)})")
    return text
