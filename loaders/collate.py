"""One batch: read its samples, set failures aside, collate into one preallocated tensor per field.

``default_collate`` is torch's ``default_collate`` (same containers, same leaf rules, same
output types) with one change for arrays and tensors: the batch is allocated once, at
its final size and dtype, and every sample is copied straight into it. uint8 images
stay uint8 ([B, H, W, C]); the float conversion belongs on the device, after the copy.

Where that batch lives:

- ``pin_memory=True``: page-locked CPU memory from ``torch.empty(..., pin_memory=True)``,
  so a thread worker's batch needs no second copy by a pin-memory thread. Torch's caching
  host allocator recycles pinned blocks and keeps one alive until the copies recorded on
  it have finished, so no private buffer pool is needed here.
- inside a DataLoader worker *process*: shared memory, as torch's own collate does, so
  handing the batch to the main process copies nothing.
- otherwise: ordinary CPU memory.

Reading (``fetch_samples``) never raises: a failing sample becomes a ``Skip`` or the
batch's ``failure``, carried in a ``BatchOutcome`` to the consumer, which decides on its
own thread (``raise_failure``, skip budget). ``BatchBuilder`` does both steps in threads
and the main thread; ``CollateGuard`` is the collate_fn handed to torch's worker processes.
"""

from __future__ import annotations

import functools
import os
import pickle
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

import numpy as np
import torch
import torch.utils.data
from torch.utils.data._utils.collate import collate, default_collate_fn_map
from torch.utils.data._utils.pin_memory import pin_memory as pin_nested

from loaders.errors import SampleError, WorkerError

__all__ = [
    "BatchBuilder",
    "BatchOutcome",
    "CollateGuard",
    "Fetched",
    "PinAfter",
    "Skip",
    "collate_outcome",
    "default_collate",
    "describe_batch",
    "describe_error",
    "fetch_samples",
    "pinned_collate",
    "portable_error",
    "raise_failure",
    "stack_into",
]

_SHOWN_INDICES = 8

_CollateMap = dict[type | tuple[type, ...], Callable[..., Any]]


def _allocate(shape: tuple[int, ...], dtype: torch.dtype, *, pin_memory: bool) -> torch.Tensor:
    """An uninitialised CPU tensor: pinned, else shared in a worker process, else plain."""
    if pin_memory:
        return torch.empty(shape, dtype=dtype, pin_memory=True)
    if torch.utils.data.get_worker_info() is not None:
        nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        # Torch's own collate allocates worker batches this way: share_memory_() on a
        # fresh tensor would copy it into shared memory once more.
        storage = torch.UntypedStorage._new_shared(nbytes)
        return torch.empty(0, dtype=dtype).set_(storage, 0, shape)
    return torch.empty(shape, dtype=dtype)


def _check_shapes(shapes: Sequence[tuple[int, ...]], kind: str) -> None:
    first = shapes[0]
    for i, shape in enumerate(shapes):
        if shape != first:
            raise SampleError(
                f"cannot batch {kind}s of different shapes: sample {i} of the batch has shape {shape}, "
                f"sample 0 has {first}; resize or crop in the dataset, or pass a collate_fn that pads"
            )


def stack_into(samples: Sequence[np.ndarray] | Sequence[torch.Tensor], *, pin_memory: bool = False) -> torch.Tensor:
    """Stack same-shape numpy arrays or CPU tensors into one new tensor [B, *sample shape].

    dtype is the samples' dtype (uint8 stays uint8); one copy per sample, no
    intermediate. ``pin_memory`` needs an accelerator (torch raises without one).
    Raises SampleError naming the sample whose shape differs from sample 0's.
    """
    first = samples[0]
    if isinstance(first, np.ndarray):
        _check_shapes([s.shape for s in samples], "array")
        dtype = _torch_dtype(first.dtype)
        if dtype is None:
            raise TypeError(f"cannot batch numpy arrays of dtype {first.dtype}: torch has no such dtype")
        out = _allocate((len(samples), *first.shape), dtype, pin_memory=pin_memory)
        np.stack(samples, axis=0, out=out.numpy())
        return out
    _check_shapes([tuple(s.shape) for s in samples], "tensor")
    out = _allocate((len(samples), *first.shape), first.dtype, pin_memory=pin_memory)
    return torch.stack(list(samples), dim=0, out=out)


@functools.lru_cache(maxsize=64)
def _torch_dtype(dtype: np.dtype) -> torch.dtype | None:
    """The torch dtype of a numpy dtype, or None for strings, objects and byte-swapped data."""
    try:
        return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    except (TypeError, ValueError):
        return None


