"""Elastic resume of sample datasets, as a training job breaks it: save on one topology, resume on another.

A job of W ranks x B rows (one ``loaders.DataLoader`` per rank, in this process; the topology
given to each rank's ``ShardDataset`` / ``ParquetShardDataset``, or read from RANK / WORLD_SIZE)
reads some steps; one rank's state goes through ``torch.save`` + ``torch.load(weights_only=True)``
and a job of W' x B' (other workers: threads, forked or forkserver processes) loads it on
every rank. Each step's global batch is checked as the set of samples it holds against the
epoch's order as one rank reading one row at a time sees it: with B'W' = BW exactly the
uninterrupted run's global batches, otherwise the samples from the saved position on, nothing
lost or repeated; then the next epoch in full.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from loaders import ConfigError, DataLoader, ParquetShardDataset, ShardDataset, Topology
from tests.loaders.helpers import default_start_method, through_torch_save
from tests.loaders.loader.sample_ranks import (
    SEED,
    Job,
    MakeDataset,
    end_job,
    epoch_order,
    iterate,
    sample_job,
    sample_steps,
    steps,
    tiny_image_shards,
)

NUM_IMAGES = 196  # 6 global batches of 32 and 4 more: no padding for 4 x 8, 2 x 16, nor 3 x 5 from 64 or 160


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_image_shards(tmp_path_factory.mktemp("elastic-images"), NUM_IMAGES, per_shard=12)


@pytest.fixture
def kinds(images: Path, table_shards: Path) -> dict[str, MakeDataset]:
    return {"tar": lambda topology: ShardDataset(images, fields=("cls",), topology=topology),
            "parquet": lambda topology: ParquetShardDataset(table_shards, columns=["id"], topology=topology)}


def _save_job(make: MakeDataset, saved: Job, count: int | None, *, rank: int = 1, launch: str = "topology",
          monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[dict[str, Any], int]:
    """Run the saved job ``count`` steps (None: its whole epoch 0); (rank ``rank``'s state after torch.save/load,
    the samples consumed by all ranks)."""
    loaders = sample_job(make, saved, launch=launch, monkeypatch=monkeypatch)
    order = epoch_order(make, 0)
    global_batch = saved[0] * saved[1]
    iterators = iterate(loaders)
    head = sample_steps(iterators, count=count)
    assert head == steps(order, 0, global_batch)[:len(head)]
    state = through_torch_save(loaders[rank].state_dict())
    end_job(loaders)
    return state, min(len(head) * global_batch, len(order))


def _check_the_rest(make: MakeDataset, loaders: list[DataLoader[Any]], consumed: int, resumed: Job) -> None:
    """The rest of epoch 0 from ``consumed`` on (when the state was mid-epoch), then epoch 1 in full."""
    world_size, global_batch = resumed[0], resumed[0] * resumed[1]
    if loaders[0].epoch == 0:
        assert sample_steps(loaders) == steps(epoch_order(make, 0), consumed, global_batch, world_size)
    assert all(loader.epoch == 1 for loader in loaders)
    assert sample_steps(loaders) == steps(epoch_order(make, 1), 0, global_batch, world_size)


# (dataset, saved job, steps before saving (None: the whole epoch), resumed job, launch, start method)
CASES: dict[str, tuple[str, Job, int | None, Job, str, str | None]] = {
    "tar-4x8-thread-to-2x16-forked": ("tar", (4, 8, 2, "thread"), 2, (2, 16, 3, "process"), "topology", None),
    "tar-4x8-forked-to-3x5-thread-env": ("tar", (4, 8, 2, "process"), 2, (3, 5, 0, "thread"), "environment", None),
    "tar-4x8-thread-to-2x16-forkserver": ("tar", (4, 8, 0, "thread"), 3, (2, 16, 3, "process"), "topology",
                                          "forkserver"),
    "parquet-4x8-thread-to-2x16-thread": ("parquet", (4, 8, 2, "thread"), 3, (2, 16, 2, "thread"), "topology", None),
    "tar-end-4x8-to-2x16-env": ("tar", (4, 8, 2, "thread"), None, (2, 16, 2, "thread"), "environment", None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_job_resumes_on_another_topology(kinds: dict[str, MakeDataset], case: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    kind, saved, count, resumed, launch, method = CASES[case]
    make = kinds[kind]
    state, consumed = _save_job(make, saved, count, launch=launch, monkeypatch=monkeypatch)
    assert state["version"] == 4 and state["samples"]["global_position"] == (consumed if count else 0)
    if method is None:
        loaders = sample_job(make, resumed, launch=launch, monkeypatch=monkeypatch)
    else:
        with default_start_method(method):
            loaders = sample_job(make, resumed, launch=launch, monkeypatch=monkeypatch)
    for loader in loaders:
        loader.load_state_dict(state)
    assert {loader.epoch for loader in loaders} == {0 if count is not None else 1}
    if method is None:
        _check_the_rest(make, loaders, consumed, resumed)
    else:
        with default_start_method(method):
            _check_the_rest(make, loaders, consumed, resumed)
    end_job(loaders)


def test_4x8_then_2x16_then_3x5_read_every_sample_of_the_epoch_once(kinds: dict[str, MakeDataset],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 of 4 ranks x 2 process workers x 8 saves after 2 steps; 2 ranks x 3 thread workers x 16 (the same
    global batch) read 3 steps, the same as the uninterrupted run's, and rank 0 saves; 3 ranks x 5 read the rest."""
    make = kinds["tar"]
    order = epoch_order(make, 0)
    first, consumed = _save_job(make, (4, 8, 2, "process"), 2)
    second = sample_job(make, (2, 16, 3, "thread"), launch="environment", monkeypatch=monkeypatch)
    for loader in second:
        loader.load_state_dict(first)
    middle = sample_steps(iterate(second), count=3)
    assert middle == steps(order, 0, 32)[2:5]
    state = through_torch_save(second[0].state_dict())
    end_job(second)
    third = sample_job(make, (3, 5, 2, "process"))
    for loader in third:
        loader.load_state_dict(state)
    rest = sample_steps(third)
    assert rest == steps(order, 160, 15)
    read = [s for step in global_steps_of(order, 64) + middle + rest for s in step]
    assert sorted(read) == sorted(order) == list(range(NUM_IMAGES))  # every sample once
    assert {loader.order_digest(0, NUM_IMAGES, epoch=0) for loader in third} == {
        loader.order_digest(0, NUM_IMAGES, epoch=0) for loader in sample_job(make, (1, 1, 0, "thread"))}
    end_job(third)


