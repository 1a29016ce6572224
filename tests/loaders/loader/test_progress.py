"""progress: the owner of (epoch, position) and the rules of passes, on their own (the loader's tests
check the same rules through whole loops)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from loaders.errors import ConfigError
from loaders.loader.fetch import Skip
from loaders.loader.progress import LOADER_KEYS, Delivery, Progress, Where, check_state


@dataclass
class PassRecord:
    start: Progress
    finished: bool = False


def hand_over(progress: Progress, *positions: int, epoch_batches: int | None = 4, skips: int = 0) -> None:
    delivery = Delivery(progress.epoch, positions, num_samples=2, skips=tuple(Skip(i, "bad") for i in range(skips)))
    progress.receive(delivery, handed_over=True, epoch_batches=epoch_batches)


def test_positions_received_out_of_order_move_the_prefix_once_it_is_whole() -> None:
    progress = Progress()
    hand_over(progress, 1)
    assert (progress.position, progress.ahead) == (0, {1})
    hand_over(progress, 0, skips=1)
    assert (progress.position, progress.ahead, progress.skipped, progress.samples_seen) == (2, set(), 1, 4)


def test_the_last_batch_starts_the_next_epoch_remembering_which_one_ended() -> None:
    progress = Progress(epoch=3)
    for position in range(4):
        hand_over(progress, position, skips=1)
    assert progress.where() == Where(4) and progress.completed == 3 and progress.skipped == 0


def test_a_probe_is_undone_and_a_longer_abandoned_pass_counts_as_the_epoch() -> None:
    progress = Progress()
    where = progress.begin_pass(None)
    probe = PassRecord(progress.snapshot())
    hand_over(progress, 0)
    assert where == Where(0) and progress.begun
    progress.begin_pass(probe)  # the next pass finds the epoch where the probe found it
    assert (progress.epoch, progress.position) == (0, 0)
    longer = PassRecord(progress.snapshot())
    hand_over(progress, 0)
    hand_over(progress, 1)
    assert progress.begin_pass(longer) == Where(1)  # two batches: the epoch was used up


def test_set_epoch_keeps_a_resumed_epoch_and_leaves_nothing_of_one_saved_at_its_end() -> None:
    saved = Progress(epoch=2)
    hand_over(saved, 0)
    resumed = Progress()
    resumed.restore({**saved.state(), "accounting": {"samples_seen": 2}}, Where(2, 1, begun=True))
    resumed.set_epoch(2, epoch_batches=4, last=None)
    assert resumed.where() == Where(2, 1, begun=True)
    ended = Progress(epoch=2)
    for position in range(4):
        hand_over(ended, position)
    after = Progress()
    after.restore(ended.state(), Where(3, begun=True))
    after.set_epoch(2, epoch_batches=4, last=None)  # the loop variable of the epoch it was saved in
    assert (after.epoch, after.position) == (2, 4)
    after.set_epoch(5, epoch_batches=4, last=None)
    assert after.where() == Where(5)


def test_check_state_names_what_is_missing_or_different() -> None:
    state = {**Progress().state(), "version": 2, "seed": 1, "batch_size": 3, "dataset_len": 10, "plan": {}}
    check_state(state, keys=(*LOADER_KEYS, "plan"), dataset_len=10, seed=1)
    with pytest.raises(ConfigError, match="lacks 'tokens'"):
        check_state(state, keys=(*LOADER_KEYS, "tokens"), dataset_len=10, seed=1)
    with pytest.raises(ConfigError, match="'dataset_len': expected 11 .* got 10"):
        check_state(state, keys=LOADER_KEYS, dataset_len=11, seed=None)
    with pytest.raises(ConfigError, match="'failures' must hold int 'epoch' and 'skipped'"):
        check_state({**state, "failures": {"epoch": 0}}, keys=LOADER_KEYS, dataset_len=10, seed=None)
