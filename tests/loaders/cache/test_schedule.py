"""The pure planning core (next use, prefetch order, Belady's eviction order) and the eviction it drives."""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from loaders.cache import NextUse, Schedule, ShardCache
from loaders.cache.schedule import eviction_order
from tests.remote.fixtures import write_dataset
from tests.samples import wait_until

names = st.sampled_from("abcdefgh")
uses = st.dictionaries(st.sampled_from(["r0", "r1", "r2"]), st.lists(names, max_size=12), min_size=1, max_size=3)


def test_distances_cross_the_epoch_boundary() -> None:
    schedule = Schedule().with_epoch(0, {"r0": ["a", "b", "c"]}).with_epoch(1, {"r0": ["c", "d", "a"]})
    at = {"r0": NextUse(0, 1)}
    assert schedule.distances(at) == {"b": 0, "c": 1, "d": 3, "a": 4}
    assert schedule.upcoming(at) == ["b", "c", "d", "a"]
    assert schedule.distances({"r0": NextUse(1, 0)}) == {"c": 0, "d": 1, "a": 2}


def test_the_soonest_stream_decides_and_unplanned_streams_start_at_the_beginning() -> None:
    schedule = Schedule().with_epoch(3, {"r0": ["a", "b"], "r1": ["b", "a"]})
    assert schedule.start() == NextUse(3, 0)
    assert schedule.distances({}) == {"a": 0, "b": 0}
    assert schedule.distances({"r0": NextUse(3, 1)}) == {"b": 0, "a": 1}


def test_locate_finds_the_use_a_reader_is_at() -> None:
    schedule = Schedule().with_epoch(0, {"r0": ["a", "b", "a", "c"]})
    assert schedule.locate("r0", 0, "a", None) == NextUse(0, 0)
    assert schedule.locate("r0", 0, "a", NextUse(0, 1)) == NextUse(0, 2)
    assert schedule.locate("r0", 0, "b", NextUse(0, 3)) == NextUse(0, 1)  # a straggler's earlier use
    assert schedule.locate("r0", 0, "z", None) is None and schedule.locate("r9", 0, "a", None) is None


def test_old_epochs_are_forgotten() -> None:
    schedule = Schedule()
    for epoch in range(5):
        schedule = schedule.with_epoch(epoch, {"r0": ["a"]}, keep_from=epoch - 1)
    assert list(schedule.epochs) == [3, 4]


@given(uses, st.integers(0, 12))
def test_distance_is_the_first_use_from_the_reader(plan: dict[str, list[str]], index: int) -> None:
    schedule = Schedule().with_epoch(0, plan)
    cursors = {s: NextUse(0, min(index, len(u))) for s, u in plan.items()}
    distances = schedule.distances(cursors)
    for name in "abcdefgh":
        firsts = [u.index(name, cursors[s].index) - cursors[s].index for s, u in plan.items()
                  if name in u[cursors[s].index:]]
        assert distances.get(name, math.inf) == min(firsts, default=math.inf)
    order = schedule.upcoming(cursors)
    assert sorted(order) == sorted(distances) and [distances[n] for n in order] == sorted(distances.values())


@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 20)), st.sets(st.sampled_from("abcdefgh")))
def test_eviction_takes_the_furthest_next_use_first(distance: dict[str, int], keys: set[str]) -> None:
    order = eviction_order(keys, distance)
    assert sorted(order) == sorted(keys)
    seen = [distance.get(k, math.inf) for k in order]
    assert seen == sorted(seen, reverse=True)  # never-needed first, then by distance, furthest first


def _objects(cache: ShardCache) -> set[str]:
    by_key = {e.key: e.name for e in cache.catalog.entries.values()}
    return {by_key[k] for k in os.listdir(cache.layout.objects)}


def test_a_full_cache_evicts_the_shard_needed_last_and_never_one_being_read(tmp_path: Path) -> None:
    dataset = write_dataset(f"file://{tmp_path / 'ds'}", [50_000] * 5, seed=8)
    s0, s1, s2, s3, _ = dataset.shards
    # Room for three shards (13 blocks each) beside the cache's own files, not four.
    limit = 3 * 53_248 + (256 << 10) + 40_960
    with ShardCache.open_dataset(tmp_path / "ds", cache_dir=tmp_path / "c", cache_limit=limit,
                                 prefetch=False) as cache:
        cache.plan(0, {"r0": [s0, s1, s2, s3, s0, s1]})
        for name in (s0, s1, s2):
            cache.open(name, stream="r0", epoch=0).release()
        assert _objects(cache) == {s0, s1, s2}
        cache.open(s3, stream="r0", epoch=0).release()
        assert _objects(cache) == {s0, s1, s3}  # s2 is never needed again; s0 and s1 are, soon
        with cache.open(s1):  # s1, needed last of the three, is being read
            cache.open(s2).release()
            assert _objects(cache) == {s1, s2, s3}  # so s0 went instead


def test_prefetch_crosses_the_epoch_boundary(tmp_path: Path) -> None:
    dataset = write_dataset(f"file://{tmp_path / 'ds'}", [20_000] * 4, seed=9)
    s0, s1, s2, s3 = dataset.shards
    with ShardCache.open_dataset(tmp_path / "ds", cache_dir=tmp_path / "c", cache_limit=8 << 20) as cache:
        cache.plan(0, {"r0": [s0, s1]})
        cache.plan(1, {"r0": [s3, s2]})
        wait_until(lambda: cache.stats.downloads == 4)  # no open: all planned, both epochs
        assert _objects(cache) == {s0, s1, s2, s3}


def test_a_horizon_bounds_how_far_ahead_each_stream_is_read() -> None:
    schedule = Schedule().with_epoch(0, {"r0": ["a", "b"]}).with_epoch(1, {"r0": ["c", "d"], "r1": ["e"]})
    assert schedule.timeline("r0", NextUse(0, 1), 2) == ["b", "c"]
    assert schedule.distances({"r0": NextUse(0, 1), "r1": NextUse(1, 0)}, horizon=2) == {"b": 0, "c": 1, "e": 0}
    assert schedule.upcoming({"r0": NextUse(0, 1), "r1": NextUse(1, 0)}, horizon=2) == ["b", "e", "c"]


def test_a_stream_is_where_its_slowest_live_reader_is(tmp_path: Path) -> None:
    from loaders.cache.cursors import CursorBoard
    from loaders.cache.layout import CacheLayout

    layout = CacheLayout(tmp_path)
    layout.create()
    board, other = CursorBoard(layout), CursorBoard(layout)  # two processes' boards, as far as files go
    board.record("r0", NextUse(0, 5))
    reader = threading.Thread(target=board.record, args=("r0", NextUse(0, 2)))
    reader.start()
    reader.join()
    other.record("r1", NextUse(1, 0))
    assert board.own() == {"r0": NextUse(0, 2)}  # the ended thread is forgotten only at the next record
    board.record("r0", NextUse(0, 6))
    assert board.own() == {"r0": NextUse(0, 6)}
    assert other.read_all() == {"r0": NextUse(0, 6), "r1": NextUse(1, 0)}
    other.close()
    assert board.read_all() == {"r0": NextUse(0, 6)}