def global_steps_of(order: list[int], consumed: int) -> list[list[int]]:
    """What the first job read: the epoch's first ``consumed`` samples, in its global batches of 32."""
    return steps(order[:consumed], 0, 32)


@pytest.mark.parametrize("count", [3, None])
def test_resume_then_set_epoch_as_the_loop_does(kinds: dict[str, MakeDataset], count: int | None) -> None:
    """``for epoch in range(saved_epoch, E): loader.set_epoch(epoch)`` after the load keeps the resume; right after
    an epoch's last batch, set_epoch(that epoch) reads nothing more of it."""
    make = kinds["tar"]
    state, consumed = _save_job(make, (2, 16, 0, "thread"), count)
    loaders = sample_job(make, (4, 8, 2, "thread"))
    for loader in loaders:
        loader.load_state_dict(state)
        loader.set_epoch(0)
    assert sample_steps(loaders) == ([] if count is None else steps(epoch_order(make, 0), consumed, 32))
    for loader in loaders:
        loader.set_epoch(1)
    assert sample_steps(loaders) == steps(epoch_order(make, 1), 0, 32)
    end_job(loaders)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_peek_before_or_after_loading_moves_nothing(kinds: dict[str, MakeDataset], when: str) -> None:
    make = kinds["tar"]
    state, consumed = _save_job(make, (4, 8, 0, "thread"), 2)
    loaders = sample_job(make, (2, 16, 2, "process"))
    for loader in loaders:
        if when == "before":
            next(iter(loader))  # starts persistent workers that hold the dataset as it was
        loader.load_state_dict(state)
        if when == "after":
            next(iter(loader))  # e.g. the model built from a batch's shape
    assert sample_steps(loaders) == steps(epoch_order(make, 0), consumed, 32)
    end_job(loaders)


def test_a_state_of_other_data_seed_or_order_is_refused_naming_what_differs(kinds: dict[str, MakeDataset],
                                                                             images: Path, table_shards: Path,
                                                                             tmp_path: Path) -> None:
    state, _ = _save_job(kinds["tar"], (2, 4, 0, "thread"), 3)
    blocks, _ = _save_job(lambda t: ShardDataset(images, fields=("cls",), order="blocks", block_size=12, topology=t),
                      (2, 4, 0, "thread"), 3)
    other = tiny_image_shards(tmp_path, NUM_IMAGES, per_shard=14)  # the same images in other shards
    refused = {
        r"data digest: saved '[0-9a-f]{64}', now '[0-9a-f]{64}'": (state, ShardDataset(other, fields=("cls",)), {}),
        "'seed': expected 12 .* got 11": (state, ShardDataset(images, fields=("cls",)), {"seed": SEED + 1}),
        "order mode: saved 'global', now 'blocks'": (state, ShardDataset(images, fields=("cls",), order="blocks"), {}),
        "block_size: saved 12, now 16": (blocks, ShardDataset(images, fields=("cls",), order="blocks",
                                                              block_size=16), {}),
        "data num_samples: saved 196, now 392": (state, ParquetShardDataset(table_shards, order="global"), {}),
    }
    for message, (saved, dataset, options) in refused.items():
        loader = DataLoader(dataset, batch_size=4, num_workers=0, **{"seed": SEED, "shuffle": True, **options})
        with pytest.raises(ConfigError, match=message):
            loader.load_state_dict(saved)
        assert loader.epoch == 0 and loader.batches_consumed == 0  # nothing changed


