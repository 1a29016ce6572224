"""What failure messages name: a batch by position and indices, an error with its shard, key and offset,
and a worker process's exception made to survive the trip to the consumer (``portable_error``)."""

from __future__ import annotations

import os
import pickle
import traceback
from collections.abc import Sequence
from typing import Any

from loaders.errors import SampleError

__all__ = ["describe_batch", "describe_error", "format_indices", "portable_error"]

_SHOWN_INDICES = 8


def describe_error(err: BaseException) -> str:
    """``"Type: message"`` plus, for a SampleError, where: shard, key, byte offset."""
    text = f"{type(err).__name__}: {err}"
    if isinstance(err, SampleError):
        where = [f"shard {err.shard!r}"] if err.shard else []
        where += [f"key {err.key!r}"] if err.key else []
        where += [f"offset {err.offset}"] if err.offset >= 0 else []
        if where:
            text += f" ({', '.join(where)})"
    return text


def format_indices(indices: Sequence[Any]) -> str:
    """A short list of sample indices for messages: the first few and a count."""
    shown = ", ".join(repr(i) for i in indices[:_SHOWN_INDICES])
    more = len(indices) - _SHOWN_INDICES
    return f"[{shown}, ... {more} more]" if more > 0 else f"[{shown}]"


def describe_batch(position: int, indices: Sequence[Any]) -> str:
    """``"batch 17 (indices [...])"``; ``"a batch"`` when the position is unknown (iterable datasets)."""
    what = f"batch {position}" if position >= 0 else "a batch"
    return f"{what} (indices {format_indices(indices)})" if indices else what


def portable_error(err: BaseException) -> BaseException:
    """``err`` with its traceback as a note if it survives pickling, else its class rebuilt from that text.

    For worker processes: their exceptions travel pickled, which drops the traceback and
    fails for exception classes that cannot be rebuilt from their args. Then, as torch
    does, ``type(err)(text)``; a RuntimeError with the text when even that will not pickle.
    """
    trace = "".join(traceback.format_exception(err)).rstrip()
    err.add_note(f"raised in worker process {os.getpid()}:\n{trace}")
    if _survives_pickling(err):
        return err
    try:
        rebuilt = type(err)(trace)
    except Exception:  # noqa: BLE001 - a constructor that wants other arguments
        return RuntimeError(trace)
    return rebuilt if _survives_pickling(rebuilt) else RuntimeError(trace)


def _survives_pickling(err: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:  # noqa: BLE001 - any pickling failure means no
        return False
    return True
