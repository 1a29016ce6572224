from __future__ import annotations

from pathlib import Path

import pytest
import torch.distributed
import torch.utils.data

from loaders.errors import ConfigError
from loaders.read import topology
from loaders.read.topology import Topology, current_worker, default_num_workers

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults_are_a_single_process() -> None:
    topo = Topology()
    assert (topo.rank, topo.world_size, topo.local_rank, topo.local_world_size) == (0, 1, 0, 1)
    assert not topo.is_distributed and Topology(1, 2).is_distributed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"world_size": 0}, "'world_size' must be a positive int (got 0 that is a int)"),
        ({"rank": -1}, "'rank' must be a non-negative int (got -1 that is a int)"),
        ({"rank": 2, "world_size": 2}, "'rank' must be < world_size=2 (got 2)"),
        ({"rank": "0"}, "'rank' must be a non-negative int (got '0' that is a str)"),
        ({"world_size": True}, "'world_size' must be a positive int (got True that is a bool)"),
        ({"local_rank": 1}, "'local_rank' must be < local_world_size=1 (got 1)"),
        ({"world_size": 2, "local_world_size": 4, "local_rank": 0}, "'local_world_size' must be <= world_size=2"),
    ],
)
def test_topology_validates(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Topology(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_detect_without_env_is_single_process(clean_env: pytest.MonkeyPatch) -> None:
    assert Topology.detect() == Topology()


def test_detect_reads_torchrun_env(clean_env: pytest.MonkeyPatch) -> None:
    for name, value in zip(TORCHRUN_VARS, ("5", "8", "1", "4"), strict=True):
        clean_env.setenv(name, value)
    assert Topology.detect() == Topology(rank=5, world_size=8, local_rank=1, local_world_size=4)


def test_detect_defaults_local_sizes(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("RANK", "3")
    clean_env.setenv("WORLD_SIZE", "4")
    assert Topology.detect() == Topology(rank=3, world_size=4, local_rank=0, local_world_size=1)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "1"}, "only one of RANK/WORLD_SIZE (WORLD_SIZE is missing)"),
        ({"WORLD_SIZE": "2"}, "RANK is missing"),
        ({"RANK": "one", "WORLD_SIZE": "2"}, "environment variable RANK must be an integer (got 'one')"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "'rank' must be < world_size=2 (got 2)"),
    ],
)
def test_detect_rejects_bad_env(clean_env: pytest.MonkeyPatch, env: dict[str, str], message: str) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        Topology.detect()
    assert message in str(info.value)


def test_detect_prefers_an_initialised_process_group(clean_env: pytest.MonkeyPatch) -> None:
    # The env says one thing, the process group another: the process group wins.
    clean_env.setenv("RANK", "0")
    clean_env.setenv("WORLD_SIZE", "1")
    clean_env.setenv("LOCAL_RANK", "1")
    clean_env.setenv("LOCAL_WORLD_SIZE", "2")
    clean_env.setattr(torch.distributed, "is_initialized", lambda: True)
    clean_env.setattr(torch.distributed, "get_rank", lambda group=None: 3)
    clean_env.setattr(torch.distributed, "get_world_size", lambda group=None: 4)
    assert Topology.detect() == Topology(rank=3, world_size=4, local_rank=1, local_world_size=2)


def test_detect_with_a_real_gloo_group(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not built in")
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert Topology.detect() == Topology()
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize(
    ("cpus", "local_world_size", "expected"),
    [(16, 1, 15), (16, 4, 3), (8, 4, 2), (2, 1, 2), (1, 1, 1), (4, 8, 0)],
)
def test_default_num_workers_rule(
    monkeypatch: pytest.MonkeyPatch, cpus: int, local_world_size: int, expected: int
) -> None:
    monkeypatch.setattr(topology, "cpus_available", lambda: cpus)
    topo = Topology(rank=0, world_size=8, local_rank=0, local_world_size=local_world_size)
    assert default_num_workers(topo) == expected


def test_default_num_workers_detects_topology(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setattr(topology, "cpus_available", lambda: 9)
    for name, value in zip(TORCHRUN_VARS, ("0", "2", "0", "2"), strict=True):
        clean_env.setenv(name, value)
    assert default_num_workers() == 3


class _WhoAmI(torch.utils.data.Dataset[tuple[int, int]]):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> tuple[int, int]:
        return current_worker()


def test_current_worker_in_main_process_and_in_workers() -> None:
    assert current_worker() == (0, 1)
    loader = torch.utils.data.DataLoader(_WhoAmI(), batch_size=None, num_workers=2)
    assert sorted({tuple(item) for item in loader}) == [(0, 2), (1, 2)]
