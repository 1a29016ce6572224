"""A bounded pool of reusable host staging buffers, guarded by events.

A pageable CPU tensor cannot be copied to the GPU asynchronously: the copy is first
staged into page-locked (pinned) memory. Allocating pinned memory is slow (it locks pages
in the kernel), so staging buffers are kept in a pool keyed by (shape, dtype) and reused.

A buffer is in one of three states::

    free  --acquire()-->  lent  --release(buffer, event)-->  pending  --event done-->  free

A *pending* buffer is still being read by an asynchronous copy; it becomes free only when
that copy's event has completed (``event.query()``, or ``event.synchronize()`` on that
event alone when the pool must wait). Without CUDA the pool hands out ordinary CPU
tensors and the same state machine runs, so tests can observe reuse on any machine.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Protocol

import torch

from loaders.errors import ConfigError, LoaderError

__all__ = ["BufferKey", "Event", "PinnedBufferPool", "PoolStats"]

logger = logging.getLogger(__name__)

BufferKey = tuple[tuple[int, ...], torch.dtype]


class Event(Protocol):
    """What the pool needs of a completion event; ``torch.cuda.Event`` satisfies it."""

    def query(self) -> bool:
        """True once all work recorded before the event has completed."""
        ...

    def synchronize(self) -> None:
        """Block the calling host thread until the event has completed."""
        ...


@dataclass(frozen=True, slots=True)
class PoolStats:
    """Counters since the pool was created: ``hits`` reused a buffer, ``misses`` allocated
    one, ``waits`` blocked on a pending buffer's event, ``evictions`` dropped a free buffer
    of another key to stay within ``max_buffers``."""

    hits: int
    misses: int
    waits: int
    evictions: int


class PinnedBufferPool:
    """Reusable (pinned when CUDA is available) CPU buffers keyed by (shape, dtype).

    ``max_buffers`` bounds how many buffers the pool owns (free + lent + pending). Not
    thread-safe: one pool per producer thread.
    """

    def __init__(self, *, max_buffers: int = 8, pin_memory: bool | None = None) -> None:
        if isinstance(max_buffers, bool) or not isinstance(max_buffers, int) or max_buffers < 1:
            raise ConfigError(
                f"'max_buffers' must be a positive int (got {max_buffers!r} that is a {type(max_buffers).__name__})"
            )
        if pin_memory is not None and not isinstance(pin_memory, bool):
            raise ConfigError(
                f"'pin_memory' must be a bool or None (got {pin_memory!r} that is a {type(pin_memory).__name__})"
            )
        self.max_buffers = max_buffers
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self._free: dict[BufferKey, list[torch.Tensor]] = {}
        self._pending: deque[tuple[BufferKey, torch.Tensor, Event]] = deque()
        self._lent: dict[int, BufferKey] = {}  # id(buffer) -> key; the caller holds the tensor
        self._hits = self._misses = self._waits = self._evictions = 0

    @property
    def stats(self) -> PoolStats:
        """Reuse counters (see ``PoolStats``)."""
        return PoolStats(self._hits, self._misses, self._waits, self._evictions)

    @property
    def num_owned(self) -> int:
        """Buffers the pool owns: free + lent + pending."""
        return self.num_free + len(self._lent) + len(self._pending)

    @property
    def num_free(self) -> int:
        """Buffers ready to be handed out (pending ones whose event completed not counted
        until the next ``acquire`` or ``collect``)."""
        return sum(len(buffers) for buffers in self._free.values())

    @property
    def num_pending(self) -> int:
        """Released buffers whose copy may still be reading them."""
        return len(self._pending)

    def acquire(self, shape: tuple[int, ...] | torch.Size, dtype: torch.dtype) -> torch.Tensor:
        """A CPU buffer of ``shape`` and ``dtype`` (uninitialised), pinned when the pool pins.

        Order of preference: a free buffer of that key; a new one while under
        ``max_buffers``; a new one replacing a free buffer of another key; the oldest
        pending buffer once its event completes (blocks on that event only).
        """
        key: BufferKey = (tuple(shape), dtype)
        self.collect()
        buffer = self._take_free(key)
        if buffer is None:
            buffer = self._make_room(key)
        self._lent[id(buffer)] = key
        return buffer

    def release(self, buffer: torch.Tensor, event: Event | None = None) -> None:
        """Give ``buffer`` back; it is reused only once ``event`` (if any) has completed."""
        key = self._lent.pop(id(buffer), None)
        if key is None:
            raise LoaderError(
                f"buffer {tuple(buffer.shape)} {buffer.dtype} was not lent by this pool "
                "(released twice, or acquired from another pool)"
            )
        if event is None:
            self._free.setdefault(key, []).append(buffer)
        else:
            self._pending.append((key, buffer, event))

    def stage(self, tensor: torch.Tensor) -> torch.Tensor:
        """Copy a CPU ``tensor`` into a lent buffer of its shape and dtype and return the buffer.

        The caller releases it with the event of the copy that reads it.
        """
        buffer = self.acquire(tensor.shape, tensor.dtype)
        buffer.copy_(tensor)
        return buffer

    def collect(self) -> int:
        """Move pending buffers whose event has completed to the free lists; returns how many."""
        still_pending: deque[tuple[BufferKey, torch.Tensor, Event]] = deque()
        done = 0
        for key, buffer, event in self._pending:
            if event.query():
                self._free.setdefault(key, []).append(buffer)
                done += 1
            else:
                still_pending.append((key, buffer, event))
        self._pending = still_pending
        return done

    def clear(self) -> None:
        """Drop the free buffers (pending and lent ones stay tracked until released/done)."""
        self._free.clear()

    def _take_free(self, key: BufferKey) -> torch.Tensor | None:
        buffers = self._free.get(key)
        if not buffers:
            return None
        self._hits += 1
        return buffers.pop()

    def _make_room(self, key: BufferKey) -> torch.Tensor:
        if self.num_owned < self.max_buffers:
            return self._allocate(key)
        for other_key, buffers in self._free.items():
            if buffers:
                buffers.pop()  # evict: shapes changed, keep the memory bounded
                self._evictions += 1
                logger.debug("evicted a staging buffer of %s to make room for %s", other_key, key)
                return self._allocate(key)
        if self._pending:
            # Oldest first: it is the copy most likely to have finished already.
            pending_key, buffer, event = self._pending.popleft()
            event.synchronize()
            self._waits += 1
            if pending_key == key:
                self._hits += 1
                return buffer
            self._evictions += 1
            return self._allocate(key)
        raise LoaderError(
            f"all {self.max_buffers} staging buffers are lent and none was released; "
            f"release buffers after their copy is enqueued, or raise 'max_buffers'"
        )

    def _allocate(self, key: BufferKey) -> torch.Tensor:
        self._misses += 1
        shape, dtype = key
        return torch.empty(shape, dtype=dtype, pin_memory=self.pin_memory)
