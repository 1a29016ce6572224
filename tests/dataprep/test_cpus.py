"""``dataprep.cpus.cpus_available``: the affinity mask capped by the cgroup quota, read from a fake cgroup tree
passed as a parameter (the one count of dataprep's ``--workers`` and of loaders' workers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dataprep.cpus import cpus_available


@pytest.fixture
def cgroup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, Path]:
    """(root, proc file): an empty cgroup tree, the process at its root, 16 CPUs in the affinity mask."""
    root = tmp_path / "cgroup"
    root.mkdir()
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("0::/\n")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    return root, proc


def _count(cgroup: tuple[Path, Path]) -> int:
    return cpus_available(cgroup_root=cgroup[0], proc_cgroup=cgroup[1])


def test_no_quota_leaves_the_affinity_mask(cgroup: tuple[Path, Path]) -> None:
    (cgroup[0] / "cpu.max").write_text("max 100000\n")
    assert _count(cgroup) == 16


@pytest.mark.parametrize(("cpu_max", "expected"), [("400000 100000", 4), ("150000 100000", 2), ("5000 100000", 1)])
def test_a_cgroup_v2_quota_caps_the_count_rounded_up(cgroup: tuple[Path, Path], cpu_max: str, expected: int) -> None:
    (cgroup[0] / "cpu.max").write_text(cpu_max + "\n")
    assert _count(cgroup) == expected


def test_the_tightest_quota_on_the_cgroup_path_wins(cgroup: tuple[Path, Path]) -> None:
    root, proc = cgroup
    (root / "cpu.max").write_text("800000 100000\n")
    nested = root / "job" / "step"
    nested.mkdir(parents=True)
    (nested / "cpu.max").write_text("300000 100000\n")
    proc.write_text("12:cpu:/ignored\n0::/job/step\n")
    assert _count(cgroup) == 3
    (nested / "cpu.max").write_text("max 100000\n")  # the parent's quota still holds
    assert _count(cgroup) == 8


def test_a_cgroup_v1_quota_caps_the_count(cgroup: tuple[Path, Path]) -> None:
    (cgroup[0] / "cpu").mkdir()
    (cgroup[0] / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (cgroup[0] / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert _count(cgroup) == 2
    (cgroup[0] / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # no limit
    assert _count(cgroup) == 16


def test_garbage_is_ignored_and_without_affinity_the_cpu_count_is_used(
    cgroup: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    (cgroup[0] / "cpu.max").write_text("lots\n")
    cgroup[1].write_text("not a cgroup file")
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert _count(cgroup) == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert _count(cgroup) == 1


def test_this_machine_counts_at_least_one_and_at_most_its_cores() -> None:
    assert 1 <= cpus_available() <= (os.cpu_count() or 1)


def test_dataprep_and_loaders_count_the_same() -> None:
    from dataprep.commands.config import ShardConfig
    from loaders import cpus_available as loaders_count

    assert loaders_count is cpus_available
    assert ShardConfig(raw=Path("raw"), out=Path("out")).workers == cpus_available()
