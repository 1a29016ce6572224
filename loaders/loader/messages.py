"""What failure messages name: a batch by position and indices, an error with its shard, key and offset,
and a worker process's exception made to survive the trip to the consumer (``portable_error``); and what
torch's errors say of worker processes (``dead_pids``, ``is_receive_error``)."""

from __future__ import annotations

import os
import pickle
import re
import traceback
from collections.abc import Sequence
from typing import Any

from loaders.errors import SampleError

__all__ = ["dead_pids", "describe_batch", "describe_error", "format_indices", "is_receive_error", "portable_error"]

_SHOWN_INDICES = 8
# Torch names a dead worker three ways: "(pid(s) 1, 2) exited unexpectedly" (its status check),
# "(pid 1) exited unexpectedly with exit code 3" and "(pid 1) is killed by signal: Killed" (SIGCHLD).
_DEAD = re.compile(r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\) (?:exited unexpectedly|is killed by signal)")
# Where a batch's shared memory is fetched from the worker that sent it, in the receiving process:
# an error raised there means the sender went away while its batch was in transit.
_RECEIVE_FILES = tuple(os.path.join(*parts) for parts in (("multiprocessing", "resource_sharer.py"),
                                                           ("multiprocessing", "reduction.py"),
                                                           ("torch", "multiprocessing", "reductions.py")))


def dead_pids(text: str) -> set[int] | None:
    """The pids a torch error message names as dead workers; None when it is not about one."""
    found = _DEAD.search(text)
    return {int(pid) for pid in found.group(1).split(",")} if found else None


def is_receive_error(err: BaseException) -> bool:
    """Whether ``err`` was raised while fetching a received batch's shared memory from its sender."""
    return any(frame.f_code.co_filename.endswith(_RECEIVE_FILES) for frame, _ in traceback.walk_tb(err.__traceback__))


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
