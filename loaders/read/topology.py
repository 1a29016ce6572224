"""Where this process sits in a job: rank, world size, local rank, DataLoader worker, CPU budget.

The one module that reads ``torch.distributed``, torchrun's environment variables
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), the CPU affinity mask
and the cgroup CPU quota. Everything downstream takes a ``Topology`` value instead.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from loaders.errors import ConfigError
from loaders.validate import check_int

ENV_RANK = "RANK"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_LOCAL_RANK = "LOCAL_RANK"
ENV_LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"

# Module constants so tests can point them at fake files.
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class Topology:
    """Position of this process in a (possibly distributed) job.

    rank, world_size: global process index and count (one process per accelerator).
    local_rank, local_world_size: the same on this node; CPU budgets are split by
    ``local_world_size`` since the node's cores are shared by its processes.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    def __post_init__(self) -> None:
        for name, minimum in (("world_size", 1), ("rank", 0), ("local_world_size", 1), ("local_rank", 0)):
            object.__setattr__(self, name, check_int(name, getattr(self, name), minimum))
        if self.rank >= self.world_size:
            raise ConfigError(f"'rank' must be < world_size={self.world_size} (got {self.rank})")
        if self.local_rank >= self.local_world_size:
            raise ConfigError(
                f"'local_rank' must be < local_world_size={self.local_world_size} (got {self.local_rank})"
            )
        if self.local_world_size > self.world_size:
            raise ConfigError(
                f"'local_world_size' must be <= world_size={self.world_size} (got {self.local_world_size})"
            )

    @property
    def is_distributed(self) -> bool:
        """True when more than one process shares the dataset."""
        return self.world_size > 1

    @classmethod
    def detect(cls) -> Topology:
        """Read the topology of the calling process.

        In order: an initialised ``torch.distributed`` process group (local sizes from
        ``LOCAL_RANK``/``LOCAL_WORLD_SIZE``, else 0/1); torchrun's environment variables;
        else a single process. Raises ConfigError when the variables are malformed or
        only partly set.
        """
        local_rank = _env_int(ENV_LOCAL_RANK)
        local_world_size = _env_int(ENV_LOCAL_WORLD_SIZE)
        declared = _declared_rank()
        rank, world_size = (0, 1) if declared is None else declared[1:]
        try:
            return cls(
                rank=rank,
                world_size=world_size,
                local_rank=0 if local_rank is None else local_rank,
                local_world_size=1 if local_world_size is None else local_world_size,
            )
        except ConfigError as err:
            err.add_note(f"while reading {ENV_RANK}, {ENV_WORLD_SIZE}, {ENV_LOCAL_RANK}, {ENV_LOCAL_WORLD_SIZE}")
            raise


def _declared_rank() -> tuple[str, int, int] | None:
    """(where, rank, world size) as the environment states them: an initialised torch.distributed
    process group, else RANK and WORLD_SIZE; None when neither says anything."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return "torch.distributed", torch.distributed.get_rank(), torch.distributed.get_world_size()
    rank, world_size = _env_int(ENV_RANK), _env_int(ENV_WORLD_SIZE)
    if rank is None and world_size is None:
        return None
    if rank is None or world_size is None:
        missing = ENV_RANK if rank is None else ENV_WORLD_SIZE
        raise ConfigError(f"environment sets only one of {ENV_RANK}/{ENV_WORLD_SIZE} ({missing} is missing); "
                          "launch with torchrun or set both")
    return f"{ENV_RANK}/{ENV_WORLD_SIZE}", rank, world_size


def loader_topology(given: object) -> Topology:
    """The topology a DataLoader runs on: ``given`` (a dataset's own ``topology``) when it is a Topology,
    else the detected one.

    A launcher that passes rank and world size to the script (Horovod, a scheduler's own
    variables) without torch.distributed lets the dataset name them. Where the environment
    states them too (a process group, or RANK / WORLD_SIZE), both must agree on rank and
    world size: else ConfigError naming both, since ranks would otherwise read overlapping
    shares.
    """
    if not isinstance(given, Topology):
        return Topology.detect()
    declared = _declared_rank()
    if declared is not None and declared[1:] != (given.rank, given.world_size):
        where, rank, world_size = declared
        raise ConfigError(f"the dataset's topology (rank {given.rank} of world_size {given.world_size}) conflicts "
                          f"with {where} (rank {rank} of world_size {world_size}); give the dataset "
                          "topology=None to use the environment's, or make the two agree")
    return given


def _env_int(name: str) -> int | None:
    """The integer in environment variable ``name``, or None when it is unset or empty."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError as err:
        raise ConfigError(f"environment variable {name} must be an integer (got {text!r})") from err


def current_worker() -> tuple[int, int]:
    """``(worker_id, num_workers)`` of the calling DataLoader worker; ``(0, 1)`` in the main process."""
    info = torch.utils.data.get_worker_info()
    if info is None:
        return 0, 1
    return info.id, info.num_workers


def cpus_available() -> int:
    """CPU cores this process may use: the affinity mask, capped by a cgroup CPU quota.

    A container limited with ``--cpus=2`` on a 64-core host still sees 64 cores in its
    affinity mask; only the quota tells the truth. A fractional quota rounds up (1.5 CPUs
    can keep 2 threads partly busy). Always >= 1.
    """
    if hasattr(os, "sched_getaffinity"):
        cpus = len(os.sched_getaffinity(0))
    else:
        cpus = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, quota)
    return max(1, cpus)


