"""Datasets in object storage read through the node cache by ``loaders.DataLoader``, as a user runs them.

A real S3 server (moto) behind the fault proxy; every case compares the batches with a
local read of the same shards (same seed and topology), byte for byte, and counts what
the server sent.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data

from loaders import DataLoader
from loaders.cache import CacheError, DatasetChangedError
from loaders.cache.download import DOWNLOAD_CHUNK_BYTES
from loaders.errors import ConfigError
from loaders.read.datasets import ParquetShardDataset, ShardDataset
from loaders.read.topology import Topology
from tests.loaders.cache.conftest import RemoteImages
from tests.loaders.cache.remote_images import (
    HANG_GUARD_S,
    FolderWatch,
    as_lists,
    cache_of,
    fingerprint,
    read_batches,
    run_role,
    upload,
)
from tests.loaders.helpers import children_of_self
from tests.loaders.helpers import wait_until as wait_for
from tools.common.fault_proxy import Fault, FaultKind, FaultProxy
from tests.remote.fixtures import S3_SECRET, S3Server, wait_until

BLOCK = 6  # the image folder's samples per shard: the remote default block size


def _local(folder: Path, **options: Any) -> ShardDataset:
    return ShardDataset(folder, fields=("jpg", "cls"), order="blocks", block_size=BLOCK, **options)


def _remote(images: RemoteImages, cache_dir: Path, limit: int | str = 64 << 20, *, topology: Topology | None = None,
            **cache_options: Any) -> ShardDataset:
    return ShardDataset(images.url, fields=("jpg", "cls"), cache=cache_of(cache_dir, limit, **cache_options),
                        topology=topology)


def _shard_requests(proxy: FaultProxy, images: RemoteImages) -> dict[str, int]:
    return {name: proxy.requests(images.key(name)) for name in images.shards}


def test_a_remote_dataset_defaults_to_blocks_of_one_shard_and_refuses_to_go_without_a_cache(
        remote_images: RemoteImages, tmp_path: Path) -> None:
    dataset = _remote(remote_images, tmp_path / "c")
    assert (dataset.order, dataset.block_size, dataset.path) == ("blocks", BLOCK, remote_images.url)
    with pytest.raises(ConfigError, match="give cache_dir= .* and cache_limit="):
        ShardDataset(remote_images.url)
    with pytest.raises(ConfigError, match="cache_limit is missing"):
        ShardDataset(remote_images.url, cache_dir=tmp_path / "c")
    with pytest.warns(UserWarning, match="order='global' .* downloaded again and again"):
        ShardDataset(remote_images.url, cache_dir=tmp_path / "c", cache_limit="2MiB", order="global")


@pytest.mark.parametrize(("launch", "context"), [("topology", "fork"), ("environment", "spawn")])
def test_two_ranks_of_two_worker_processes_fetch_each_shard_once_and_read_the_local_batches(
        remote_images: RemoteImages, proxy: FaultProxy, tmp_path: Path, launch: str, context: str) -> None:
    proxy.reset_counters()
    children = []
    for rank in range(2):
        spec = {"url": remote_images.url, "cache_dir": str(tmp_path / "cache"), "limit": 64 << 20, "workers": 2,
                "worker_type": "process", "context": context, "epochs": 2, "batch_size": 4, "seed": 5,
                "out": str(tmp_path / f"rank{rank}.json")}
        env = {}
        if launch == "topology":
            spec.update(rank=rank, world_size=2)
        else:  # as a launcher without local ranks sets it: the ranks still share the node's cache
            env = {"RANK": str(rank), "WORLD_SIZE": "2"}
        children.append(run_role("epochs", spec, env=env))
    assert [c.wait(HANG_GUARD_S) for c in children] == [0, 0]
    for rank in range(2):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())["batches"]
        assert got == as_lists(read_batches(_local(remote_images.folder, topology=Topology(rank, 2))))
    assert _shard_requests(proxy, remote_images) == {name: 1 for name in remote_images.shards}  # once per node
    for name in remote_images.shards:
        assert proxy.body_bytes(remote_images.key(name)) == (remote_images.folder / name).stat().st_size


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")  # torch's, on 2 cores
def test_a_cache_smaller_than_the_epoch_holds_its_bound_and_reads_the_exact_epochs(
        remote_images: RemoteImages, proxy: FaultProxy, tmp_path: Path) -> None:
    sizes = [(remote_images.folder / n).stat().st_size for n in remote_images.shards]
    manifest = -(-(remote_images.folder / "manifest.json").stat().st_size // 4096) * 4096
    limit = 2 * max(sizes) + manifest + (256 << 10)  # the minimum: two shards (and the cache's own files)
    assert limit - (256 << 10) < sum(sizes) / 3
    proxy.reset_counters()
    dataset = _remote(remote_images, tmp_path / "cache", limit)
    with FolderWatch(tmp_path / "cache") as watch:
        # Three readers, room for two shards: a worker holds a shard only while it reads its batch.
        got = read_batches(dataset, epochs=2, num_workers=3, worker_type="process", context="fork")
    assert got == read_batches(_local(remote_images.folder), epochs=2)
    assert watch.samples > 10
    assert watch.max_size <= limit and watch.max_blocks <= limit, (watch.max_size, watch.max_blocks, limit)
    assert sum(_shard_requests(proxy, remote_images).values()) > len(sizes)  # what did not fit came again


def _held_back(images: RemoteImages, proxy: FaultProxy, batches: int) -> dict[str, int]:
    """Stall every shard the first ``batches`` batches do not read a little before its end (the proxy holds the
    rest of its body until ``release_stalls``); the stall point of each, by proxy key."""
    first = DataLoader(_local(images.folder), batch_size=4, shuffle=True, seed=5, num_workers=0)
    needed = {name for _, batch in zip(range(batches), first) for name in batch["__shard__"]}
    first.close()
    held = {}
    for name in images.shards:
        if name not in needed:
            held[images.key(name)] = (images.folder / name).stat().st_size - 8192
            proxy.add(Fault(FaultKind.STALL, key=images.key(name), after_bytes=held[images.key(name)], exact=True))
    return held


def _partials(cache_dir: Path) -> dict[str, int]:
    """The partial downloads in the cache folder: bytes on disk, by object key (the sha256)."""
    return {p.name.split(".")[0]: p.stat().st_size for p in (cache_dir / "partial").iterdir()}


def test_kill_9_mid_epoch_then_resume_reads_the_same_batches_and_resumes_every_partial_download_by_range(
        remote_images: RemoteImages, proxy: FaultProxy, tmp_path: Path) -> None:
    """The killed run's prefetcher has downloads in flight (the proxy holds each body 8 KiB before its end): the
    resumed run asks for each from the byte its partial file reached (a Range header), the server sends only the
    rest, and no verified shard is downloaded again."""
    cache_dir, state_path, out = tmp_path / "cache", tmp_path / "state.pt", tmp_path / "seen.json"
    _held_back(remote_images, proxy, batches=3)
    spec = {"url": remote_images.url, "cache_dir": str(cache_dir), "limit": 64 << 20, "workers": 2,
            "worker_type": "thread", "batch_size": 4, "seed": 5, "stop_after": 3, "state": str(state_path),
            "out": str(out), "patient": True}
    child = run_role("stop", spec)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        # Every download the prefetcher runs is held: wait until at least two have begun, all with bytes on disk.
        assert wait_for(lambda: len(_partials(cache_dir)) >= 2 and all(_partials(cache_dir).values()),
                        timeout_s=HANG_GUARD_S), f"held downloads never all had bytes on disk: {_partials(cache_dir)}"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(HANG_GUARD_S)
    verified, partial = set(os.listdir(cache_dir / "objects")), _partials(cache_dir)
    proxy.clear()
    proxy.release_stalls()
    proxy.reset_counters()

    seen = json.loads(out.read_text())["batches"]
    dataset = _remote(remote_images, cache_dir)
    with DataLoader(dataset, batch_size=4, shuffle=True, seed=5, num_workers=2, worker_type="process") as loader:
        loader.load_state_dict(torch.load(state_path, weights_only=True))
        rest = [fingerprint(b) for b in loader]
    assert seen + as_lists(rest) == as_lists(read_batches(_local(remote_images.folder), epochs=1)[0])
    by_sha = {hashlib.sha256((remote_images.folder / n).read_bytes()).hexdigest(): n for n in remote_images.shards}
    assert verified & by_sha.keys()  # the test means something: shards were verified before the kill
    for key in verified & by_sha.keys():
        assert proxy.requests(remote_images.key(by_sha[key])) == 0, by_sha[key]
    saved = 0
    for key, kept in partial.items():  # every interrupted download goes on from the byte it reached
        name = by_sha[key]
        size = (remote_images.folder / name).stat().st_size
        assert 0 < kept < size
        assert proxy.ranges(remote_images.key(name)) == [f"bytes={kept}-{size - 1}"], name
        assert proxy.body_bytes(remote_images.key(name)) == size - kept, name
        saved += kept
    assert len(partial) >= 2 and saved >= 2 * DOWNLOAD_CHUNK_BYTES  # bytes not downloaded again


def test_a_dataset_rewritten_between_runs_is_read_anew_never_stale(remote_images: RemoteImages, proxy: FaultProxy,
                                                                   image_folder_v2: Path, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    first = read_batches(_remote(remote_images, tmp_path / "cache"), epochs=1)
    assert first == read_batches(_local(remote_images.folder), epochs=1)
    upload(image_folder_v2, remote_images.url)  # the same names, other bytes
    proxy.reset_counters()
    with caplog.at_level(logging.WARNING, logger="loaders.cache"):
        second = read_batches(_remote(remote_images, tmp_path / "cache"), epochs=1)
    assert second == read_batches(_local(image_folder_v2), epochs=1) != first
    assert "changed since this cache last read it" in caplog.text
    changed = [n for n in remote_images.shards
               if (remote_images.folder / n).read_bytes() != (image_folder_v2 / n).read_bytes()]
    assert changed and all(proxy.requests(remote_images.key(n)) == 1 for n in changed)


def test_a_dataset_rewritten_while_read_is_refused_naming_what_changed(remote_images: RemoteImages,
                                                                       image_folder_v2: Path, tmp_path: Path) -> None:
    dataset = _remote(remote_images, tmp_path / "cache", prefetch=False)  # a shard comes when first read
    loader = DataLoader(dataset, batch_size=4, shuffle=True, seed=5, num_workers=2, worker_type="process")
    batches = iter(loader)
    next(batches)
    upload(image_folder_v2, remote_images.url)
    with pytest.raises(DatasetChangedError, match=rf"{re.escape(remote_images.url)} was rewritten while this job "
                                                  r"read it .*changed: shard-"):
        for _ in batches:
            pass
    loader.close()


def test_a_fifth_of_requests_failing_completes_with_the_same_batches_and_bounded_retries(
        remote_images: RemoteImages, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy of its own, whose seeded draws break requests from the first ones on (the shared one's start later).
    with FaultProxy(s3_server.endpoint, seed=1) as noisy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", noisy.endpoint)
        noisy.add(Fault(FaultKind.SLOWDOWN, method=None, fraction=0.2, times=None))
        got = read_batches(_remote(remote_images, tmp_path / "cache"), num_workers=2, worker_type="process",
                           context="fork")
    assert got == read_batches(_local(remote_images.folder))
    objects = 1 + 2 * len(remote_images.shards) + len(remote_images.shards)  # manifest, sidecars (head + get), shards
    failed = noisy.faults_applied(FaultKind.SLOWDOWN)
    assert failed > 0
    assert noisy.total_requests() <= objects + 2 * failed  # each failure costs a retry or two, no more


def test_a_flipped_byte_is_detected_and_fetched_again_with_the_same_batches(remote_images: RemoteImages,
                                                                             proxy: FaultProxy,
                                                                             tmp_path: Path) -> None:
    dataset = _remote(remote_images, tmp_path / "cache")  # the sidecars are read here, before the fault
    name = remote_images.shards[3]
    size = (remote_images.folder / name).stat().st_size
    proxy.reset_counters()
    proxy.add(Fault(FaultKind.FLIP, key=remote_images.key(name), after_bytes=size // 2))
    got = read_batches(dataset, epochs=1, num_workers=2, worker_type="process", context="fork")
    assert got == read_batches(_local(remote_images.folder), epochs=1)
    assert proxy.faults_applied(FaultKind.FLIP) == 1
    assert proxy.requests(remote_images.key(name)) == 2


def test_the_server_gone_ends_in_an_error_naming_the_url_in_the_training_loop(remote_images: RemoteImages,
                                                                              proxy: FaultProxy,
                                                                              tmp_path: Path) -> None:
    dataset = _remote(remote_images, tmp_path / "cache", timeout_s=2.0)
    proxy.stop()
    with pytest.raises(CacheError, match=rf"{re.escape(remote_images.url)}/shard-") as info:
        read_batches(dataset, epochs=1, num_workers=2, worker_type="process", context="fork")
    assert any("process worker" in note for note in info.value.__notes__)


def test_no_secret_reaches_a_log_line_a_file_or_an_error(remote_images: RemoteImages, proxy: FaultProxy,
                                                         tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    proxy.add(Fault(FaultKind.SLOWDOWN, method=None, fraction=0.3, times=None))
    proxy.add(Fault(FaultKind.RESET, key=remote_images.key(remote_images.shards[0]), after_bytes=1000))
    with caplog.at_level(logging.DEBUG):
        read_batches(_remote(remote_images, tmp_path / "cache", timeout_s=2.0), epochs=1, num_workers=2)
        cold = _remote(remote_images, tmp_path / "other", timeout_s=2.0)
        proxy.stop()
        with pytest.raises(CacheError) as info:
            read_batches(cold, epochs=1, num_workers=2)
    assert caplog.records and S3_SECRET not in caplog.text
    assert S3_SECRET not in str(info.value) and S3_SECRET not in "".join(getattr(info.value, "__notes__", []))
    for folder, _, files in os.walk(tmp_path):
        for name in files:
            assert S3_SECRET.encode() not in (Path(folder) / name).read_bytes(), name


def _cache_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("shard-cache-")]


def test_nothing_started_for_the_cache_outlives_the_loader_by_more_than_its_idle_time(
        remote_images: RemoteImages, tmp_path: Path) -> None:
    dataset = _remote(remote_images, tmp_path / "cache", prefetch_idle_s=0.5)
    expected = read_batches(_local(remote_images.folder), epochs=1)
    assert read_batches(dataset, epochs=1, num_workers=2) == expected  # thread workers: the cache runs here
    wait_until(lambda: not _cache_threads())  # the dataset lives on; its prefetching does not
    assert read_batches(dataset, epochs=1, num_workers=2, worker_type="process") == expected
    wait_until(lambda: not _cache_threads() and not children_of_self())  # no worker, no transfer helper
    assert read_batches(dataset, epochs=1, num_workers=0) == expected  # and it starts again when read again
    dataset.close()
    assert not _cache_threads()


def test_the_first_batch_plans_this_epoch_and_the_next_and_the_cache_prefetches_both(
        remote_images: RemoteImages, tmp_path: Path) -> None:
    dataset = _remote(remote_images, tmp_path / "cache", topology=Topology(rank=0, world_size=2, local_rank=0,
                                                                           local_world_size=2))
    loader = DataLoader(dataset, batch_size=4, shuffle=True, seed=5, num_workers=0)
    batches = iter(loader)
    next(batches)
    cache = dataset.files.cache  # type: ignore[attr-defined]
    assert cache.planned_epochs == {0, 1}
    objects = tmp_path / "cache" / "objects"
    wait_until(lambda: len(os.listdir(objects)) == 2 * len(remote_images.shards))  # shards and sidecars: no read
    loader.close()


def test_a_remote_parquet_dataset_reads_the_local_rows_and_opens_without_downloading_a_shard(
        s3_env: str, bucket: str, table_shards: Path, proxy: FaultProxy, tmp_path: Path) -> None:
    url = f"s3://{bucket}/tables"
    upload(table_shards, url)
    proxy.reset_counters()
    dataset = ParquetShardDataset(url, columns=["id", "__key__"], cache=cache_of(tmp_path / "cache", prefetch=False))
    local = ParquetShardDataset(table_shards, columns=["id", "__key__"])
    assert len(dataset) == len(local) and dataset.block_size == local.block_size
    assert os.listdir(tmp_path / "cache" / "objects") == []  # no shard came into the cache: only footers were read
    prefix = url.split("/", 3)[3]
    for path in table_shards.glob("*.parquet"):  # one ranged read of each shard's end
        assert proxy.ranges(f"{prefix}/{path.name}") == [f"bytes={max(0, path.stat().st_size - 65536)}-"
                                                         f"{path.stat().st_size - 1}"]
    with DataLoader(dataset, batch_size=16, shuffle=True, seed=2, num_workers=2) as remote_loader, \
            DataLoader(local, batch_size=16, shuffle=True, seed=2, num_workers=0) as local_loader:
        assert [b["__key__"] for b in remote_loader] == [b["__key__"] for b in local_loader]


def test_a_remote_token_dataset_reads_the_local_windows_from_a_cache_holding_the_corpus(
        s3_env: str, bucket: str, proxy: FaultProxy, tmp_path: Path) -> None:
    from loaders.cache import CacheLimitError
    from loaders.tokens import TokenDataset
    from tests.loaders.tokens.corpus import random_documents, write_tokens

    folder = write_tokens(tmp_path / "tokens", random_documents(np.random.default_rng(4), 300, mean_len=400),
                          docs_per_shard=60)
    url = f"s3://{bucket}/tokens"
    upload(folder, url)
    largest = max(p.stat().st_size for p in folder.glob("*.bin"))
    small = 2 * largest + (300 << 10)  # above the cache's own minimum, below the corpus and the cache's files
    with pytest.raises(CacheLimitError, match=r"holds the whole corpus: \d+ bytes"):
        TokenDataset(url, seq_len=64, cache=cache_of(tmp_path / "small", small))
    proxy.reset_counters()
    remote = TokenDataset(url, seq_len=64, seed=3, cache=cache_of(tmp_path / "cache"))
    local = TokenDataset(folder, seq_len=64, seed=3)
    stock = torch.utils.data.DataLoader
    got = list(stock(remote, batch_size=8, num_workers=2, collate_fn=remote.default_collate_fn))
    expected = list(stock(local, batch_size=8, num_workers=0, collate_fn=local.default_collate_fn))
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)
    for path in folder.glob("shard-*"):  # once per node, the workers' copies included
        assert proxy.requests(f"tokens/{path.name}") == 1, path.name
