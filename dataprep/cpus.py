"""The CPU cores this process may use, counted one way for dataprep and loaders: the affinity mask, capped by
the cgroup CPU quota.

A container started with ``--cpus=4`` on a 64-core node sees 64 cores in its affinity mask;
only the quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``) tells
the truth. ``dataprep shard --workers`` defaults to this count and ``loaders`` sizes its
workers from it (``loaders.read.topology.default_num_workers``). It lives at the top of
``dataprep``, beside ``errors``: it imports nothing of either package, and loaders may
import it (``tools/review/layers.py``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["CGROUP_ROOT", "PROC_SELF_CGROUP", "cpus_available"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


def cpus_available(*, cgroup_root: Path | None = None, proc_cgroup: Path | None = None) -> int:
    """CPU cores this process may use: the affinity mask (else ``os.cpu_count()``), capped by a cgroup CPU quota.

    A fractional quota rounds up (1.5 CPUs can keep 2 threads partly busy). Always >= 1.
    ``cgroup_root`` (default ``/sys/fs/cgroup``) and ``proc_cgroup`` (default ``/proc/self/cgroup``,
    which names the process's cgroup v2 path) let a test point the count at a fake tree.
    """
    if hasattr(os, "sched_getaffinity"):
        cpus = len(os.sched_getaffinity(0))
    else:  # not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root or CGROUP_ROOT, proc_cgroup or PROC_SELF_CGROUP)
    if quota is not None:
        cpus = min(cpus, quota)
    return max(1, cpus)


def cgroup_cpu_quota(root: Path, proc_cgroup: Path) -> int | None:
    """The tightest cgroup CPU quota on this process's cgroup path under ``root``, in whole CPUs rounded up; None
    when there is none.

    cgroup v2: ``cpu.max`` ("max 100000" or "<quota_us> <period_us>") in the process's cgroup
    (named by the ``0::`` line of ``proc_cgroup``) and each ancestor up to ``root``; v1:
    ``cpu/cpu.cfs_quota_us`` and ``cpu/cpu.cfs_period_us`` (quota -1 means none).
    """
    limits = [limit for path in _cgroup_v2_dirs(root, proc_cgroup) if (limit := _read_quota(path / "cpu.max"))]
    v1_quota = _read_ints(root / "cpu" / "cpu.cfs_quota_us")
    v1_period = _read_ints(root / "cpu" / "cpu.cfs_period_us")
    if v1_quota and v1_period and v1_quota[0] > 0 and v1_period[0] > 0:
        limits.append(math.ceil(v1_quota[0] / v1_period[0]))
    return min(limits) if limits else None


def _cgroup_v2_dirs(root: Path, proc_cgroup: Path) -> list[Path]:
    """The process's cgroup v2 directory and its ancestors, deepest first, ``root`` last."""
    relative = ""
    try:
        for line in proc_cgroup.read_text().splitlines():
            if line.startswith("0::"):
                relative = line[3:].strip().strip("/")
    except OSError:
        relative = ""
    parts = [p for p in relative.split("/") if p and p != ".."]
    return [root.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


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