def test_the_order_digest_is_the_same_on_every_topology_and_changes_with_the_epoch(
        kinds: dict[str, MakeDataset]) -> None:
    make = kinds["tar"]
    digests = {loader.order_digest(40, 150) for spec in ((4, 8, 0, "thread"), (3, 5, 0, "thread"), (1, 1, 0, "thread"))
               for loader in sample_job(make, spec)}
    assert len(digests) == 1
    (one,) = sample_job(make, (1, 1, 0, "thread"))
    assert one.order_digest(40, 150, epoch=1) not in digests and one.order_digest(40, 151) not in digests
    (other_seed,) = sample_job(make, (1, 1, 0, "thread"), seed=SEED + 1)
    assert other_seed.order_digest(40, 150) not in digests
    with pytest.raises(IndexError, match=r"global positions \[0, 197\) outside the epoch's 196 samples"):
        one.order_digest(0, NUM_IMAGES + 1)


def test_a_version_2_state_resumes_by_global_position(kinds: dict[str, MakeDataset]) -> None:
    """A state the previous version wrote (this rank's batches of DistributedSampler's split, under "plan")."""
    make = kinds["tar"]
    state, consumed = _save_job(make, (4, 8, 0, "thread"), 2)
    legacy = {key: value for key, value in state.items() if key != "samples"}
    legacy.update(version=2, plan={"sampler": None, "world_size": 4})
    loaders = sample_job(make, (2, 16, 2, "thread"))
    for loader in loaders:
        loader.load_state_dict(legacy)
    assert sample_steps(loaders) == steps(epoch_order(make, 0), consumed, 32)
    with pytest.raises(ConfigError, match="not this dataset's own order"):
        sampled = {**legacy, "plan": {"sampler": {"x": 1}, "world_size": 4}}  # a user's sampler's state
        sample_job(make, (2, 16, 0, "thread"))[0].load_state_dict(sampled)


def test_the_last_global_batch_is_padded_as_distributed_sampler_does_or_dropped(kinds: dict[str, MakeDataset]) -> None:
    """196 samples on 3 ranks x 5: 13 global batches and one left, dealt with 2 of the epoch's first samples again
    so that every rank reads a batch of 1; dropped with drop_last."""
    make = kinds["tar"]
    order = epoch_order(make, 0)
    for drop_last, expected in ((False, steps(order, 0, 15)[:13] + [sorted(order[195:] + order[:2])]),
                                (True, steps(order, 0, 15)[:13])):
        loaders = sample_job(make, (3, 5, 0, "thread"), drop_last=drop_last)
        assert {len(loader) for loader in loaders} == {len(expected)}
        assert sample_steps(loaders) == expected
        end_job(loaders)


def test_with_the_node_cache_each_rank_plans_the_shards_it_reads_from_the_resume_point(
        images: Path, tmp_path: Path) -> None:
    """A local folder read through the node cache (order blocks of one shard): after 4 x 8 -> 2 x 16, each rank's
    plan of the resumed epoch is its own shards from the saved position on, and no rank of the old job's."""

    def make(topology: Topology | None) -> ShardDataset:
        return ShardDataset(images, fields=("cls",), topology=topology, cache_dir=tmp_path / "cache",
                            cache_limit="64MiB")

    state, consumed = _save_job(make, (4, 8, 2, "thread"), 2)
    loaders = sample_job(make, (2, 16, 2, "thread"))
    for loader in loaders:
        loader.load_state_dict(state)
    batches = [list(loader) for loader in loaders]
    assert sample_steps(batches) == steps(epoch_order(make, 0), consumed, 32)
    for rank, loader in enumerate(loaders):
        read = [s for batch in batches[rank] for s in batch["__shard__"]]
        shards = [s for k, s in enumerate(read) if k == 0 or read[k - 1] != s]
        plan = loader.dataset.files.cache.planned_uses(0)  # type: ignore[attr-defined]
        assert {stream.rsplit(":", 1)[1] for stream in plan} <= {"rank0", "rank1"}, sorted(plan)
        (mine,) = [uses for stream, uses in plan.items() if stream.endswith(f":rank{rank}")]
        assert list(mine) == shards
    end_job(loaders)


