"""A topology the dataset names itself, without torch.distributed (issue 20): a launcher that hands each
script its rank and world size (Horovod, a scheduler's variables) and a dataset built with them.

Two real rank processes, each seeding torch differently and building
``DataLoader(ShardDataset(..., topology=Topology(rank=r, world_size=2)), shuffle=True)`` without
``seed=``, must read disjoint shares that together are the dataset, in the same number of
batches. A topology that disagrees with the environment's is refused. This file is also the
rank's program: ``python test_dataset_topology.py rank RANK PATH OUT``.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

WORLD_SIZE = 2
BATCH_SIZE = 5
EPOCHS = 2
TORCH_SEED_BASE = 1000  # each rank's script calls torch.manual_seed(TORCH_SEED_BASE + rank)
ENV_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def _rank_program(rank: int, path: Path, out: Path) -> None:
    import torch

    from loaders import DataLoader, ShardDataset, Topology

    torch.manual_seed(TORCH_SEED_BASE + rank)  # a common script line: ranks seed differently
    dataset = ShardDataset(path, fields=("cls",), topology=Topology(rank=rank, world_size=WORLD_SIZE))
    with DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True) as loader:
        epochs = [[batch["__index__"].tolist() for batch in loader] for _ in range(EPOCHS)]
        out.write_text(json.dumps({"epochs": epochs, "len": len(loader), "seed": loader.seed, "rank": loader.rank}))


def _run_ranks(tmp_path: Path, shards: Path, env_states_rank: bool) -> list[dict[str, Any]]:
    """Each rank's results; RANK / WORLD_SIZE in its environment only when ``env_states_rank``."""
    procs = []
    for rank in range(WORLD_SIZE):
        env = {name: value for name, value in os.environ.items() if name not in ENV_NAMES}
        if env_states_rank:
            env.update(RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE))
        procs.append(subprocess.Popen([sys.executable, __file__, "rank", str(rank), str(shards),
                                       str(tmp_path / f"rank{rank}.json")], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    for rank, proc in enumerate(procs):
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"rank {rank} exited with {proc.returncode}:\n{out[-4000:]}"
    return [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(WORLD_SIZE)]


@pytest.mark.parametrize("env_states_rank", [False, True], ids=["no-environment", "environment-agrees"])
def test_ranks_named_by_the_dataset_read_disjoint_complete_shares(image_shards: Path, tmp_path: Path,
                                                                  env_states_rank: bool) -> None:
    ranks = _run_ranks(tmp_path, image_shards, env_states_rank)
    num_samples = 48  # the image_shards fixture
    per_rank = num_samples // WORLD_SIZE
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["seed"] == ranks[1]["seed"]  # one shared base seed, as under torch.distributed
    for epoch in range(EPOCHS):
        seen = [[index for batch in r["epochs"][epoch] for index in batch] for r in ranks]
        assert len(seen[0]) == len(seen[1]) == per_rank
        assert not set(seen[0]) & set(seen[1])
        assert sorted(seen[0] + seen[1]) == list(range(num_samples))
    expected_batches = -(-per_rank // BATCH_SIZE)
    assert all(r["len"] == expected_batches and [len(e) for e in r["epochs"]] == [expected_batches] * EPOCHS
               for r in ranks)
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # reshuffled each epoch


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


def test_a_dataset_topology_that_disagrees_with_rank_and_world_size_is_refused_naming_both(
        image_shards: Path, clean_environment: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from loaders import DataLoader, ShardDataset, Topology
    from loaders.errors import ConfigError

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    dataset = ShardDataset(image_shards, fields=("cls",), topology=Topology(rank=1, world_size=2))
    with pytest.raises(ConfigError, match=r"the dataset's topology \(rank 1 of world_size 2\) conflicts with "
                                          r"RANK/WORLD_SIZE \(rank 0 of world_size 4\)"):
        DataLoader(dataset, batch_size=4, shuffle=True)
    agreeing = ShardDataset(image_shards, fields=("cls",), topology=Topology(rank=0, world_size=4))
    with DataLoader(agreeing, batch_size=4, shuffle=True, num_workers=0) as loader:
        assert loader.rank == 0 and len(loader) == 3  # 48 / 4 ranks = 12 samples


@pytest.fixture
def process_group(clean_environment: None) -> Iterator[None]:
    """A one-process gloo group on loopback, destroyed after the test."""
    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_dataset_topology_that_disagrees_with_torch_distributed_is_refused(image_shards: Path,
                                                                            process_group: None) -> None:
    from loaders import DataLoader, ShardDataset, Topology
    from loaders.errors import ConfigError

    dataset = ShardDataset(image_shards, fields=("cls",), topology=Topology(rank=1, world_size=2))
    with pytest.raises(ConfigError, match=r"conflicts with torch.distributed \(rank 0 of world_size 1\)"):
        DataLoader(dataset, batch_size=4)


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "rank":
    _rank_program(int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
