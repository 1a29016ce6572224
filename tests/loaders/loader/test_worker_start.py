"""limits: thread caps in this process, worker seeds (distinct per worker and epoch), WorkerInit order."""

from __future__ import annotations

import os
import random
import sys
import types
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from loaders.errors import ConfigError
from loaders.loader import worker_start
from loaders.loader.worker_start import THREAD_ENV_VARS, WorkerInit, limit_threads, seed_worker, seeded_for
from loaders.read.seeding import worker_seed


@pytest.fixture
def restore_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """limit_threads changes process-wide settings: put them back for the other tests."""
    for name in THREAD_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def restore_rngs() -> Iterator[None]:
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    yield
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])


def test_limit_threads_sets_torch_and_environment(restore_threads: None) -> None:
    limit_threads(1)
    assert torch.get_num_threads() == 1
    for name in THREAD_ENV_VARS:
        assert worker_start.os.environ[name] == "1"


def test_limit_threads_reaches_threadpoolctl_and_loaded_cv2(
        restore_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int]] = []
    fake_tpc = types.SimpleNamespace(threadpool_limits=lambda limits: calls.append(("threadpoolctl", limits)))
    fake_cv2 = types.SimpleNamespace(setNumThreads=lambda n: calls.append(("cv2", n)))
    monkeypatch.setitem(sys.modules, "threadpoolctl", fake_tpc)
    monkeypatch.setitem(sys.modules, "cv2", fake_cv2)
    limit_threads(2)
    assert calls == [("threadpoolctl", 2), ("cv2", 2)]


def test_limit_threads_never_imports_cv2(restore_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "cv2", raising=False)
    limit_threads(1)
    assert "cv2" not in sys.modules


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_limit_threads_rejects_non_positive_ints(bad: object) -> None:
    with pytest.raises(ConfigError, match="'n' must be a positive int"):
        limit_threads(bad)  # type: ignore[arg-type]


def test_worker_seeds_differ_per_worker_epoch_and_rank_and_are_pure() -> None:
    seeds = {(epoch, worker, rank): worker_seed(7, epoch, worker, rank)
             for epoch in range(4) for worker in range(8) for rank in range(3)}
    assert len(set(seeds.values())) == len(seeds)
    assert worker_seed(7, 2, 3) == seeds[(2, 3, 0)] and worker_seed(7, 2, 3, 1) == seeds[(2, 3, 1)]
    seeds = {key[:2]: value for key, value in seeds.items() if key[2] == 0}
    assert worker_seed(8, 2, 3) != seeds[(2, 3)]
    assert all(0 <= s < 2**64 for s in seeds.values())


def test_seed_worker_seeds_random_numpy_and_torch(restore_rngs: None) -> None:
    def draws() -> tuple[float, float, float]:
        return random.random(), float(np.random.rand()), float(torch.rand(()))

    seed_worker(3, 1, 0)
    first = draws()
    assert seeded_for() == (3, 1, 0, 0)
    seed_worker(3, 1, 0)
    assert draws() == first
    seed_worker(3, 1, 1)
    other_worker = draws()
    seed_worker(3, 2, 0)
    other_epoch = draws()
    assert all(a != b for a, b in zip(first, other_worker, strict=True))
    assert all(a != b for a, b in zip(first, other_epoch, strict=True))


def test_seed_worker_rejects_negative_arguments() -> None:
    with pytest.raises(ConfigError, match="'epoch' must be a non-negative int"):
        seed_worker(0, -1, 0)


def test_the_users_worker_init_fn_runs_with_thread_limits_and_seeds_in_force(
        restore_threads: None, restore_rngs: None) -> None:
    seen: list[tuple[object, ...]] = []

    def user_fn(worker_id: int) -> None:  # what a worker_init_fn can observe when it runs
        seen.append((worker_id, torch.get_num_threads(), os.environ["OMP_NUM_THREADS"], seeded_for(),
                     torch.initial_seed(), random.random()))

    epoch = types.SimpleNamespace(value=3)  # the shared int the process workers write before a pass
    WorkerInit(seed=5, threads_per_worker=2, user_fn=user_fn, epoch=epoch, rank=4)(1)
    expected_seed = worker_seed(5, 3, 1, 4)
    random.seed(expected_seed)
    assert seen == [(1, 2, "2", (5, 3, 1, 4), expected_seed >> 1, random.random())]
