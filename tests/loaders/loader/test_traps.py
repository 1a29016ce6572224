"""The start-up check of the known traps: one warning naming the fix, once per loader; none for a sound setup.

Real loaders over real datasets and workers, the open-file
limit lowered in a subprocess, the shared-memory rule checked on a real batch's size.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, Subset, get_worker_info

from loaders import DataLoader, ShardDataset, cpus_available
from loaders.loader.traps import (
    MANY_PYTHON_OBJECTS,
    OPEN_FILES_RESERVE,
    TrapInputs,
    TrapKind,
    TrapWarning,
    batch_digest,
    batch_nbytes,
    python_objects,
    shards_held_open,
    shm_free_bytes,
    shm_trap,
    startup_traps,
    stream_trap,
)
from tests.loaders.helpers import RangeDataset

ROOT = Path(__file__).resolve().parents[3]


class ManyPaths(Dataset[torch.Tensor]):
    """A map-style dataset indexing its samples through a list of Python objects (``count`` of them)."""

    def __init__(self, count: int) -> None:
        self.paths = list(range(count))

    def __len__(self) -> int:
        return 32

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(self.paths[index])


class ArrayPaths(ManyPaths):
    """The same index held as one numpy array: one object, whatever its length."""

    def __init__(self, count: int) -> None:
        self.paths = np.arange(count)  # type: ignore[assignment]  # the fix the warning names


class WholeStream(IterableDataset[torch.Tensor]):
    """Ignores get_worker_info(): every worker yields the whole stream."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(torch.arange(48).split(1))


class SplitStream(IterableDataset[torch.Tensor]):
    """Reads only this worker's share of the stream."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        for i in range(48):
            if info is None or i % info.num_workers == info.id:
                yield torch.tensor([i])


class ConstantStream(IterableDataset[torch.Tensor]):
    """Ignores get_worker_info() but yields one value: nothing tells its workers' batches apart."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter([torch.zeros(1)] * 48)


