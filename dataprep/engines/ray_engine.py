"""``--engine ray``: a plan's range tasks (``dataprep.engines.range_tasks``) as Ray Core tasks (``RayEngine``).

The driver connects to a running cluster (``--address``, or ``RAY_ADDRESS``), or starts
a local one that it shuts down at the end; if Ray is already initialised in this
process it is used as it is. Each range is one task of one CPU; a task whose worker
process or node dies is run again by Ray (``TASK_RETRIES``), which is safe because a
range task writes into a folder of its own attempt and only the driver publishes the
attempt whose result it got (``dataprep.engines.range_driver``: a stale or duplicate attempt
changes nothing); so is a task whose writing child process died while no input was to
blame. Ray is optional: without it ``--engine ray`` is a usage error that says how to
install it.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType, TracebackType
from typing import Any, TypeVar

from dataprep.plan.checkpoint import Checkpoint
from dataprep.errors import DataprepError, RangeTaskError, UsageError, WorkerCrashError
from dataprep.engines.range_driver import check_probes, run_ranges
from dataprep.engines.range_tasks import PROBE_DIR, probe_node
from dataprep.engines.progress import ProgressLine
from dataprep.engines.context import RunContext, RunOutcome
from dataprep.output.store import OutputStore

log = logging.getLogger(__name__)

RAY_INSTALL_HINT = "pip install 'shardfeed[ray]' (or: pip install 'ray>=2.40')"
TASK_RETRIES = 3
PROBE_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 10.0
WAIT_INTERVAL_S = 30.0

T = TypeVar("T")
R = TypeVar("R")


def import_ray() -> ModuleType:
    """The ``ray`` module, or a ``UsageError`` saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise UsageError(f"--engine ray needs Ray, which is not installed here: {RAY_INSTALL_HINT}") from err
    return ray


def check_reachable(address: str | None) -> None:
    """Fail fast (``UsageError``) when ``--address`` names a host:port that does not answer.

    ``ray.init`` would wait minutes for a wrong address; ``auto`` and None are left to Ray.
    """
    if address is None or address == "auto":
        return
    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--address {address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        raise UsageError(f"--address {address!r}: nothing answers at {host}:{port} ({err}); start the cluster with "
                         "`ray start --head` (its output prints the address), or leave out --address for a local "
                         "cluster") from err


class RayEngine:
    """``--engine ray``: every range not yet done as a Ray task (``range_driver.run_ranges``).

    address: the cluster (``--address``; None: ``RAY_ADDRESS``, else a new local cluster).
    """

    def __init__(self, address: str | None) -> None:
        self.address = address

    def check(self) -> None:
        """Usage errors (how to install Ray, a wrong ``--address``) before anything is written."""
        import_ray()
        check_reachable(self.address)

    def run(self, ctx: RunContext, checkpoint: Checkpoint, progress: ProgressLine) -> RunOutcome:
        with RayExecutor(self.address) as executor:
            return run_ranges(ctx, checkpoint, progress, executor)


class RayExecutor:
    """Runs tasks on a Ray cluster; a context manager (``__enter__`` connects, ``__exit__`` lets go)."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self._ray: Any = None
        self._started = False

    def __enter__(self) -> RayExecutor:
        ray = import_ray()
        if not ray.is_initialized():
            try:
                ray.init(address=self.address, include_dashboard=False, logging_level=logging.WARNING)
            except (ConnectionError, ValueError, RuntimeError) as err:
                raise UsageError(f"cannot connect to the Ray cluster at --address {self.address!r}: {err}; "
                                 "start one with `ray start --head`, or leave out --address for a local one") from err
            self._started = True
        self._ray = ray
        log.info("on Ray %s: %s CPUs in %d nodes", ray.__version__, ray.cluster_resources().get("CPU", 0),
                 sum(1 for n in ray.nodes() if n.get("Alive")))
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False

    def map_unordered(self, fn: Callable[[T], R], tasks: list[T]) -> Iterator[R]:
        """``fn(task)`` for every task as a Ray task, yielded as each completes."""
        ray = self._ray
        # A worker process or node that dies is retried by Ray; so is a task whose forked writing
        # child died of something other than an input (WorkerCrashError: e.g. the OOM killer).
        remote = ray.remote(num_cpus=1, max_retries=TASK_RETRIES, retry_exceptions=[WorkerCrashError])(fn)
        pending = {remote.remote(task): task for task in tasks}
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_INTERVAL_S)
                for ref in ready:
                    task = pending.pop(ref)
                    yield self._get(ref, task)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    def _get(self, ref: Any, task: Any) -> Any:
        ray = self._ray
        try:
            return ray.get(ref)
        except DataprepError:  # raised in the task (Ray's error class derives from it): usage, format ...
            raise
        except ray.exceptions.RayError as err:
            what = f"range {getattr(task, 'index', '?')}"
            raise RangeTaskError(f"{what} failed on the Ray cluster after {TASK_RETRIES} retries: {err}; "
                                 "rerun the same command to resume from the ranges completed") from err

    def check_shared(self, store: OutputStore) -> None:
        """One probe task per alive node: each must see the driver's file, and the driver each node's.

        For OUT in object storage this says that every node reaches the store (credentials, endpoint).
        """
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self._ray
        token = uuid.uuid4().hex
        store.write_bytes(f"{PROBE_DIR}/driver", token.encode())
        probe = ray.remote(num_cpus=0, max_retries=TASK_RETRIES)(probe_node)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        refs = [(n, probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                 .remote(store.describe(), token)) for n in nodes]
        answers = []
        for node, ref in refs:
            label = f"{node.get('NodeManagerAddress', '?')} (id {node['NodeID'][:12]})"
            try:
                name, seen = ray.get(ref, timeout=PROBE_TIMEOUT_S)
            except ray.exceptions.GetTimeoutError as err:
                raise UsageError(f"node {label} did not run the probe of OUT within {PROBE_TIMEOUT_S:.0f} s; "
                                 "is it alive and does it have shardfeed installed?") from err
            answers.append((label, name, seen))
        check_probes(store, token, answers)