def test_a_new_run_of_the_resumed_epoch_reads_it_on_its_own_grid(kinds: dict[str, MakeDataset]) -> None:
    """After a resume on another global batch (a shifted grid) and the rest of that epoch, ``set_epoch`` of the
    same epoch reads it whole, from its start: the loaded state applied to the run it resumed only."""
    make = kinds["tar"]
    state, consumed = _save_job(make, (1, 5, 0, "thread"), 7, rank=0)  # 35 samples: not a multiple of 2 x 4
    loaders = sample_job(make, (2, 4, 0, "thread"))
    for loader in loaders:
        loader.load_state_dict(state)
    order = epoch_order(make, 0)
    assert sample_steps(loaders) == steps(order, consumed, 8, 2)
    for loader in loaders:
        loader.set_epoch(0)
    iterators = iterate(loaders)
    assert sample_steps(iterators, count=2) == steps(order, 0, 8)[:2]
    assert {loader.state_dict()["samples"]["global_position"] for loader in loaders} == {16}
    assert {len(loader) for loader in loaders} == {len(steps(order, 0, 8))}
    end_job(loaders)


@pytest.mark.parametrize("kind,resumed,drop_last", [("tar", (3, 5, 0, "thread"), False),
                                                   ("tar", (3, 5, 2, "process"), True),
                                                   ("parquet", (5, 2, 0, "thread"), False)])
def test_a_resume_on_a_global_batch_that_does_not_divide_the_position_delivers_nothing_twice(
        kinds: dict[str, MakeDataset], kind: str, resumed: Job, drop_last: bool) -> None:
    """5 steps of 4 ranks x 4 (80 samples), resumed on 3 x 5 (15 does not divide 80) or 5 x 2: no sample of the
    first 5 steps again, every later one read; the only repeats are the last global batch's padding, taken from
    the resumed run's own first samples (none with drop_last, which drops the tail)."""
    make = kinds[kind]
    order = epoch_order(make, 0)
    loaders = sample_job(make, (4, 4, 0, "thread"), drop_last=drop_last)
    head = sample_steps(iterate(loaders), count=5)
    state = through_torch_save(loaders[1].state_dict())
    end_job(loaders)
    loaders = sample_job(make, resumed, drop_last=drop_last)
    for loader in loaders:
        loader.load_state_dict(state)
    rest = sample_steps(loaders)
    end_job(loaders)
    first = {s for step in head for s in step}
    assert first == set(order[:80]) and not first & {s for step in rest for s in step}
    global_batch, world_size = resumed[0] * resumed[1], resumed[0]
    read = Counter(s for step in rest for s in step)
    tail = (len(order) - 80) % global_batch
    if drop_last:
        assert read == Counter(order[80:len(order) - tail])
    else:
        padding = read - Counter(order[80:])
        assert not Counter(order[80:]) - read and sum(padding.values()) == -tail % world_size > 0
        assert set(padding) <= set(order[80:80 + world_size])
    assert rest == steps(order, 80, global_batch, world_size)[:len(rest)]


FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_a_state_saved_by_the_previous_version_resumes_or_is_refused_naming_the_version(
        kinds: dict[str, MakeDataset]) -> None:
    """``fixtures/samples_state_v3.json``: rank 1's state after 5 steps of 4 ranks x 4, saved by 50a6471 (loader
    state version 3, the source's document version 1). It resumes on 3 x 5 from sample 80, nothing of the first
    steps again; a version this code cannot read is refused naming it and what to do."""
    saved = json.loads((FIXTURES / "samples_state_v3.json").read_text())
    state, first = saved["state"], saved["first_steps"]
    assert state["version"] == 3 and state["samples"]["version"] == 1
    make = kinds["tar"]
    order = epoch_order(make, 0)
    assert first == steps(order, 0, 16)[:5]  # the same data and order as then
    loaders = sample_job(make, (3, 5, 0, "thread"))
    for loader in loaders:
        loader.load_state_dict(state)
    assert sample_steps(loaders) == steps(order, 80, 15, 3)
    assert {(loader.epoch, loader.state_dict()["samples"]["global_position"]) for loader in loaders} == {(1, 0)}
    end_job(loaders)
    (loader,) = sample_job(make, (1, 4, 0, "thread"))
    with pytest.raises(ConfigError, match=r"version: expected one of \(2, 3, 4\), got 9; resume with the loaders "
                                          "version that saved it"):
        loader.load_state_dict({**state, "version": 9})
    with pytest.raises(ConfigError, match="'samples' must be a global-position state of version 2 "
                                          r"\(got version 7\); hint: load it with the DataLoader itself"):
        loader.load_state_dict({**loader.state_dict(), "samples": {**state["samples"], "version": 7}})
    assert loader.epoch == 0 and loader.batches_consumed == 0
    end_job([loader])