def _collate_arrays(batch: Sequence[np.ndarray], *, collate_fn_map: _CollateMap, pin_memory: bool) -> Any:
    if _torch_dtype(batch[0].dtype) is None:
        # Strings, objects and dtypes torch lacks: torch's rules (and its error message).
        return default_collate_fn_map[np.ndarray](batch, collate_fn_map=collate_fn_map)
    return stack_into(batch, pin_memory=pin_memory)


def _collate_tensors(batch: Sequence[torch.Tensor], *, collate_fn_map: _CollateMap, pin_memory: bool) -> Any:
    first = batch[0]
    if first.device.type != "cpu" or first.is_nested or first.layout != torch.strided:
        return default_collate_fn_map[torch.Tensor](batch, collate_fn_map=collate_fn_map)
    return stack_into(batch, pin_memory=pin_memory)


def _pinned_result(fn: Callable[..., Any], batch: Sequence[Any], *, collate_fn_map: _CollateMap) -> Any:
    """Numbers -> a small tensor, pinned so the whole batch can be copied asynchronously."""
    result = fn(batch, collate_fn_map=collate_fn_map)
    return result.pin_memory() if isinstance(result, torch.Tensor) else result


def _build_map(pin_memory: bool) -> _CollateMap:
    mapping: _CollateMap = {}
    for key, fn in default_collate_fn_map.items():
        mapping[key] = functools.partial(_pinned_result, fn) if pin_memory else fn
    mapping[torch.Tensor] = functools.partial(_collate_tensors, pin_memory=pin_memory)
    mapping[np.ndarray] = functools.partial(_collate_arrays, pin_memory=pin_memory)
    return mapping


_MAPS: dict[bool, _CollateMap] = {False: _build_map(False), True: _build_map(True)}


def default_collate(samples: Sequence[Any], *, pin_memory: bool = False) -> Any:
    """Collate a list of samples into a batch, like ``torch.utils.data.default_collate``.

    Same containers (dict, namedtuple, tuple -> list, list) and leaves: Python ints ->
    int64 [B]; floats -> float64 [B]; str and bytes -> lists; numpy scalars -> tensors.
    Numeric numpy arrays and CPU tensors of one shape -> one tensor [B, *shape] of their
    own dtype (uint8 HWC images -> uint8 [B, H, W, C]), allocated once; see the module
    docstring for where it lives. ``pin_memory=True`` pins every tensor of the batch and
    needs an accelerator. Raises SampleError when arrays in one field differ in shape,
    TypeError (torch's) for samples it cannot batch.
    """
    return collate(samples, collate_fn_map=_MAPS[bool(pin_memory)])


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


@dataclass(frozen=True, slots=True)
class Skip:
    """A sample dropped by ``on_error="skip"``: its index and what went wrong (``describe_error``)."""

    index: Any
    error: str


@dataclass(slots=True)
class Fetched:
    """The samples read for one batch; ``failure`` set (and ``samples`` partial) when reading raised."""

    position: int
    indices: list[Any]
    samples: list[Any]
    skips: list[Skip] = field(default_factory=list)
    failure: BaseException | None = None
    failed_index: Any = None


def fetch_samples(dataset: Any, indices: Sequence[Any], *, position: int, skip_errors: bool) -> Fetched:
    """Read ``dataset[i]`` for each index (``__getitems__`` when defined), catching failures.

    With ``skip_errors`` a failing sample becomes a ``Skip`` (a failing ``__getitems__``
    is retried sample by sample to find which ones fail); without it the first failure
    stops the batch and is returned in ``failure``. Never raises ``Exception``.
    """
    indices = list(indices)
    getitems = getattr(dataset, "__getitems__", None)
    if callable(getitems):
        try:
            return Fetched(position, indices, list(getitems(indices)))
        except Exception as err:
            if not skip_errors:
                return Fetched(position, indices, [], failure=err)
    fetched = Fetched(position, indices, [])
    for index in indices:
        try:
            fetched.samples.append(dataset[index])
        except Exception as err:
            if not skip_errors:
                fetched.failure, fetched.failed_index = err, index
                return fetched
            fetched.skips.append(Skip(index, describe_error(err)))
    return fetched


