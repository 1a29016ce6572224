"""Programs the cache tests run as separate processes: a rank with worker processes, a downloader to kill.

``python -m tests.loaders.cache.node_roles rank  URL CACHE_DIR LIMIT RANK RANKS WORKERS OUT``
    One rank of a node, launched as torchrun would (no process group): it opens the
    cache, plans every local rank's order for epoch 0, forks WORKERS worker processes that
    each read their share of the rank's order through the cache (a lease per shard,
    bytes checked against the manifest's sha256), and writes what happened to OUT (JSON).
``python -m tests.loaders.cache.node_roles fetch URL CACHE_DIR LIMIT NAME...``
    Open the named shards one after the other (the kill -9 test stops it mid-download).

The environment (credentials, ``AWS_ENDPOINT_URL``) comes from the test.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import random
import sys
import traceback
from pathlib import Path

from dataprep.remote import RemoteConfig
from loaders.cache import ShardCache

# Ranks count requests at the server: a body silent for stall_s is fetched again from the byte reached (a
# second request), so stall_s is far above what a busy machine's server takes (2 s was not, under load).
REMOTE = RemoteConfig(timeout_s=120.0, stall_s=60.0, backoff_s=0.01, max_backoff_s=0.2)
PATIENT = RemoteConfig(timeout_s=60.0, stall_s=30.0)  # the kill -9 test kills it while a body stalls


def rank_order(names: list[str], rank: int, epoch: int = 0) -> list[str]:
    """The order rank ``rank`` reads every shard in during ``epoch`` (a pure function of them)."""
    order = list(names)
    random.Random(1000 * epoch + rank).shuffle(order)
    return order


def _worker(cache: ShardCache, names: list[str], stream: str, out: Path) -> None:
    expected = {s.name: s.sha256 for s in cache.catalog.manifest.shards}
    report: dict[str, object] = {"read": [], "bad": []}
    try:
        for name in names:
            with cache.open(name, stream=stream, epoch=0) as lease:
                data = lease.path.read_bytes()
            if hashlib.sha256(data).hexdigest() != expected[name]:
                report["bad"].append(name)  # type: ignore[attr-defined]
            report["read"].append(name)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - reported to the test, which fails on it
        report["error"] = traceback.format_exc()
    out.write_text(json.dumps(report))


def run_rank(url: str, cache_dir: str, limit: str, rank: int, ranks: int, workers: int, out: str) -> int:
    cache = ShardCache.open_dataset(url, cache_dir=cache_dir, cache_limit=int(limit), remote=REMOTE)
    names = [s.name for s in cache.catalog.manifest.shards]
    cache.plan(0, {f"rank{r}": rank_order(names, r) for r in range(ranks)})
    mine = rank_order(names, rank)
    ctx = multiprocessing.get_context("fork")
    outs = [Path(f"{out}.worker{w}") for w in range(workers)]
    procs = [ctx.Process(target=_worker, args=(cache, mine[w::workers], f"rank{rank}", outs[w]))
             for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    cache.close()
    reports = [json.loads(o.read_text()) if o.exists() else {"error": f"worker died: {p.exitcode}"}
               for o, p in zip(outs, procs)]
    Path(out).write_text(json.dumps({"workers": reports, "downloads_in_rank": cache.stats.downloads}))
    return 0


def run_fetch(url: str, cache_dir: str, limit: str, names: list[str]) -> int:
    with ShardCache.open_dataset(url, cache_dir=cache_dir, cache_limit=int(limit), remote=PATIENT,
                                 prefetch=False) as cache:
        for name in names:
            cache.open(name).release()
            print(f"fetched {name}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    role, *args = argv
    if role == "rank":
        url, cache_dir, limit, rank, ranks, workers, out = args
        return run_rank(url, cache_dir, limit, int(rank), int(ranks), int(workers), out)
    if role == "fetch":
        url, cache_dir, limit, *names = args
        return run_fetch(url, cache_dir, limit, names)
    raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
