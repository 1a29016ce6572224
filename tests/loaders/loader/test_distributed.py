"""DDP on the CPU: 2 gloo processes, each with a DataLoader over the same shards (issue 3).

Each rank runs every case in ``CASES`` and does an ``all_reduce`` per batch, as a DDP
step would: unequal batch counts would leave one rank waiting for a partner that never
comes, so the whole run has a deadline. The ranks write what they saw to JSON files;
the assertions run here, in the pytest process.

This file is also the rank's program: ``python test_distributed.py worker RANK ...``.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import tarfile
import time
from collections import Counter
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

WORLD_SIZE = 2
DEADLINE_S = 90.0  # the run takes a few seconds; only a hang gets near this
COLLECTIVE_TIMEOUT_S = 30  # gloo gives up on a collective after this, so a hang becomes an error
SEED = 7
# name -> (samples in the dataset, batch size, drop_last, thread workers, epochs)
CASES: dict[str, tuple[int, int, bool, int, int]] = {
    "odd": (23, 5, False, 0, 2),  # n % world_size != 0: one sample repeats; 12 per rank = 5 + 5 + 2
    "odd-threads": (23, 5, False, 2, 2),
    "odd-drop-last": (23, 5, True, 0, 1),  # 11 per rank -> 2 full batches
    "even-short-batch": (20, 4, False, 0, 1),  # 10 per rank = 4 + 4 + 2
    "even": (24, 4, False, 2, 1),  # divides world_size * batch_size evenly
    "no-seed": (24, 4, False, 0, 2),  # seed=None while each rank seeded torch differently
}
UNSEEDED = {"no-seed"}
TORCH_SEED_BASE = 1000  # each rank's script calls torch.manual_seed(TORCH_SEED_BASE + rank)


# ---------------------------------------------------------------- the rank's program


def _run_case(path: Path, batch_size: int, drop_last: bool, num_workers: int, epochs: int,
              seed: int | None) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from loaders import DataLoader, ShardDataset, Topology

    topology = Topology.detect()
    dataset = ShardDataset(path, fields=("cls",), topology=topology)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                        worker_type="thread", drop_last=drop_last, seed=seed)
    epochs_seen: list[list[list[int]]] = []
    reduced: list[float] = []
    with loader:
        for _ in range(epochs):
            batches = []
            for batch in loader:
                batches.append(batch["__index__"].tolist())
                assert batch["cls"].tolist() == batches[-1]  # the label field holds the index
                step = torch.ones(())
                dist.all_reduce(step)  # a DDP gradient sync: hangs if the other rank has no batch left
                reduced.append(step.item())
            epochs_seen.append(batches)
    return {"epochs": epochs_seen, "reduced": reduced, "len": len(loader),
            "topology": [topology.rank, topology.world_size]}


def _worker(rank: int, port: int, spec_file: Path, out_file: Path) -> None:
    import torch
    import torch.distributed as dist

    spec = json.loads(spec_file.read_text())
    torch.manual_seed(TORCH_SEED_BASE + rank)  # a common script line: ranks seed differently
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD_SIZE,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        results = {name: _run_case(Path(spec["paths"][name]), *CASES[name][1:], None if name in UNSEEDED else SEED)
                   for name in CASES}
        dist.barrier()
    finally:
        dist.destroy_process_group()
    out_file.write_text(json.dumps(results))


# ---------------------------------------------------------------- the test side


def _write_shards(directory: Path, num_samples: int, per_shard: int = 7) -> Path:
    """WebDataset tars of samples ``{key}.cls`` = their index, adopted with ``dataprep index``."""
    from dataprep.cli import main as dataprep_main

    directory.mkdir(parents=True)
    for first in range(0, num_samples, per_shard):
        with tarfile.open(directory / f"part-{first // per_shard:03d}.tar", "w") as tar:
            for index in range(first, min(first + per_shard, num_samples)):
                data = str(index).encode()
                member = tarfile.TarInfo(f"sample{index:05d}.cls")
                member.size = len(data)
                tar.addfile(member, BytesIO(data))
    assert dataprep_main(["index", str(directory)]) == 0
    return directory


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launch(tmp_path: Path, paths: dict[str, str]) -> list[dict[str, Any]]:
    """Run WORLD_SIZE ranks; their results, or a failure naming the rank that hung or failed."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({"paths": paths}))
    for attempt in range(3):
        outputs = _run_ranks(tmp_path, spec_file, _free_port())
        # Another process may take the free port before rank 0 binds it: try another one.
        if not any("address already in use" in out.lower() for _, out in outputs) or attempt == 2:
            break
    for rank, (returncode, out) in enumerate(outputs):
        assert returncode == 0, f"rank {rank} exited with {returncode}:\n{out[-4000:]}"
    return [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(WORLD_SIZE)]


