"""Host-to-device prefetch: copy batches ahead of use on a side CUDA stream.

Timeline with ``depth=2`` while the consumer holds batch k (one CUDA device)::

    copy stream:      [copy k+1][transform k+1][copy k+2][transform k+2]
    consumer stream:  [step k ................................][wait ev k+1][step k+1 ...

Each batch gets one event, recorded on the copy stream after its copy and its
``transform``; the consumer's stream waits on that event only (no device-wide
synchronize, no host sync in the path). Every tensor handed over gets
``record_stream(consumer_stream)`` so the caching allocator does not reuse its memory
while the consumer's kernels may still read it.

Pageable CPU tensors go through a staging buffer from a ``PinnedBufferPool`` (an
asynchronous copy needs page-locked memory); the buffer returns to the pool once the
event of the copy that reads it has completed. Pinned inputs are copied directly: torch's
caching host allocator already keeps a pinned block alive until its recorded copy ends
(it does not stop a producer that writes into the same tensor again: hand over fresh ones).
Inputs already on the device were written on the consumer's stream: the copy stream waits
for that stream (captured outside the copy stream's scope) and records them as its own use.

Without CUDA the same control flow runs with no-op stream and event operations
(``_HostStreams``), staging included, so the logic is tested on any machine.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

import torch

from loaders.errors import ConfigError
from loaders.loader.buffers import Event, PinnedBufferPool

__all__ = ["DevicePrefetcher", "map_tensors", "to_device"]

T = TypeVar("T")


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor in a nested dict/list/tuple/namedtuple; other leaves pass through.

    Containers keep their type (namedtuple, OrderedDict, list subclass); a mapping type
    that cannot be rebuilt from a dict becomes a plain dict. Written here rather than
    using ``torch.utils._pytree``, which is private API.
    """
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        items = {key: map_tensors(value, fn) for key, value in batch.items()}
        mapping_type: Any = type(batch)  # a dict subclass, an OrderedDict, or a Mapping of the user's
        try:
            return mapping_type(items)
        except TypeError:
            return items
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(map_tensors(value, fn) for value in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_tensors(value, fn) for value in batch)
    return batch


