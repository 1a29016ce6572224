"""Where this process sits in a job: rank, world size, local rank, DataLoader worker, CPU budget.

The one module that reads ``torch.distributed`` and torchrun's environment variables
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``). Everything downstream takes a
``Topology`` value instead. The CPU budget is ``cpus_available`` (``dataprep.cpus``: the affinity
mask capped by the cgroup quota, the one count dataprep's ``--workers`` uses too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from dataprep.cpus import cpus_available
from loaders.errors import ConfigError
from loaders.validate import check_int

ENV_RANK = "RANK"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_LOCAL_RANK = "LOCAL_RANK"
ENV_LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"


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
