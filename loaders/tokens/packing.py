"""Pure: an epoch's packing plan, the index from sequence k to (document, offset, length) segments.

The epoch's packed stream is every document, in the epoch's permuted order, concatenated;
sequence k is tokens ``[k (S+1), (k+1) (S+1))`` of it (inputs the first S, labels the last
S). Windows are disjoint and in stream order (not permuted: the documents already are), so
every token is delivered once except the stream's last ``tail_tokens < S+1`` tokens.

The index is the prefix sums of the permuted document lengths, never materialised whole:
documents are grouped in blocks of ``BLOCK_DOCS`` permuted positions, and the plan keeps
one int64 per block (tokens before it: 8 bytes per 4,096 documents), extended in stream
order only as far as a request needs (so the first batch waits for its own blocks, not
for the epoch); the full prefix sums of a block (its documents from the permutation, their
lengths, cumulated) are rebuilt on demand and the last few kept. Memory: the corpus's int32
lengths (shared by every epoch) + ~0.002 bytes per document here + the cached blocks.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from loaders.tokens.permutation import FeistelPermutation

__all__ = ["BLOCK_DOCS", "PackingPlan", "DocumentSegments"]

BLOCK_DOCS = 4096  # permuted documents per block: one int64 checkpoint each
_FIRST_EXTENSION_DOCS = BLOCK_DOCS  # the first extension is one block (first batch fast), later ones double
_MAX_EXTENSION_DOCS = 1 << 21
_CACHED_BLOCKS = 16


class DocumentSegments(NamedTuple):
    """Where sequences' tokens come from, in stream order: int64 [m] arrays.

    sequence: global sequence index; document: corpus document; offset: first token within
    the document; length: tokens (>= 1). A sequence's S+1 tokens are its segments in order.
    """

    sequence: np.ndarray
    document: np.ndarray
    offset: np.ndarray
    length: np.ndarray


class PackingPlan:
    """The packing index of one epoch: ``lengths`` (int32 [n]) permuted by ``permutation``, cut every S+1 tokens.

    Thread-safe (one lock around extension and the block cache); a function of its inputs only.
    """

    def __init__(self, lengths: np.ndarray, permutation: FeistelPermutation, seq_len: int, num_tokens: int) -> None:
        self.lengths = lengths
        self.permutation = permutation
        self.window = seq_len + 1
        self.num_sequences = num_tokens // self.window
        self.tail_tokens = num_tokens - self.num_sequences * self.window
        num_blocks = -(-permutation.size // BLOCK_DOCS)
        # checkpoints[b]: tokens before block b, valid for b <= _known (checkpoints[num_blocks] = all tokens)
        self._checkpoints = np.zeros(num_blocks + 1, dtype=np.int64)
        self._known = 0
        self._next_extension = _FIRST_EXTENSION_DOCS
        self._blocks: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def index_bytes(self) -> int:
        """Bytes this plan holds now (checkpoints + cached blocks), not counting the shared lengths."""
        cached = sum(d.nbytes + p.nbytes for d, p in self._blocks.values())
        return int(self._checkpoints.nbytes) + cached

    def _block_docs(self, block: int) -> tuple[np.ndarray, np.ndarray]:
        """(documents int64 [m], their lengths int64 [m]) of ``block``'s permuted positions."""
        first = block * BLOCK_DOCS
        docs = self.permutation(np.arange(first, min(first + BLOCK_DOCS, self.permutation.size), dtype=np.int64))
        return docs, self.lengths[docs].astype(np.int64)

    def _extend_to(self, token: int) -> None:
        """Compute checkpoints in stream order until one lies beyond ``token`` (or every block is known)."""
        last = self._checkpoints.shape[0] - 1
        while self._known < last and self._checkpoints[self._known] <= token:
            blocks = min(max(1, self._next_extension // BLOCK_DOCS), last - self._known)
            self._next_extension = min(2 * self._next_extension, _MAX_EXTENSION_DOCS)
            first = self._known * BLOCK_DOCS
            stop = min((self._known + blocks) * BLOCK_DOCS, self.permutation.size)
            docs = self.permutation(np.arange(first, stop, dtype=np.int64))
            lengths = self.lengths[docs].astype(np.int64)
            padded = np.zeros(blocks * BLOCK_DOCS, dtype=np.int64)
            padded[:lengths.shape[0]] = lengths
            sums = padded.reshape(blocks, BLOCK_DOCS).sum(axis=1)
            base = self._checkpoints[self._known]
            np.cumsum(sums, out=self._checkpoints[self._known + 1:self._known + blocks + 1])
            self._checkpoints[self._known + 1:self._known + blocks + 1] += base
            self._known += blocks

    def _block(self, block: int) -> tuple[np.ndarray, np.ndarray]:
        """(documents int64 [m], token starts int64 [m+1], absolute in the stream) of ``block``, cached."""
        cached = self._blocks.get(block)
        if cached is not None:
            self._blocks.move_to_end(block)
            return cached
        docs, lengths = self._block_docs(block)
        starts = np.empty(lengths.shape[0] + 1, dtype=np.int64)
        starts[0] = self._checkpoints[block]
        np.cumsum(lengths, out=starts[1:])
        starts[1:] += starts[0]
        self._blocks[block] = (docs, starts)
        if len(self._blocks) > _CACHED_BLOCKS:
            self._blocks.popitem(last=False)
        return docs, starts

    def _documents_over(self, first_token: int, stop_token: int) -> tuple[np.ndarray, np.ndarray]:
        """(documents, starts [m+1]) of every permuted document overlapping tokens [first_token, stop_token)."""
        with self._lock:
            self._extend_to(stop_token - 1)
            known = self._checkpoints[:self._known + 1]
            first_block = int(np.searchsorted(known, first_token, side="right")) - 1
            last_block = int(np.searchsorted(known, stop_token - 1, side="right")) - 1
            parts = [self._block(b) for b in range(first_block, last_block + 1)]
        if len(parts) == 1:
            return parts[0]
        docs = np.concatenate([d for d, _ in parts])
        starts = np.concatenate([s[:-1] for _, s in parts] + [parts[-1][1][-1:]])
        return docs, starts

    def sequence_segments(self, sequence: int) -> list[tuple[int, int, int]]:
        """(document, offset, length) of each segment of one sequence, in order: ``segments`` for one, as ints."""
        if not 0 <= sequence < self.num_sequences:
            raise IndexError(f"sequence {sequence} outside the epoch's [0, {self.num_sequences})")
        token = sequence * self.window
        stop_token = token + self.window
        docs, starts = self._documents_over(token, stop_token)
        i = int(np.searchsorted(starts, token, side="right")) - 1  # the document holding the first token
        out = []
        while token < stop_token:
            start, end = int(starts[i]), int(starts[i + 1])
            if end > start:
                end = min(end, stop_token)
                out.append((int(docs[i]), token - start, end - token))
                token = end
            i += 1
        return out

    def segments(self, first: int, stop: int) -> DocumentSegments:
        """The segments of sequences ``[first, stop)`` (0 <= first <= stop <= num_sequences), in stream order."""
        if not 0 <= first <= stop <= self.num_sequences:
            raise IndexError(f"sequences [{first}, {stop}) outside the epoch's [0, {self.num_sequences})")
        empty = np.zeros(0, dtype=np.int64)
        if first == stop:
            return DocumentSegments(empty, empty, empty, empty)
        window = self.window
        first_token, stop_token = first * window, stop * window
        docs, starts = self._documents_over(first_token, stop_token)
        lo = int(np.searchsorted(starts[1:], first_token, side="right"))
        hi = int(np.searchsorted(starts[:-1], stop_token, side="left"))
        doc_start, doc_end = starts[lo:hi], starts[lo + 1:hi + 1]
        keep = doc_end > doc_start  # a zero-length document holds no token
        docs, doc_start, doc_end = docs[lo:hi][keep], doc_start[keep], doc_end[keep]
        first_window = np.maximum(doc_start, first_token) // window
        last_window = (np.minimum(doc_end, stop_token) - 1) // window
        pieces = last_window - first_window + 1
        owner = np.repeat(np.arange(docs.shape[0]), pieces)
        within = np.arange(owner.shape[0]) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        sequence = first_window[owner] + within
        seg_start = np.maximum(doc_start[owner], sequence * window)
        seg_end = np.minimum(doc_end[owner], (sequence + 1) * window)
        return DocumentSegments(sequence, docs[owner], seg_start - doc_start[owner], seg_end - seg_start)
