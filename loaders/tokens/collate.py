"""Items -> a batch: the four [B, S] tensors plus ``cu_seqlens`` and ``max_seqlen`` (``collate``).

Give it to any DataLoader over a ``TokenDataset`` or ``Mixture``::

    torch.utils.data.DataLoader(dataset, batch_size=B, collate_fn=loaders.tokens.collate)

(the dataset's ``default_collate_fn`` attribute is the same function, which ``loaders.DataLoader``
uses by itself when given no ``collate_fn``). Without it, torch's ``default_collate`` stacks the
four fields alike but adds no ``cu_seqlens``.

The batch, every tensor on the CPU:

=================  ==============================  ==================================================
key                dtype, shape                    meaning
=================  ==============================  ==================================================
``input_ids``      token dtype [B, S]              (uint16 or int32: cast on the device, ``.long()``)
``labels``         label dtype [B, S]              -100 where masked (see ``loaders.tokens.window``)
``position_ids``   int32 [B, S]                    0 at each row's start and after every EOS
``document_ids``   int32 [B, S]                    segment number within the row
``cu_seqlens``     int32 [num_segments + 1]        FlashAttention varlen layout over the batch seen as
                                                   B*S tokens: each segment's first token, then B*S
``max_seqlen``     int                             the longest segment, in tokens
=================  ==============================  ==================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["collate", "cu_seqlens"]

_FIELDS = ("input_ids", "labels", "position_ids", "document_ids")


def cu_seqlens(position_ids: np.ndarray) -> tuple[np.ndarray, int]:
    """(int32 [segments + 1] segment starts over the flattened [B, S] ``position_ids``, then B*S; longest segment)."""
    flat = position_ids.reshape(-1)
    bounds = np.append(np.flatnonzero(flat == 0), flat.shape[0]).astype(np.int32)
    longest = int(np.diff(bounds).max()) if bounds.shape[0] > 1 else 0
    return bounds, longest


def collate(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Stack token items (each field [S]) into [B, S] tensors and add ``cu_seqlens`` and ``max_seqlen``."""
    if not items:
        raise ValueError("collate needs at least one item (got an empty batch)")
    batch: dict[str, Any] = {name: torch.from_numpy(np.stack([np.asarray(item[name]) for item in items]))
                             for name in _FIELDS}
    bounds, longest = cu_seqlens(batch["position_ids"].numpy())
    batch["cu_seqlens"] = torch.from_numpy(bounds)
    batch["max_seqlen"] = longest
    return batch
