"""Pure: one window of S+1 tokens -> an item's arrays (inputs, labels, positions, document numbers).

Conventions (the issue's, settled for every user of the token path):

=================  ============================  ===================================================
field              dtype, shape                  meaning
=================  ============================  ===================================================
``input_ids``      token dtype [S]               window tokens 0..S-1 (uint16 below 65,500 ids, else
                                                 int32: the shards' own dtype, compact until the device)
``labels``         label dtype [S]               window tokens 1..S; -100 where masked
``position_ids``   int32 [S]                     0 at the window start and right after every EOS, +1 per token
``document_ids``   int32 [S]                     segment number within the window: 0 from the start,
                                                 +1 right after every EOS
=================  ============================  ===================================================

The label dtype is the token dtype when it can hold -100 or nothing is masked, else int32
(``label_dtype``): so uint16 shards give uint16 labels without masking and int32 labels with
``mask_across_documents=True``, which sets -100 on every label whose input token is EOS
(the label that would predict the next document's first token from this one's end).
Segments are delimited by EOS tokens, not by the plan's documents: every document ends
with EOS in dataprep output, so the two agree there.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["IGNORE_INDEX", "WindowFields", "label_dtype", "window_fields"]

IGNORE_INDEX = -100  # torch.nn.CrossEntropyLoss's default ignore_index

WindowFields = dict[str, np.ndarray]


def label_dtype(token_dtype: np.dtype, masked: bool) -> np.dtype:
    """The labels' dtype: ``token_dtype`` unless masking needs -100 and it cannot hold it, then int32."""
    token_dtype = np.dtype(token_dtype)
    if masked and np.iinfo(token_dtype).min > IGNORE_INDEX:
        return np.dtype(np.int32)
    return token_dtype


def window_fields(window: np.ndarray, eos_id: int, *, mask_across_documents: bool) -> WindowFields:
    """The item of one window: ``window`` is [S+1] tokens; returns the four [S] arrays described above."""
    size = window.shape[0] - 1
    input_ids = window[:size]
    labels = window[1:].astype(label_dtype(window.dtype, mask_across_documents))
    eos = (input_ids == eos_id).nonzero()[0]
    # Segment bounds: 0, one past each EOS (one past the last input is the end, not a start), S.
    bounds = np.empty(eos.shape[0] + 2, dtype=np.int32)
    bounds[0] = 0
    bounds[1:-1] = eos + 1
    bounds[-1] = size
    if eos.shape[0] and eos[-1] == size - 1:
        bounds = bounds[:-1]
    lengths = bounds[1:] - bounds[:-1]
    document_ids = np.repeat(np.arange(lengths.shape[0], dtype=np.int32), lengths)
    position_ids = _arange(size) - np.repeat(bounds[:-1], lengths)
    if mask_across_documents:
        labels[eos] = IGNORE_INDEX
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids, "document_ids": document_ids}


@functools.lru_cache(maxsize=8)
def _arange(size: int) -> np.ndarray:
    """int32 [size] 0..size-1, read-only (shared by every item of that length)."""
    values = np.arange(size, dtype=np.int32)
    values.flags.writeable = False
    return values
