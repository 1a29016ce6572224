"""Collate: samples -> one batch, each array field in one preallocated tensor.

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

A field whose samples are decode plans (``loaders.read.decode_plan.EncodedImage``, what decode
transforms return with ``decode="device"``) becomes one ``loaders.batch_decode.EncodedBatch``:
its JPEG bytes in one buffer allocated the same way, the plan beside it.

Reading samples is ``loaders.loader.fetch``; outcomes per batch ``loaders.loader.batch_outcome``; pinning
``loaders.loader.pinning``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import torch
import torch.utils.data
from torch.utils.data._utils.collate import collate, default_collate_fn_map

from loaders.batch_decode.encoded_batch import pack_encoded
from loaders.errors import BatchShapeError
from loaders.read.decode_plan import EncodedImage

__all__ = ["default_collate", "stack_into"]

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
        return torch.empty(0, dtype=dtype).set_(storage, 0, shape, _contiguous_strides(shape))
    return torch.empty(shape, dtype=dtype)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides, in elements, of a C-contiguous tensor of ``shape`` (as torch gives a new one)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _check_shapes(shapes: Sequence[tuple[int, ...]], kind: str) -> None:
    first = shapes[0]
    for i, shape in enumerate(shapes):
        if shape != first:
            raise BatchShapeError(
                f"cannot batch {kind}s of different shapes: sample {i} of the batch has shape {shape}, "
                f"sample 0 has {first}; resize or crop in the dataset, or pass a collate_fn that pads"
            )


def stack_into(samples: Sequence[np.ndarray] | Sequence[torch.Tensor], *, pin_memory: bool = False) -> torch.Tensor:
    """Stack same-shape numpy arrays or CPU tensors into one new tensor [B, *sample shape].

    dtype is the samples' dtype (uint8 stays uint8); one copy per sample, no
    intermediate. ``pin_memory`` needs an accelerator (torch raises without one).
    Raises BatchShapeError (a SampleError and, like torch's, a RuntimeError) naming the
    sample whose shape differs from sample 0's.
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
    tensors = cast(Sequence[torch.Tensor], samples)  # the arrays returned above
    _check_shapes([tuple(t.shape) for t in tensors], "tensor")
    out = _allocate((len(tensors), *first.shape), first.dtype, pin_memory=pin_memory)
    return torch.stack(list(tensors), dim=0, out=out)


@functools.lru_cache(maxsize=64)
def _torch_dtype(dtype: np.dtype) -> torch.dtype | None:
    """The torch dtype of a numpy dtype, or None for strings, objects and byte-swapped data."""
    try:
        return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    except (TypeError, ValueError):
        return None


def _collate_arrays(batch: Sequence[np.ndarray], *, collate_fn_map: _CollateMap, pin_memory: bool) -> Any:
    dtype = batch[0].dtype
    if _torch_dtype(dtype) is None or any(array.dtype != dtype for array in batch):
        # Strings, objects and dtypes torch lacks: torch's rules (and its error message).
        return default_collate_fn_map[np.ndarray](batch, collate_fn_map=collate_fn_map)
    return stack_into(batch, pin_memory=pin_memory)


def _collate_tensors(batch: Sequence[torch.Tensor], *, collate_fn_map: _CollateMap, pin_memory: bool) -> Any:
    first = batch[0]
    if (first.device.type != "cpu" or first.is_nested or first.layout != torch.strided
            or any(t.dtype != first.dtype or t.requires_grad for t in batch)):
        # Mixed dtypes (torch promotes them) and autograd inputs (no out= allowed): torch's way.
        result = default_collate_fn_map[torch.Tensor](batch, collate_fn_map=collate_fn_map)
        return result.pin_memory() if pin_memory and result.device.type == "cpu" else result
    return stack_into(batch, pin_memory=pin_memory)


def _collate_encoded(batch: Sequence[EncodedImage], *, collate_fn_map: _CollateMap, pin_memory: bool) -> Any:
    return pack_encoded(batch, lambda shape, dtype: _allocate(shape, dtype, pin_memory=pin_memory))


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
    mapping[EncodedImage] = functools.partial(_collate_encoded, pin_memory=pin_memory)
    return mapping


_MAPS: dict[bool, _CollateMap] = {False: _build_map(False), True: _build_map(True)}


def default_collate(samples: Sequence[Any], *, pin_memory: bool = False) -> Any:
    """Collate a list of samples into a batch, like ``torch.utils.data.default_collate``.

    Same containers (dict, namedtuple, tuple -> list, list) and leaves: Python ints ->
    int64 [B]; floats -> float64 [B]; str and bytes -> lists; numpy scalars -> tensors.
    Numeric numpy arrays and CPU tensors of one shape -> one tensor [B, *shape] of their
    own dtype (uint8 HWC images -> uint8 [B, H, W, C]), allocated once; see the module
    docstring for where it lives. ``pin_memory=True`` pins every tensor of the batch and
    needs an accelerator. Mixed dtypes and tensors that require grad are collated by
    torch's rules. Raises BatchShapeError (a RuntimeError, as torch's) when arrays in one
    field differ in shape, TypeError (torch's) for samples it cannot batch.
    """
    return collate(samples, collate_fn_map=_MAPS[bool(pin_memory)])