def _cgroup_cpu_quota() -> int | None:
    """The tightest cgroup CPU quota on this process's cgroup path, rounded up, or None.

    cgroup v2: ``cpu.max`` ("max 100000" or "<quota_us> <period_us>") in the process's
    cgroup and each ancestor up to the root; v1: ``cpu/cpu.cfs_quota_us`` and
    ``cpu.cfs_period_us`` (quota -1 means none).
    """
    limits = [limit for path in _cgroup_v2_dirs() if (limit := _read_quota(path / "cpu.max")) is not None]
    v1 = CGROUP_ROOT / "cpu"
    v1_quota = _read_ints(v1 / "cpu.cfs_quota_us")
    v1_period = _read_ints(v1 / "cpu.cfs_period_us")
    if v1_quota and v1_period and v1_quota[0] > 0 and v1_period[0] > 0:
        limits.append(math.ceil(v1_quota[0] / v1_period[0]))
    return min(limits) if limits else None


def _cgroup_v2_dirs() -> list[Path]:
    """The process's cgroup v2 directory and its ancestors, deepest first, root last."""
    relative = ""
    try:
        for line in PROC_SELF_CGROUP.read_text().splitlines():
            if line.startswith("0::"):
                relative = line[3:].strip().strip("/")
    except OSError:
        relative = ""
    dirs = [CGROUP_ROOT]
    parts = [p for p in relative.split("/") if p and p != ".."]
    for depth in range(1, len(parts) + 1):
        dirs.append(CGROUP_ROOT.joinpath(*parts[:depth]))
    return dirs[::-1]


def _read_quota(path: Path) -> int | None:
    """Quota in whole CPUs (rounded up) from a cgroup v2 ``cpu.max`` file, or None."""
    try:
        fields = path.read_text().split()
    except OSError:
        return None
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota_us, period_us = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    if quota_us <= 0 or period_us <= 0:
        return None
    return math.ceil(quota_us / period_us)


def _read_ints(path: Path) -> list[int] | None:
    try:
        return [int(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return None


def default_num_workers(topology: Topology | None = None) -> int:
    """Default DataLoader ``num_workers`` per rank.

    Rule: ``per_rank = cpus_available() // local_world_size``; with more than 2 cores per
    rank, one is left to the main process (``per_rank - 1``), else all go to workers.
    Why: the main process runs the training loop, receives batches and issues H2D copies,
    which keeps about one core busy once many workers feed it; with 1-2 cores per rank,
    reserving one would halve decode throughput while the main process mostly sleeps in
    CUDA synchronisation. 0 (load in the main process) when ranks outnumber cores.
    ``topology`` None -> ``Topology.detect()``.
    """
    topo = Topology.detect() if topology is None else topology
    per_rank = cpus_available() // topo.local_world_size
    return per_rank - 1 if per_rank > 2 else max(0, per_rank)