@dataclass(slots=True)
class BatchOutcome:
    """What a worker hands back for one batch of the epoch.

    position: batch number in the epoch (-1 for iterable datasets). batch: the collated
    batch, or None when every sample was skipped or reading failed. indices: the
    sampler's indices of the batch. skips: samples dropped. failure (with failed_index
    when known): what the consumer re-raises as WorkerError. worker_id: who built it.
    """

    position: int
    batch: Any
    indices: list[Any]
    num_samples: int
    skips: list[Skip]
    failure: BaseException | None
    failed_index: Any
    worker_id: int

    def pin_memory(self) -> BatchOutcome:
        """Torch's pin-memory thread calls this: pin the batch, pass the rest through."""
        return replace(self, batch=pin_nested(self.batch))


def collate_outcome(
    fetched: Fetched, collate_fn: Callable[[Any], Any], *, auto_collation: bool, worker_id: int
) -> BatchOutcome:
    """Collate what was read into a BatchOutcome; a collate_fn failure becomes its ``failure``.

    ``auto_collation=False`` (``batch_size=None``): the batch is ``collate_fn(sample)`` of
    its single sample, as in the stock loader.
    """
    outcome = BatchOutcome(fetched.position, None, fetched.indices, len(fetched.samples), fetched.skips,
                           fetched.failure, fetched.failed_index, worker_id)
    if fetched.failure is not None or not fetched.samples:
        return outcome
    try:
        outcome.batch = collate_fn(fetched.samples if auto_collation else fetched.samples[0])
    except Exception as err:
        outcome.failure = err
    return outcome


def raise_failure(outcome: BatchOutcome, kind: str) -> NoReturn:
    """Raise the WorkerError for a failed batch, with the worker's exception as ``__cause__``."""
    err = outcome.failure or RuntimeError("no failure recorded")
    raise WorkerError(
        f"{kind} worker {outcome.worker_id} raised {describe_error(err)} while reading "
        f"{describe_batch(outcome.position, outcome.indices)}"
        + (f" at sample {outcome.failed_index!r}" if outcome.failed_index is not None else "")
    ) from err


@dataclass(frozen=True)
class BatchBuilder:
    """Reads and collates one batch in the calling thread: ``builder(worker_id, position, indices)``.

    What thread workers (and the main thread, with ``num_workers=0``) run; never raises
    ``Exception``, failures travel in the BatchOutcome.
    """

    dataset: Any
    collate_fn: Callable[[Any], Any]
    auto_collation: bool
    skip_errors: bool

    def __call__(self, worker_id: int, position: int, indices: list[Any]) -> BatchOutcome:
        fetched = fetch_samples(self.dataset, indices, position=position, skip_errors=self.skip_errors)
        return collate_outcome(fetched, self.collate_fn, auto_collation=self.auto_collation, worker_id=worker_id)


def portable_error(err: BaseException) -> BaseException:
    """``err`` with its traceback as a note if it survives pickling, else a RuntimeError with that text.

    For worker processes: their exceptions travel pickled, which drops the traceback and
    fails for exception classes that cannot be rebuilt from their args.
    """
    trace = "".join(traceback.format_exception(err)).rstrip()
    err.add_note(f"raised in worker process {os.getpid()}:\n{trace}")
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:  # any pickling failure: keep the text rather than lose the error
        return RuntimeError(trace)
    return err


@dataclass(frozen=True)
class CollateGuard:
    """The collate_fn handed to torch's workers: ``Fetched`` (map-style) or samples (iterable) -> BatchOutcome."""

    collate_fn: Callable[[Any], Any]
    auto_collation: bool

    def __call__(self, data: Any) -> BatchOutcome:
        info = torch.utils.data.get_worker_info()
        worker_id = info.id if info is not None else 0
        if not isinstance(data, Fetched):
            # Iterable dataset: torch already read the samples (the single sample without batching).
            data = Fetched(-1, [], list(data) if self.auto_collation else [data])
        outcome = collate_outcome(data, self.collate_fn, auto_collation=self.auto_collation, worker_id=worker_id)
        if outcome.failure is not None and info is not None:
            outcome.failure = portable_error(outcome.failure)
        return outcome


def pinned_collate(samples: Sequence[Any]) -> Any:
    """``default_collate(samples, pin_memory=True)`` as a plain function (picklable)."""
    return default_collate(samples, pin_memory=True)


@dataclass(frozen=True)
class PinAfter:
    """A user's collate_fn, then its tensors pinned (a copy, as torch's pin-memory thread makes)."""

    collate_fn: Callable[[Any], Any]

    def __call__(self, samples: Any) -> Any:
        return pin_nested(self.collate_fn(samples))
