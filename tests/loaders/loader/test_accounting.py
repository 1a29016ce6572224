"""stats(): the accounting against the training loop's own clock, worker timings carried back from threads and
processes, the parts our shard datasets report (read, decode, transform), the profiler ranges, the log line and
the flat dict. No wall-clock bounds: sleeps are lower bounds,
and shares are compared where the ratios are large."""

from __future__ import annotations

import logging
import sys
import threading
import time
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from loaders import DataLoader, ParquetShardDataset, ShardDataset
from loaders.loader.loader_stats import BOTTLENECKS, STAGES
from loaders.read.transforms import CenterCropDecode, Compose, DecodeLabel
from loaders.stage_clock import timed_stage
from tests.samples import image_dataset, photo_jpeg

SLEEP_S = 0.01


class Sleepy(Dataset[torch.Tensor]):
    """Items that wait ``sleep_s`` each (a remote read), optionally reported as the "read" part."""

    def __init__(self, n: int, sleep_s: float = SLEEP_S, *, report: bool = False) -> None:
        self.n, self.sleep_s, self.report = n, sleep_s, report

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.report:
            with timed_stage("read"):
                time.sleep(self.sleep_s)
        else:
            time.sleep(self.sleep_s)
        return torch.tensor(index)


def consume(loader: DataLoader[torch.Tensor], step_s: float = 0.0) -> list[int]:
    seen: list[int] = []
    for batch in loader:
        seen.extend(batch.tolist())
        if step_s:
            time.sleep(step_s)
    return seen


def test_slow_data_and_slow_step_are_told_apart_by_the_loops_own_clock() -> None:
    slow_data: DataLoader[Any] = DataLoader(Sleepy(40, 0.02), batch_size=2, num_workers=0)
    consume(slow_data)
    slow_step: DataLoader[Any] = DataLoader(Sleepy(40, 0.0), batch_size=2, num_workers=0)
    consume(slow_step, step_s=0.04)
    data, step = slow_data.stats(), slow_step.stats()
    assert data.steps == step.steps == 20
    assert data.window_steps == 19  # the first batch of a pass has no step before it
    assert data.wait_fraction > 0.5 > step.wait_fraction
    assert data.bottleneck == "dataset"  # "step" needs a wait under 5%: a threshold, tested on the pure rule
    assert data.stages["dataset"] >= 2 * 0.02  # two sleeps per batch, at least
    assert step.step_s >= 0.04 and data.wait_s >= 2 * 0.02
    assert data.read_cpu_share < 0.5  # sleeping holds no CPU


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_worker_timings_travel_back_with_each_batch(worker_type: str) -> None:
    loader: DataLoader[Any] = DataLoader(Sleepy(24, report=True), batch_size=3, num_workers=2, worker_type=worker_type)
    assert consume(loader) == list(range(24))
    stats = loader.stats()
    assert stats.stages["dataset"] >= 3 * SLEEP_S and stats.stages["read"] >= 3 * SLEEP_S
    assert stats.stages["collate"] > 0 and stats.workers == 2 and stats.worker_type == worker_type
    assert 0 < stats.worker_busy <= 1
    assert set(stats.stages) == set(STAGES) and stats.bottleneck in BOTTLENECKS


def test_the_wait_is_a_named_range_in_profiler_traces() -> None:
    loader: DataLoader[Any] = DataLoader(Sleepy(6, 0.0), batch_size=2, num_workers=0)
    # The autograd profiler without kineto: the same record_function ranges, without kineto's start-up (~9 s).
    with torch.autograd.profiler.profile(use_kineto=False) as profiler:
        consume(loader)
    names = [event.name for event in profiler.function_events]
    assert names.count("loaders.DataLoader.next") == 4  # three batches and the call that ends the epoch


def test_the_periodic_log_line_is_opt_in(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="loaders.loader.tuner"):
        consume(DataLoader(Sleepy(8, 0.001), batch_size=2, num_workers=0))
        assert not [r for r in caplog.records if "DataLoader: waits" in r.getMessage()]
        consume(DataLoader(Sleepy(8, 0.001), batch_size=2, num_workers=0, stats_log_s=1e-6))
    assert [r for r in caplog.records if "DataLoader: waits" in r.getMessage()]


def test_as_dict_is_flat_scalars_for_loggers() -> None:
    loader: DataLoader[Any] = DataLoader(Sleepy(8, 0.0), batch_size=2, num_workers=0)
    consume(loader)
    flat = loader.stats().as_dict()
    assert flat["loader/steps"] == 4 and "loader/stage/dataset_s" in flat and flat["loader/decode/mode"] == "cpu"
    assert all(isinstance(value, (int, float, str)) for value in flat.values())


def test_stats_is_a_frozen_snapshot() -> None:
    loader: DataLoader[Any] = DataLoader(Sleepy(8, 0.0), batch_size=2, num_workers=0)
    before = loader.stats()
    consume(loader)
    assert before.steps == 0 and loader.stats().steps == 4
    with pytest.raises(AttributeError):
        before.steps = 3  # type: ignore[misc]