def _run_ranks(tmp_path: Path, spec_file: Path, port: int) -> list[tuple[int, str]]:
    """(exit status, output) of each rank; fails the test when one outlives DEADLINE_S."""
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(name, None)  # the process group, not a launcher's variables, must set the topology
    procs = [subprocess.Popen([sys.executable, __file__, "worker", str(rank), str(port), str(spec_file),
                               str(tmp_path / f"rank{rank}.json")], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for rank in range(WORLD_SIZE)]
    deadline = time.monotonic() + DEADLINE_S
    outputs = []
    try:
        for rank, proc in enumerate(procs):
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {rank} still running after {DEADLINE_S:.0f} s: a collective hung "
                            "(unequal batch counts?)")
            outputs.append((proc.returncode, out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outputs


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    root = tmp_path_factory.mktemp("distributed")
    sizes = {CASES[name][0] for name in CASES}
    dirs = {size: _write_shards(root / f"n{size}", size) for size in sizes}
    return _launch(root, {name: str(dirs[CASES[name][0]]) for name in CASES})


def _flat(batches: list[list[int]]) -> list[int]:
    return [index for batch in batches for index in batch]


def test_each_rank_detects_its_topology(ranks: list[dict[str, Any]]) -> None:
    for rank, result in enumerate(ranks):
        assert all(case["topology"] == [rank, WORLD_SIZE] for case in result.values())


@pytest.mark.parametrize("name", list(CASES))
def test_ranks_get_equal_batch_counts_and_all_reduce_never_waits(ranks: list[dict[str, Any]], name: str) -> None:
    num_samples, batch_size, drop_last, _, epochs = CASES[name]
    per_rank = num_samples // WORLD_SIZE if drop_last else -(-num_samples // WORLD_SIZE)
    expected = per_rank // batch_size if drop_last else -(-per_rank // batch_size)
    for result in ranks:
        case = result[name]
        assert case["len"] == expected
        assert [len(batches) for batches in case["epochs"]] == [expected] * epochs
        assert case["reduced"] == [float(WORLD_SIZE)] * (expected * epochs)
        assert all(len(batch) == batch_size for batch in case["epochs"][0][:-1])


@pytest.mark.parametrize("name", ["odd", "odd-threads", "even-short-batch", "even"])
def test_union_covers_every_sample_with_only_the_stated_repeats(ranks: list[dict[str, Any]], name: str) -> None:
    from loaders.read.order import epoch_order

    num_samples = CASES[name][0]
    for epoch in range(CASES[name][4]):
        seen = [_flat(result[name]["epochs"][epoch]) for result in ranks]
        counts = Counter(seen[0] + seen[1])
        assert set(counts) == set(range(num_samples))
        # Padding to a multiple of world_size repeats the first entries of the epoch's order, once each.
        padding = -(-num_samples // WORLD_SIZE) * WORLD_SIZE - num_samples
        repeated = sorted(index for index, count in counts.items() if count > 1)
        first = epoch_order(num_samples, seed=SEED, epoch=epoch)[:padding].tolist()
        assert repeated == sorted(first)
        assert all(counts[index] == 2 for index in repeated)
        if padding == 0:
            assert not set(seen[0]) & set(seen[1])


def test_drop_last_ranks_are_disjoint_full_batches(ranks: list[dict[str, Any]]) -> None:
    num_samples, batch_size = CASES["odd-drop-last"][:2]
    seen = [_flat(result["odd-drop-last"]["epochs"][0]) for result in ranks]
    assert not set(seen[0]) & set(seen[1])
    assert all(len(s) == len(set(s)) == (num_samples // WORLD_SIZE) // batch_size * batch_size for s in seen)
    assert set(seen[0]) | set(seen[1]) <= set(range(num_samples))


def test_order_does_not_depend_on_num_workers(ranks: list[dict[str, Any]]) -> None:
    for result in ranks:
        assert result["odd"]["epochs"] == result["odd-threads"]["epochs"]


def test_every_rank_deals_its_share_of_the_same_epoch_permutation(ranks: list[dict[str, Any]]) -> None:
    from loaders.read.order import epoch_order, rank_indices

    num_samples = CASES["odd"][0]
    for epoch in range(CASES["odd"][4]):
        order = epoch_order(num_samples, seed=SEED, epoch=epoch)
        for rank, result in enumerate(ranks):
            share = rank_indices(order, rank=rank, world_size=WORLD_SIZE, drop_last=False).tolist()
            assert _flat(result["odd"]["epochs"][epoch]) == share
    assert _flat(ranks[0]["odd"]["epochs"][0]) != _flat(ranks[0]["odd"]["epochs"][1])  # reshuffled each epoch


def test_ranks_never_overlap_without_a_seed_though_each_seeded_torch_differently(
        ranks: list[dict[str, Any]]) -> None:
    num_samples, epochs = CASES["no-seed"][0], CASES["no-seed"][4]
    for epoch in range(epochs):
        seen = [_flat(result["no-seed"]["epochs"][epoch]) for result in ranks]
        assert not set(seen[0]) & set(seen[1])
        assert sorted(seen[0] + seen[1]) == list(range(num_samples))


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "worker":
    _worker(int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]))
