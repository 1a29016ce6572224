"""A primary pass's workers, replaceable between two batches: how a tuned worker count or type takes effect mid-epoch.

Every worker backend builds the jobs it pulls from an iterator and yields their outcomes in
order. The batch source hands out jobs lazily and in order of position, and a job says which
samples a batch holds: which worker builds it changes nothing in it. So a ``Relay`` feeds the
backend through a ``Gate``; ``request_swap()`` closes the gate, the backend builds what it
already took and its run ends; the relay then asks the pool for workers of the new settings
(``WorkerPool.replace``) and runs them on the rest of the same jobs. No job is pulled twice or
skipped, so the batches and their order (and the resume state, which counts batches handed
over) are those of a run with fixed settings. An iterable dataset (jobs None) is never
swapped: how it is split between workers is its own code's.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from loaders.loader.batch_outcome import BatchOutcome
from loaders.loader.batch_source import Job

if TYPE_CHECKING:
    from loaders.loader.pool import WorkerPool, Workers

__all__ = ["Gate", "Relay"]


class Gate:
    """The jobs iterator as one backend run sees it: it ends when ``closed`` (the rest stays for the next)."""

    def __init__(self, jobs: Iterator[Job]) -> None:
        self._jobs = jobs
        self.closed = False
        self.exhausted = False

    def __iter__(self) -> Gate:
        return self

    def __next__(self) -> Job:
        if self.closed:
            raise StopIteration
        try:
            return next(self._jobs)
        except StopIteration:
            self.exhausted = True
            raise


class Relay:
    """The workers of one primary pass (``current``), replaced between batches on ``request_swap()``."""

    def __init__(self, pool: WorkerPool, workers: Workers) -> None:
        self.current = workers
        self._pool = pool
        self._gate: Gate | None = None
        self._swap = False

    @property
    def handles(self) -> list[Any]:
        return list(getattr(self.current, "handles", ()))

    @property
    def ready_count(self) -> int:
        """Batches built and not yet handed on (0 where the backend cannot tell)."""
        return int(getattr(self.current, "ready_count", 0))

    def request_swap(self) -> None:
        """Replace the workers by the pool's current settings after the batches already requested."""
        self._swap = True
        if self._gate is not None:
            self._gate.closed = True

    def run(self, jobs: Iterable[Job] | None, epoch: int) -> Generator[BatchOutcome, None, None]:
        if jobs is None:
            yield from self.current.run(None, epoch)
            return
        pending = iter(jobs)
        while True:
            if self._swap:
                self._swap = False
                self.current = self._pool.replace(self.current)
            gate = self._gate = Gate(pending)
            yield from self.current.run(gate, epoch)
            if gate.exhausted or not gate.closed:
                return
