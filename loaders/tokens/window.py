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
    after_eos = input_ids[:-1] == eos_id
    is_start = np.empty(size, dtype=bool)
    is_start[0] = True
    is_start[1:] = after_eos
    document_ids = np.cumsum(is_start, dtype=np.int32) - 1
    starts = np.flatnonzero(is_start).astype(np.int32)
    position_ids = np.arange(size, dtype=np.int32) - starts[document_ids]
    if mask_across_documents:
        labels[input_ids == eos_id] = IGNORE_INDEX
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids, "document_ids": document_ids}