def _traps_of(loader: DataLoader[Any], epochs: int = 2) -> list[str]:
    """The TrapWarning texts raised while ``loader`` runs ``epochs`` epochs (then closes)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with loader:
            for _ in range(epochs):
                for _ in loader:
                    pass
    return [str(w.message) for w in caught if issubclass(w.category, TrapWarning)]


# ---------------------------------------------------------------- Python objects under process workers


def test_many_python_objects_under_process_workers_warn_once_naming_the_fix() -> None:
    dataset = ManyPaths(MANY_PYTHON_OBJECTS + 10)
    found = _traps_of(DataLoader(dataset, batch_size=8, num_workers=2, worker_type="process"))
    assert len(found) == 1, found
    assert "ManyPaths.paths holds about 1,000,010 Python objects" in found[0]
    assert "each of the 2 worker processes" in found[0] and "numpy" in found[0] and "13246" in found[0]


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_no_python_objects_warning_for_threads_arrays_or_small_lists(worker_type: str) -> None:
    # Threads share one copy; an array is one object; a list of 1,000 paths is nothing to warn of.
    big = ManyPaths(MANY_PYTHON_OBJECTS + 10) if worker_type == "thread" else ArrayPaths(2 * MANY_PYTHON_OBJECTS)
    for dataset in (big, ManyPaths(1000)):
        assert _traps_of(DataLoader(dataset, batch_size=8, num_workers=2, worker_type=worker_type), 1) == []


def test_python_objects_counts_entries_nested_entries_and_one_level_down() -> None:
    class Index:
        def __init__(self) -> None:
            self.pairs = [("a.jpg", 1)] * 10
            self.labels = {str(i): i for i in range(5)}

    class Holder:
        def __init__(self) -> None:
            self.index = Index()
            self.sizes = np.zeros(10**6)
            self.empty: list[int] = []

    counts = dict(python_objects(Holder()))
    assert counts == {"index.pairs": 30, "index.labels": 10, "empty": 0}  # (list + 2 per tuple), keys + values
    assert dict(python_objects(Subset(RangeDataset(), list(range(7)))))["indices"] == 7


def test_startup_rule_boundaries() -> None:
    base = TrapInputs(dataset="D", map_style=True, worker_processes=4, cpus=8)
    at = startup_traps(TrapInputs(**{**base.__dict__, "objects": (("paths", MANY_PYTHON_OBJECTS),)}))
    below = startup_traps(TrapInputs(**{**base.__dict__, "objects": (("paths", MANY_PYTHON_OBJECTS - 1),)}))
    assert [t.kind for t in at] == [TrapKind.PYTHON_OBJECTS] and below == []
    iterable = TrapInputs(**{**base.__dict__, "map_style": False, "objects": (("paths", 10**7),)})
    assert startup_traps(iterable) == []
    assert startup_traps(TrapInputs(**{**base.__dict__, "threads_per_worker": 2})) == []  # 4 x 2 = 8 CPUs
    over = startup_traps(TrapInputs(**{**base.__dict__, "threads_per_worker": 3}))
    assert [t.kind for t in over] == [TrapKind.THREADS] and "threads_per_worker=2" in over[0].message
    need = 100 + OPEN_FILES_RESERVE
    files = {**base.__dict__, "shards_open": 100, "open_files_hard": 4096}
    assert startup_traps(TrapInputs(**{**files, "open_files_limit": need})) == []
    low = startup_traps(TrapInputs(**{**files, "open_files_limit": need - 1}))
    assert [t.kind for t in low] == [TrapKind.OPEN_FILES] and f"ulimit -n {need}" in low[0].message
    assert startup_traps(TrapInputs(**{**files, "open_files_limit": None})) == []  # unlimited


# ---------------------------------------------------------------- intra-op threads x worker processes


def test_threads_per_worker_above_the_cpus_warns_and_one_thread_does_not() -> None:
    cpus = cpus_available()
    found = _traps_of(DataLoader(RangeDataset(8), batch_size=4, num_workers=1, worker_type="process",
                                 threads_per_worker=cpus + 1), 1)
    assert len(found) == 1 and f"threads_per_worker={cpus + 1}" in found[0] and f"on the {cpus} CPUs" in found[0]
    assert _traps_of(DataLoader(RangeDataset(8), batch_size=4, num_workers=2, worker_type="process"), 1) == []


# ---------------------------------------------------------------- an IterableDataset every worker reads whole


def test_a_stream_every_worker_reads_whole_warns_once_naming_get_worker_info() -> None:
    found = _traps_of(DataLoader(WholeStream(), batch_size=4, num_workers=2))
    assert len(found) == 1, found
    assert "each yield the same batches of WholeStream" in found[0] and "get_worker_info()" in found[0]


@pytest.mark.parametrize("dataset", [SplitStream(), ConstantStream()], ids=["split", "constant"])
def test_a_split_or_constant_stream_is_not_blamed(dataset: IterableDataset[torch.Tensor]) -> None:
    assert _traps_of(DataLoader(dataset, batch_size=4, num_workers=2)) == []


def test_stream_rule() -> None:
    a, b, c = b"a", b"b", b"c"
    assert stream_trap("D", {0: [a, b], 1: [a, b]}, 2) is not None
    assert stream_trap("D", {0: [a, b], 1: [a]}, 2) is not None  # the second worker's stream ended early
    assert stream_trap("D", {0: [a, a], 1: [a, a]}, 2) is None  # constant: cannot tell
    assert stream_trap("D", {0: [a, b], 1: [c, b]}, 2) is None  # different first batches: split
    assert stream_trap("D", {0: [a, b], 1: [a, c]}, 2) is None
    assert stream_trap("D", {0: [a, b]}, 2) is None  # one worker gave batches


def test_batch_digest_tells_equal_from_different_batches() -> None:
    image = torch.arange(12, dtype=torch.uint8).reshape(3, 4)
    batch: dict[str, Any] = {"image": image, "label": (1, "cat"), "x": np.ones(3)}
    same: dict[str, Any] = {"x": np.ones(3), "label": (1, "cat"), "image": image.clone()}
    assert batch_digest(batch) == batch_digest(same)
    changed = {**same, "image": image.clone()}
    changed["image"][2, 3] = 0
    for other in (changed, {**same, "label": (1, "dog")}, {**same, "x": np.ones(3, dtype=np.float32)},
                  {**same, "image": image.reshape(4, 3)}):
        assert batch_digest(other) != batch_digest(batch)


# ---------------------------------------------------------------- /dev/shm and the batches in flight


def test_shm_rule_on_a_real_batch() -> None:
    loader: DataLoader[torch.Tensor] = DataLoader(RangeDataset(16), batch_size=4, num_workers=2, worker_type="process")
    with loader:
        batch = next(iter(loader))
    size = batch_nbytes({"x": batch, "pair": (batch, "text"), "array": np.zeros(5, dtype=np.uint8)})
    assert size == 2 * 4 * 8 + 5  # two int64 [4] tensors and 5 bytes; the text travels pickled
    need = size * (2 * 2 + 2)  # 2 workers x prefetch 2, and two more
    assert shm_trap(batch_bytes=size, worker_processes=2, prefetch_factor=2, shm_free=need) is None
    trap = shm_trap(batch_bytes=size, worker_processes=2, prefetch_factor=2, shm_free=need - 1)
    assert trap is not None and trap.kind is TrapKind.SHM and "--shm-size" in trap.message
    assert "worker_type='thread'" in trap.message
    assert shm_trap(batch_bytes=size, worker_processes=0, prefetch_factor=2, shm_free=0) is None  # threads
    assert shm_trap(batch_bytes=size, worker_processes=2, prefetch_factor=2, shm_free=None) is None  # no /dev/shm


def test_shm_free_bytes_reads_the_file_system(tmp_path: Path) -> None:
    free = shm_free_bytes(tmp_path)
    assert free is not None and free > 0
    assert shm_free_bytes(tmp_path / "missing") is None


# ---------------------------------------------------------------- the open-file limit and the shards


_LIMITED = """
import json, resource, sys, warnings
from loaders import DataLoader, ShardDataset
from loaders.loader.traps import OPEN_FILES_RESERVE, TrapWarning
shards, hard = int(sys.argv[2]), resource.getrlimit(resource.RLIMIT_NOFILE)[1]
found = {}
for limit in (shards + OPEN_FILES_RESERVE - 1, shards + OPEN_FILES_RESERVE):
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with DataLoader(ShardDataset(sys.argv[1], fields=("cls",)), batch_size=4, num_workers=0) as loader:
            next(iter(loader))
    found[limit] = [str(w.message) for w in caught if issubclass(w.category, TrapWarning)]
print(json.dumps(found))
"""


def test_an_open_file_limit_below_the_shards_warns(image_shards: Path) -> None:
    shards = shards_held_open(ShardDataset(image_shards))
    assert shards is not None and shards > 1
    run = subprocess.run([sys.executable, "-c", _LIMITED, str(image_shards), str(shards)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    below, enough = json.loads(run.stdout).values()
    assert len(below) == 1 and f"{shards} shards of ShardDataset" in below[0] and "--samples-per-shard" in below[0]
    assert enough == []


# ---------------------------------------------------------------- sound setups: nothing to say


@pytest.mark.parametrize("worker_type", ["auto", "process"])
def test_a_sound_shard_loader_raises_no_trap_warning(image_shards: Path, worker_type: str) -> None:
    loader: DataLoader[Any] = DataLoader(ShardDataset(image_shards, fields=("cls",)), batch_size=8, num_workers=2,
                                         worker_type=worker_type)
    assert _traps_of(loader) == []
