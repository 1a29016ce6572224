"""One node, several processes: ranks launched alone (no process group), each with forked workers, one cache."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from loaders.cache.cursors import CursorBoard
from loaders.cache.layout import CacheLayout
from tests.loaders.cache.remote_images import FolderWatch
from tools.common.fault_proxy import FaultProxy
from tests.remote.fixtures import RemoteDataset, write_dataset

ROOT = Path(__file__).resolve().parents[3]
HANG_GUARD_S = 300  # the run takes seconds; only a hang gets near this


def _run_ranks(dataset: RemoteDataset, cache_dir: Path, limit: int, tmp_path: Path, *, ranks: int = 2,
               workers: int = 2) -> list[dict[str, object]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    outs = [tmp_path / f"rank{r}.json" for r in range(ranks)]
    procs = [subprocess.Popen([sys.executable, "-m", "tests.loaders.cache.node_roles", "rank", dataset.url,
                               str(cache_dir), str(limit), str(r), str(ranks), str(workers), str(outs[r])],
                              cwd=ROOT, env=env) for r in range(ranks)]
    for p in procs:
        assert p.wait(HANG_GUARD_S) == 0
    return [json.loads(o.read_text()) for o in outs]


def test_two_ranks_with_two_worker_processes_fetch_each_shard_once(remote_dataset: RemoteDataset, proxy: FaultProxy,
                                                                   tmp_path: Path) -> None:
    reports = _run_ranks(remote_dataset, tmp_path / "cache", 64 << 20, tmp_path)
    names = sorted(remote_dataset.shards)
    for report in reports:
        workers = report["workers"]
        assert isinstance(workers, list)
        assert all("error" not in w for w in workers), workers
        assert sorted(n for w in workers for n in w["read"]) == names  # every worker's share, every shard
        assert [n for w in workers for n in w["bad"]] == []
    for name, data in remote_dataset.shards.items():
        key = remote_dataset.key(name)
        # Once per node, counted at the server: every byte served once. (A request the client retried, as
        # after a connection reset, is a second request; a second download would serve its bytes again.)
        assert proxy.body_bytes(key) == len(data), (name, proxy.requests(key), proxy.ranges(key))
        assert proxy.requests(key) >= 1
    cached = sorted(os.listdir(tmp_path / "cache" / "objects"))
    assert len(cached) == len(names)
    assert os.listdir(tmp_path / "cache" / "partial") == []
    # Positions of processes that ended without closing (forked workers) are dropped by the next reader.
    assert CursorBoard(CacheLayout(tmp_path / "cache")).read_all() == {}
    assert os.listdir(tmp_path / "cache" / "streams") == []


def test_a_cache_smaller_than_the_data_holds_its_bound_at_every_moment(s3_env: str, bucket: str, proxy: FaultProxy,
                                                                       tmp_path: Path) -> None:
    sizes = [random.Random(i).randrange(100 << 10, 200 << 10) for i in range(12)]
    dataset = write_dataset(f"s3://{bucket}/small", sizes, seed=4)
    limit = 2 * max(sizes) + (256 << 10) + (200 << 10)  # the minimum plus about one shard: far below the data
    assert limit < sum(sizes) / 2
    cache_dir = tmp_path / "cache"
    with FolderWatch(cache_dir) as watch:
        reports = _run_ranks(dataset, cache_dir, limit, tmp_path)
    for report in reports:
        workers = report["workers"]
        assert isinstance(workers, list)
        assert all("error" not in w for w in workers), workers
        assert [n for w in workers for n in w["bad"]] == []  # every byte as the manifest says
        assert sorted(n for w in workers for n in w["read"]) == sorted(dataset.shards)
    assert watch.samples > 10
    assert watch.max_size <= limit and watch.max_blocks <= limit, (watch.max_size, watch.max_blocks, limit)
    fetched = sum(proxy.requests(dataset.key(n)) for n in dataset.shards)
    assert fetched >= len(dataset.shards)  # some shards came twice: the two ranks read them at different times