def _tensors_in(batch: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_tensors(batch, found.append)
    return found


class _Streams(Protocol):
    """The stream and event operations the prefetcher needs: CUDA or no-op."""

    def copy_scope(self) -> contextlib.AbstractContextManager[Any]:
        """Context in which copies and the transform are enqueued (the side stream)."""
        ...

    def record(self) -> Event:
        """An event marking the end of the work enqueued so far in ``copy_scope``."""
        ...

    def hand_over(self, event: Event, tensors: list[torch.Tensor]) -> None:
        """Make the consumer's stream wait for ``event`` and mark ``tensors`` as used by it."""
        ...

    def wait_for_consumer(self, tensors: list[torch.Tensor]) -> None:
        """Order the side stream after the work enqueued so far on the consumer's stream,
        which wrote ``tensors`` (inputs already on the device), and mark them as used by
        the side stream. Called outside ``copy_scope``, where the consumer's stream is current."""
        ...


class _DoneEvent:
    """A host event: the copy it marks was synchronous, so it is always complete."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class _HostStreams:
    """No-op streams for CPU and devices without CUDA streams: copies run synchronously."""

    def copy_scope(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def record(self) -> Event:
        return _DoneEvent()

    def hand_over(self, event: Event, tensors: list[torch.Tensor]) -> None:
        event.synchronize()

    def wait_for_consumer(self, tensors: list[torch.Tensor]) -> None:
        return None


class _CudaStreams:
    """A dedicated copy stream on ``device``; the consumer is the current stream at hand-over."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.copy_stream = torch.cuda.Stream(device)

    def copy_scope(self) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(self.copy_stream)

    def record(self) -> Event:
        event = torch.cuda.Event()
        event.record(self.copy_stream)
        return event

    def hand_over(self, event: Event, tensors: list[torch.Tensor]) -> None:
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(event)  # type: ignore[arg-type]  # a torch.cuda.Event: the one this class records
        for tensor in tensors:
            if tensor.is_cuda:
                tensor.record_stream(consumer)

    def wait_for_consumer(self, tensors: list[torch.Tensor]) -> None:
        self.copy_stream.wait_stream(torch.cuda.current_stream(self.device))
        for tensor in tensors:
            # The consumer may drop its reference while the side stream still reads the
            # tensor: keep its block from being reused before that work ends.
            if tensor.is_cuda:
                tensor.record_stream(self.copy_stream)


@dataclass(slots=True)
class _InFlight:
    """One batch whose copy (and transform) is enqueued; ``event`` marks its end."""

    batch: Any
    event: Event


class DevicePrefetcher(Generic[T]):
    """Copies batches to ``device`` ahead of use on a side CUDA stream; ``depth`` batches in flight.

    batches: an iterable of nested dict/list/tuple/namedtuple structures of tensors
        (typically uint8 [B, H, W, C] CPU images and int64 [B] labels); other leaves pass
        through unchanged.
    device: target device. CUDA uses a side stream and events; any other device copies
        synchronously through the same code path.
    depth: batches pulled from ``batches`` and enqueued ahead of the one the consumer
        holds (>= 0; 0 copies on demand). Device memory holds ``depth + 1`` batches, and
        one more while ``next()`` runs if the consumer still holds the previous batch.
    transform: called on each batch once it is on the device, on the copy stream (for
        example an ``Augment``), so it overlaps the consumer's work on the previous batch.
    non_blocking: asynchronous host-to-device copies (needs pinned memory: pageable
        tensors are staged through ``pool``).
    pool: staging buffers for pageable CPU tensors (default: a private pool of 8).
    stage: stage pageable CPU tensors through ``pool`` before copying. Default: only when
        the device is CUDA (asynchronous copies need pinned memory); for a CPU device
        tensors already there pass through without a copy. ``stage=True`` on the CPU runs
        the CUDA path's buffer logic, which the tests use.

    Constructing starts nothing; iterating pulls from ``batches``. Exceptions raised by
    ``batches`` or ``transform`` reach the consumer unchanged, after the batches that
    preceded the failure. ``close()``, leaving a ``with`` block or breaking out of the
    loop stops the source iterator (its ``close()`` is called if it has one).
    """

    def __init__(
        self,
        batches: Iterable[T],
        device: str | torch.device,
        *,
        depth: int = 2,
        transform: Callable[[Any], Any] | None = None,
        non_blocking: bool = True,
        pool: PinnedBufferPool | None = None,
        stage: bool | None = None,
    ) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ConfigError(f"'depth' must be a non-negative int (got {depth!r} that is a {type(depth).__name__})")
        if transform is not None and not callable(transform):
            raise ConfigError(
                f"'transform' must be callable or None (got {transform!r} that is a {type(transform).__name__})"
            )
        self.device = _resolve_device(device)
        self.depth = depth
        self.transform = transform
        self.non_blocking = bool(non_blocking)
        self.stage = self.device.type == "cuda" if stage is None else bool(stage)
        self.pool = pool if pool is not None else PinnedBufferPool(pin_memory=self.device.type == "cuda")
        self._batches = batches
        self._streams: _Streams | None = None  # created on first iteration: constructors start nothing
        # Told the host seconds each batch's copies took to enqueue (the loader's accounting), if set.
        self.on_copied: Callable[[float], None] | None = None
        self._active: weakref.ref[Generator[T, None, None]] | None = None

    def __iter__(self) -> Iterator[T]:
        self._close_active()
        if self._streams is None:
            self._streams = _CudaStreams(self.device) if self.device.type == "cuda" else _HostStreams()
        generator = self._iterate(self._streams)
        # A weak reference, so that breaking out of a for loop frees the generator and
        # its finally block closes the source at once (CPython reference counting).
        self._active = weakref.ref(generator)
        return generator

    def close(self) -> None:
        """Stop the current iteration and close the source iterator if it has ``close()``."""
        self._close_active()
        # Only a one-shot iterator is ours to close; an iterable (a DataLoader) may be reused.
        closer = getattr(self._batches, "close", None)
        if isinstance(self._batches, Iterator) and callable(closer):
            closer()

    def __enter__(self) -> DevicePrefetcher[T]:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _close_active(self) -> None:
        generator = self._active() if self._active is not None else None
        self._active = None
        if generator is not None:
            generator.close()

    def _iterate(self, streams: _Streams) -> Generator[T, None, None]:
        source = iter(self._batches)
        in_flight: deque[_InFlight] = deque()
        failure: Exception | None = None
        try:
            while True:
                while failure is None and len(in_flight) <= self.depth:
                    try:
                        batch = next(source)
                    except StopIteration:
                        break
                    except Exception as err:  # noqa: BLE001 - surfaces after the batches already in flight
                        failure = err
                        break
                    try:
                        in_flight.append(self._enqueue(batch, streams))
                    except Exception as err:  # noqa: BLE001 - a copy or the transform failed: raised in turn
                        failure = err
                if not in_flight:
                    if failure is not None:
                        raise failure
                    return
                ready = in_flight.popleft()
                streams.hand_over(ready.event, _tensors_in(ready.batch))
                yield ready.batch
        finally:
            closer = getattr(source, "close", None)
            if callable(closer):
                closer()

    def _enqueue(self, batch: Any, streams: _Streams) -> _InFlight:
        on_device = [t for t in _tensors_in(batch) if t.device == self.device]
        if on_device:
            # Inputs already on the device were written on the consumer's stream. Before
            # copy_scope: inside it the current stream is the copy stream itself, and
            # waiting on it would order nothing.
            streams.wait_for_consumer(on_device)
        with streams.copy_scope():
            start = time.perf_counter()
            moved = map_tensors(batch, lambda t: self._copy(t, streams))
            if self.on_copied is not None:
                self.on_copied(time.perf_counter() - start)
            if self.transform is not None:
                moved = self.transform(moved)
            return _InFlight(moved, streams.record())

    def _copy(self, tensor: torch.Tensor, streams: _Streams) -> torch.Tensor:
        if self.stage and tensor.device.type == "cpu" and not tensor.is_pinned():
            buffer = self.pool.stage(tensor)
            try:
                return buffer.to(self.device, non_blocking=self.non_blocking, copy=True)
            finally:
                # One event per staged copy, so the buffer is back in the pool as soon as
                # this copy ends and a batch with more tensors than the pool holds still fits.
                self.pool.release(buffer, streams.record())
        if tensor.device == self.device:
            return tensor
        return tensor.to(self.device, non_blocking=self.non_blocking)


def to_device(batches: Iterable[T], device: str | torch.device, **kwargs: Any) -> DevicePrefetcher[T]:
    """``DevicePrefetcher(batches, device, **kwargs)``: prefetch ``batches`` onto ``device``."""
    return DevicePrefetcher(batches, device, **kwargs)


def _resolve_device(device: str | torch.device) -> torch.device:
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ConfigError(
            f"'device' must be a torch device or its name (got {device!r} that is a {type(device).__name__})"
        ) from err
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"'device' is {device!r} but CUDA is not available; use device='cpu'")
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved
