"""The shard cache in one process, against the real S3 server through the fault proxy."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from dataprep.formats.manifest import manifest_bytes
from dataprep.remote import RemoteConfig, RemoteStore, RemoteTimeoutError
from loaders.cache import (
    CacheLimitError,
    DatasetChangedError,
    ShardCache,
    ShardFetchError,
    ShardIntegrityError,
)
from loaders.errors import ConfigError, LoaderError
from tools.common.fault_proxy import Fault, FaultKind, FaultProxy
from tests.remote.fixtures import RemoteDataset, write_dataset
from tests.samples import wait_until

ROOT = Path(__file__).resolve().parents[3]
FAST = RemoteConfig(timeout_s=3.0, stall_s=0.5, connect_timeout_s=0.5, backoff_s=0.01, max_backoff_s=0.1)
BIG = 64 << 20


def _open(dataset: RemoteDataset, cache_dir: Path, limit: int | str = BIG, **options: object) -> ShardCache:
    options.setdefault("remote", FAST)
    return ShardCache.open_dataset(dataset.url, cache_dir=cache_dir, cache_limit=limit, **options)


def _read(cache: ShardCache, name: str) -> bytes:
    with cache.open(name) as lease:
        return lease.path.read_bytes()


def test_open_gives_the_verified_bytes_and_fetches_each_shard_once(remote_dataset: RemoteDataset, proxy: FaultProxy,
                                                                   tmp_path: Path) -> None:
    with _open(remote_dataset, tmp_path / "new" / "cache") as cache:  # created if missing
        for _ in range(2):
            for name, data in remote_dataset.shards.items():
                assert _read(cache, name) == data
        with cache.open(next(iter(remote_dataset.shards))) as lease:
            assert lease.read(0, 16) == next(iter(remote_dataset.shards.values()))[:16]
    assert all(proxy.requests(remote_dataset.key(n)) == 1 for n in remote_dataset.shards)
    with _open(remote_dataset, tmp_path / "new" / "cache") as cache:  # a second run: nothing downloaded again
        assert all(_read(cache, n) == d for n, d in remote_dataset.shards.items())
        assert cache.stats.downloads == 0
    assert all(proxy.requests(remote_dataset.key(n)) == 1 for n in remote_dataset.shards)


def test_a_limit_below_twice_the_largest_shard_is_refused_naming_the_minimum(remote_dataset: RemoteDataset,
                                                                             tmp_path: Path) -> None:
    largest = max(len(d) for d in remote_dataset.shards.values())
    with pytest.raises(CacheLimitError, match=r"below the minimum .*: (\d+) bytes") as info:
        _open(remote_dataset, tmp_path / "c", 2 * largest)
    assert isinstance(info.value, ConfigError)
    minimum = int(str(info.value).split("minimum for ")[1].split(": ")[1].split(" ")[0])
    with _open(remote_dataset, tmp_path / "c", minimum) as cache:  # exactly the minimum works
        assert all(_read(cache, n) == d for n, d in remote_dataset.shards.items())
    with pytest.raises(ConfigError, match="not a byte size"):
        _open(remote_dataset, tmp_path / "c", "lots")
    assert _open(remote_dataset, tmp_path / "c", "1GiB").config.limit_bytes == 2**30


def test_a_flipped_byte_is_detected_and_fetched_again(remote_dataset: RemoteDataset, proxy: FaultProxy,
                                                      tmp_path: Path) -> None:
    name, data = next(iter(remote_dataset.shards.items()))
    proxy.add(Fault(FaultKind.FLIP, key=remote_dataset.key(name), after_bytes=len(data) // 2))
    with _open(remote_dataset, tmp_path / "c") as cache:
        assert _read(cache, name) == data
    assert proxy.faults_applied(FaultKind.FLIP) == 1
    assert proxy.requests(remote_dataset.key(name)) == 2


def test_bytes_that_never_match_end_in_an_error_naming_shard_and_url(remote_dataset: RemoteDataset, proxy: FaultProxy,
                                                                     tmp_path: Path) -> None:
    name = next(iter(remote_dataset.shards))
    proxy.add(Fault(FaultKind.FLIP, key=remote_dataset.key(name), after_bytes=7, times=None))
    with _open(remote_dataset, tmp_path / "c", max_refetches=1) as cache:
        with pytest.raises(ShardIntegrityError, match=f"shard {name} \\({remote_dataset.url}/{name}\\): downloaded 2") \
                as info:
            cache.open(name)
    assert info.value.shard == name and info.value.url == f"{remote_dataset.url}/{name}"
    assert proxy.requests(remote_dataset.key(name)) == 2
    assert os.listdir(tmp_path / "c" / "objects") == [] and os.listdir(tmp_path / "c" / "partial") == []


def test_a_dataset_rewritten_between_runs_is_fetched_again_never_stale(
        remote_dataset: RemoteDataset, proxy: FaultProxy, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with _open(remote_dataset, tmp_path / "c") as cache:
        assert all(_read(cache, n) == d for n, d in remote_dataset.shards.items())
    shards = dict(remote_dataset.shards)
    infos = list(remote_dataset.manifest.shards)
    store = RemoteStore(remote_dataset.url)
    for i, name in enumerate(list(shards)[:3]):  # same names, new bytes (and, for two, a new size)
        data = random.Random(100 + i).randbytes(len(shards[name]) + i)
        store.put(name, data)
        shards[name] = data
        infos[i] = dataclasses.replace(infos[i], bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    store.put("manifest.json", manifest_bytes(dataclasses.replace(remote_dataset.manifest, shards=tuple(infos))))
    with caplog.at_level(logging.WARNING, logger="loaders.cache"), _open(remote_dataset, tmp_path / "c") as cache:
        for name, data in shards.items():
            assert _read(cache, name) == data
    assert "changed since this cache last read it" in caplog.text and "3 changed" in caplog.text
    for i, name in enumerate(shards):
        assert proxy.requests(remote_dataset.key(name)) == (2 if i < 3 else 1), name  # only the rewritten, again


def test_a_dataset_rewritten_while_read_is_refused_naming_what_changed(remote_dataset: RemoteDataset,
                                                                       tmp_path: Path) -> None:
    names = list(remote_dataset.shards)
    with _open(remote_dataset, tmp_path / "c", max_refetches=0) as cache:
        assert _read(cache, names[0]) == remote_dataset.shards[names[0]]
        write_dataset(remote_dataset.url, [len(d) for d in remote_dataset.shards.values()], seed=5)
        assert _read(cache, names[0]) == remote_dataset.shards[names[0]]  # cached: this job's version
        with pytest.raises(DatasetChangedError, match=rf"{remote_dataset.url} was rewritten while this job read it.*"
                                                      rf"8 changed: {names[0]}"):
            cache.open(names[1])


def test_an_interrupted_download_resumes_by_range(remote_dataset: RemoteDataset, proxy: FaultProxy,
                                                  tmp_path: Path) -> None:
    big = write_dataset(remote_dataset.url + "-big", [200_000, 3 << 20], seed=2)
    first, second = list(big.shards)
    cut = (3 << 20) // 2
    proxy.add(Fault(FaultKind.STALL, key=big.key(second), after_bytes=cut))
    cache_dir = tmp_path / "c"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-m", "tests.loaders.cache.node_roles", "fetch", big.url, str(cache_dir),
                              str(BIG), first, second], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert proxy.wait_for_bytes(big.key(second), cut)
    partial = cache_dir / "partial"
    wait_until(lambda: any((partial / f).stat().st_size > 0 for f in os.listdir(partial)))  # the child wrote some
    child.kill()  # kill -9, mid-download
    child.wait()
    proxy.release_stalls()
    (held,) = os.listdir(partial)
    kept = (partial / held).stat().st_size
    assert 0 < kept <= cut
    with _open(big, cache_dir) as cache:
        assert _read(cache, first) == big.shards[first] and _read(cache, second) == big.shards[second]
        assert cache.stats.bytes_downloaded == (3 << 20) - kept  # only the missing range
    assert proxy.requests(big.key(first)) == 1  # verified in the first run: not downloaded again
    assert proxy.ranges(big.key(second))[-1].startswith(f"bytes={kept}-")


def test_a_fifth_of_requests_failing_completes_with_bounded_retries(remote_dataset: RemoteDataset, proxy: FaultProxy,
                                                                    tmp_path: Path) -> None:
    dataset = write_dataset(remote_dataset.url + "-many", [60_000 + i for i in range(40)], seed=3)
    proxy.add(Fault(FaultKind.SLOWDOWN, method=None, key="data-many/", times=None, fraction=0.2))
    proxy.add(Fault(FaultKind.RESET, key="data-many/shard", times=2, after_bytes=30_000))
    names = list(dataset.shards)
    with _open(dataset, tmp_path / "c") as cache:
        cache.plan(0, {"a": names, "b": names[::-1]})
        results: dict[str, bytes] = {}
        readers = [threading.Thread(target=lambda order: results.update({n: _read(cache, n) for n in order}),
                                    args=(order,)) for order in (names, names[::-1])]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
    assert results == dataset.shards
    gets = sum(proxy.requests(dataset.key(n)) for n in names)
    slowdowns = proxy.faults_applied(FaultKind.SLOWDOWN)
    assert slowdowns > 0
    assert gets <= len(names) + slowdowns + 2  # every extra request answers one injected failure


def test_a_server_gone_ends_in_an_error_naming_the_shard_and_url(remote_dataset: RemoteDataset, proxy: FaultProxy,
                                                                 tmp_path: Path) -> None:
    name = next(iter(remote_dataset.shards))
    with _open(remote_dataset, tmp_path / "c") as cache:
        proxy.stop()
        with pytest.raises(ShardFetchError, match=f"shard {name}: download from {remote_dataset.url}/{name} failed") \
                as info:
            cache.open(name)
    assert isinstance(info.value.__cause__, RemoteTimeoutError) and isinstance(info.value, LoaderError)


def test_a_local_folder_is_cached_too(tmp_path: Path) -> None:
    dataset = write_dataset(f"file://{tmp_path / 'slow-nfs'}", [5000, 7000], seed=1)
    with ShardCache.open_dataset(tmp_path / "slow-nfs", cache_dir=tmp_path / "c", cache_limit=BIG) as cache:
        for name, data in dataset.shards.items():
            with cache.open(name) as lease:
                assert lease.path.read_bytes() == data
                assert lease.path.parent == tmp_path / "c" / "objects"
                assert lease.path.name == hashlib.sha256(data).hexdigest()


def test_planned_shards_are_prefetched_before_they_are_opened(remote_dataset: RemoteDataset, proxy: FaultProxy,
                                                               tmp_path: Path) -> None:
    names = list(remote_dataset.shards)
    with _open(remote_dataset, tmp_path / "c") as cache:
        cache.plan(0, {"rank0": names[:4]})
        wait_until(lambda: cache.stats.downloads == 4)  # no open yet: the prefetcher brought them
        for name in names[:4]:
            assert _read(cache, name) == remote_dataset.shards[name]
        assert cache.stats.downloads == 4  # every open found its shard there
    assert all(proxy.requests(remote_dataset.key(n)) == (1 if i < 4 else 0) for i, n in enumerate(names))


def test_the_state_is_plain_values(remote_dataset: RemoteDataset, tmp_path: Path) -> None:
    names = list(remote_dataset.shards)
    with _open(remote_dataset, tmp_path / "c", prefetch=False) as cache:
        cache.plan(0, {"rank0": names})
        cache.open(names[2], stream="rank0", epoch=0).release()
        state = cache.state_dict()
    assert state == {"version": 1, "positions": {"rank0": [0, 2]}}
    path = tmp_path / "state.pt"
    torch.save(state, path)
    restored = torch.load(path, weights_only=True)
    with _open(remote_dataset, tmp_path / "c", prefetch=False) as cache:
        cache.load_state_dict(restored)
        assert cache.state_dict() == state
        with pytest.raises(ConfigError, match="version"):
            cache.load_state_dict({"version": 9})


def test_nothing_is_written_outside_the_cache_dir(remote_dataset: RemoteDataset, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    with _open(remote_dataset, tmp_path / "c") as cache:
        cache.plan(0, {"r": list(remote_dataset.shards)})
        assert all(_read(cache, n) == d for n, d in remote_dataset.shards.items())
    assert os.listdir(home) == [] and os.listdir(work) == []
    assert sorted(os.listdir(tmp_path)) == ["c", "home", "work"]