def test_no_process_warning_for_many_thread_workers() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader: DataLoader[Any] = DataLoader(Sleepy(64, 0.0), batch_size=2, num_workers=32, worker_type="thread")
        consume(loader)
    assert not [w for w in caught if "worker processes" in str(w.message)]
    assert loader.stats().workers == 32


@pytest.mark.parametrize(("value", "name"), [("yes", "autotune"), (0.0, "stats_log_s"), (-1, "stats_log_s")])
def test_bad_options_are_refused_at_construction(value: object, name: str) -> None:
    from loaders import ConfigError

    with pytest.raises(ConfigError, match=name):
        DataLoader(Sleepy(4), batch_size=2, **{name: value})  # type: ignore[arg-type]


# ---------------------------------------------------------------- our shard datasets report their parts

BIG_IMAGES = 8  # 2000 x 2000 JPEGs: decoding one costs far more than reading its bytes or a 16-pixel crop


def square_label(sample: dict[str, Any], rng: Any) -> dict[str, Any]:
    """A user's own Parquet transform: a little Python per row (module level: worker processes pickle it)."""
    return {**sample, "id_squared": int(sample["id"]) ** 2}


@pytest.fixture(scope="module")
def big_image_shards(tmp_path_factory: pytest.TempPathFactory) -> Any:
    images = [photo_jpeg(2000, 2000, seed=i) for i in range(BIG_IMAGES)]
    return image_dataset(tmp_path_factory.mktemp("big-images"), images, per_shard=4).shards


def assert_parts_within_the_dataset(stages: Any, parts: tuple[str, ...]) -> None:
    assert all(stages[name] > 0 for name in parts), dict(stages)
    assert stages["read"] + stages["decode"] + stages["transform"] <= stages["dataset"], dict(stages)


@pytest.mark.parametrize(("num_workers", "worker_type", "method"), [
    (0, "thread", None), (2, "thread", None), (2, "process", "fork"), (1, "process", "spawn")])
def test_shard_dataset_reports_read_decode_and_transform(big_image_shards: Any, num_workers: int, worker_type: str,
                                                         method: str | None) -> None:
    dataset = ShardDataset(big_image_shards, transform=Compose([CenterCropDecode(16), DecodeLabel()]))
    options: dict[str, Any] = {} if method is None else {"multiprocessing_context": method}
    loader: DataLoader[Any] = DataLoader(dataset, batch_size=2, num_workers=num_workers, worker_type=worker_type,
                                         **options)
    labels = [label for batch in loader for label in batch["label"].tolist()]
    assert labels == list(range(BIG_IMAGES))  # the same samples in the same order, timed or not
    stats = loader.stats()
    assert_parts_within_the_dataset(stats.stages, ("read", "decode", "transform"))
    assert stats.bottleneck == "decode"  # a whole 2000 x 2000 JPEG decode (at 1/8) for a 16-pixel crop
    assert any("--resize-short" in sentence and "decode='device'" in sentence for sentence in stats.advice)


def test_parquet_dataset_reports_its_reads_and_transform(table_shards: Any) -> None:
    dataset = ParquetShardDataset(table_shards, columns=["id"], transform=square_label)
    loader: DataLoader[Any] = DataLoader(dataset, batch_size=8, num_workers=2, worker_type="thread")
    rows = [value for batch in loader for value in batch["id_squared"].tolist()]
    assert len(rows) == len(dataset)
    stages = loader.stats().stages
    assert_parts_within_the_dataset(stages, ("read", "transform"))
    assert stages["decode"] == 0  # no image in these rows: nothing decoded


def test_stats_from_another_thread_is_a_consistent_snapshot() -> None:
    """A profiler's thread reads stats() while the loop runs and the controller retunes: never an error, never a
    decision without its knobs (thread switches forced often, so that the reads land mid-update)."""
    loader: DataLoader[Any] = DataLoader(Sleepy(400, 0.001), batch_size=2, num_workers=1, worker_type="thread",
                                         autotune=True)
    done = threading.Event()
    errors: list[BaseException] = []
    snapshots: list[Any] = []

    def read() -> None:
        while not done.is_set():
            try:
                snapshots.append(loader.stats())
            except Exception as err:  # noqa: BLE001 - what the test looks for
                errors.append(err)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    reader = threading.Thread(target=read)
    try:
        reader.start()
        assert consume(loader) == list(range(400))
    finally:
        done.set()
        reader.join()
        sys.setswitchinterval(interval)
    assert not errors and len(snapshots) > 10
    assert [s.steps for s in snapshots] == sorted(s.steps for s in snapshots)
    for stats in snapshots:
        assert stats.window_steps <= stats.steps and set(stats.stages) == set(STAGES)
        counts = [d.new for d in stats.tuning if d.knob == "num_workers"]
        assert not counts or counts[-1] == stats.workers
    assert any(d.knob == "num_workers" for d in snapshots[-1].tuning)  # the controller did retune meanwhile
