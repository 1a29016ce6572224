"""Mixture: shares at every prefix, each source in its own order, exhaustion, state and weight changes at resume."""

from __future__ import annotations

import io
import logging
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.errors import ConfigError
from loaders.read.sample_index import SampleIndex
from loaders.tokens import Mixture, TokenDataset
from loaders.tokens.mixture_state import KEY_CURSORS, KEY_SEGMENT, KEY_SEGMENT_START, ScheduleSegment
from loaders.tokens.schedule import Shares
from tests.loaders.tokens.corpus import random_documents, write_tokens

SEQ = 8


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TokenDataset]:
    root = tmp_path_factory.mktemp("mixture")
    rng = np.random.default_rng(11)
    sizes = {"web": 220, "code": 90, "books": 40}
    return {name: TokenDataset(write_tokens(root / name, random_documents(rng, n, mean_len=10)), seq_len=SEQ,
                               seed=i)
            for i, (name, n) in enumerate(sizes.items())}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def _schedule(mixture: Mixture, epoch: int, start: int, stop: int,
              segment: ScheduleSegment | None = None) -> list[tuple[int, SampleIndex]]:
    return [mixture.source_item(n, epoch, segment) for n in range(start, stop)]


@settings(max_examples=40, deadline=None)
@given(weights=st.lists(st.one_of(st.integers(0, 9), st.floats(0.01, 5.0)), min_size=3, max_size=3)
       .filter(lambda w: sum(w) > 0))
def test_each_source_within_one_of_its_share_and_read_in_its_own_order(
        sources: dict[str, TokenDataset], weights: list[float]) -> None:
    names = list(sources)
    mixture = Mixture(sources, weights=dict(zip(names, weights)))
    total = sum(Fraction(w) for w in weights)
    counts = [0] * 3
    for n, (source, sample) in enumerate(_schedule(mixture, 0, 0, len(mixture)), start=1):
        assert sample == SampleIndex(counts[source], 0)  # its own next sequence, its own epoch order
        counts[source] += 1
        for i in range(3):
            assert abs(counts[i] - Fraction(weights[i]) / total * n) < 1
    assert all(c <= len(sources[name]) for c, name in zip(counts, names))  # stop: no source past its end


def test_items_are_the_sources_items(sources: dict[str, TokenDataset]) -> None:
    mixture = Mixture(sources, weights={"web": 5, "code": 3, "books": 2})
    mixture.set_epoch(2)
    for n in (0, 1, 7, len(mixture) - 1):
        source, sample = mixture.source_item(n, 2)
        assert _same(mixture[n], sources[mixture.names[source]][sample])
        assert _same(mixture[SampleIndex(n, 2)], mixture[n])


def test_stop_length_ends_before_any_source_runs_out(sources: dict[str, TokenDataset]) -> None:
    mixture = Mixture(sources, weights={"web": 1, "code": 1, "books": 1})
    assert len(mixture) == 3 * len(sources["books"])  # floor(len_books / (1/3))
    end = mixture.cursors(len(mixture), 0)
    assert end[2] == len(sources["books"]) and all(c <= len(sources[n]) for c, n in zip(end, mixture.names))
    with pytest.raises(IndexError, match="outside"):
        mixture.source_item(len(mixture), 0)
    with pytest.raises(ConfigError, match="'num_sequences' applies to exhaustion='cycle' only"):
        Mixture(sources, weights={"web": 1, "code": 1, "books": 1}, num_sequences=10)


def test_cycle_starts_each_pass_in_a_new_order(sources: dict[str, TokenDataset]) -> None:
    n_books = len(sources["books"])
    mixture = Mixture(sources, weights={"web": 1, "code": 1, "books": 6}, exhaustion="cycle", num_sequences=400)
    assert len(mixture) == 400
    books = [sample for source, sample in _schedule(mixture, 1, 0, 400) if source == 2]
    stride = -(-400 // n_books)
    passes = [books[i:i + n_books] for i in range(0, len(books), n_books)]
    assert len(passes) >= 3
    for p, part in enumerate(passes):  # pass p of epoch 1: every sequence once, in source epoch 1*stride + p
        assert {s.epoch for s in part} == {stride + p}
        assert sorted(s.index for s in part) == list(range(len(part)))
    orders = [sources["books"].order_digest(0, n_books, epoch) for epoch in (stride, stride + 1, 0)]
    assert len(set(orders)) == 3
    assert Mixture(sources, weights={"web": 1, "code": 1, "books": 1}, exhaustion="cycle").num_sequences == \
        sum(len(s) for s in sources.values())


def _roundtrip(state: dict[str, object]) -> dict[str, object]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("exhaustion", ["stop", "cycle"])
def test_resume_with_the_same_weights_reads_the_rest_unchanged(sources: dict[str, TokenDataset],
                                                               exhaustion: str) -> None:
    weights = {"web": 0.5, "code": 0.3, "books": 0.2}
    full = Mixture(sources, weights=weights, exhaustion=exhaustion)
    expected = _schedule(full, 3, 0, len(full))
    for stop in (0, 1, 1500 % len(full), len(full) - 1, len(full)):
        state = _roundtrip(full.stream_state(3, stop))
        resumed = Mixture(sources, weights=weights, exhaustion=exhaustion)
        segment = resumed.resume(state)
        assert segment.epoch == 3 and resumed.epoch_length(3, segment) == len(full)
        assert _schedule(resumed, 3, stop, len(resumed), segment) == expected[stop:]
        assert _schedule(resumed, 3, 0, stop, segment) == expected[:stop]  # the same segment: earlier positions too
        assert _schedule(resumed, 4, 0, 20, segment) == _schedule(full, 4, 0, 20)  # another epoch: its own


@settings(max_examples=25, deadline=None)
@given(old=st.lists(st.integers(1, 9), min_size=3, max_size=3), new=st.lists(st.integers(0, 9), min_size=3,
       max_size=3).filter(lambda w: sum(w) > 0), fraction=st.floats(0.0, 1.0))
def test_weight_change_at_resume(sources: dict[str, TokenDataset], old: list[int], new: list[int],
                                 fraction: float) -> None:
    """New weights from the resume point: within one counted from there, each source continues from its cursor.

    (Unchanged weights continue the uninterrupted schedule instead, within one counted from the epoch's start.)
    """
    names = list(sources)
    before = Mixture(sources, weights=dict(zip(names, old)))
    position = int(fraction * len(before))
    cursors = before.cursors(position, 0)
    after = Mixture(sources, weights=dict(zip(names, new)))
    segment = after.resume(before.stream_state(0, position))
    end = after.epoch_length(0, segment)
    assert end >= position and after.cursors(position, 0, segment) == cursors
    changed = Shares.from_weights(old) != Shares.from_weights(new)
    if not changed:
        assert _schedule(after, 0, position, end, segment) == _schedule(before, 0, position, len(before))
    counts = list(cursors)
    total = sum(new)
    for n, (source, sample) in enumerate(_schedule(after, 0, position, end, segment), start=1):
        assert sample == SampleIndex(counts[source], 0)  # nothing repeated or skipped within a source
        counts[source] += 1
        for i in range(3 if changed else 0):
            assert abs((counts[i] - cursors[i]) - Fraction(new[i], total) * n) < 1
    assert all(c <= len(sources[name]) for c, name in zip(counts, names))
    if position and changed:
        with pytest.raises(IndexError, match="precedes the resume"):  # the old weights' schedule is not kept
            after.source_item(position - 1, 0, segment)


def test_weight_change_is_logged_once(sources: dict[str, TokenDataset], caplog: pytest.LogCaptureFixture) -> None:
    state = Mixture(sources, weights={"web": 1, "code": 1, "books": 1}).stream_state(0, 30)
    with caplog.at_level(logging.INFO, logger="loaders.tokens.mixture"):
        Mixture(sources, weights={"web": 1, "code": 1, "books": 1}).resume(state)
        Mixture(sources, weights={"web": 2, "code": 1, "books": 1}).resume(state, quiet=True)
        assert not caplog.records
        Mixture(sources, weights={"web": 2, "code": 1, "books": 1}).resume(state)
    assert len(caplog.records) == 1 and "weights changed at resume: epoch 0 from position 30" in caplog.text


def test_state_is_plain_and_names_its_parts(sources: dict[str, TokenDataset]) -> None:
    mixture = Mixture(sources, weights={"web": 0.7, "code": 0.2, "books": 0.1}, exhaustion="cycle", num_sequences=99)
    state = mixture.stream_state(1, 40)
    assert _roundtrip(state) == state
    assert state["version"] == 2 and state["exhaustion"] == "cycle" and state["num_sequences"] == 99
    assert state["global_position"] == 40 and "position" not in state
    assert state["weights"] == {"web": 0.7, "code": 0.2, "books": 0.1}
    assert sum(state[KEY_CURSORS].values()) == 40 and state[KEY_SEGMENT] == {
        KEY_SEGMENT_START: 0, KEY_CURSORS: {"web": 0, "code": 0, "books": 0}}
    assert state["sources"]["web"]["seq_len"] == SEQ
    v1 = {**{k: v for k, v in state.items() if k != "global_position"}, "version": 1, "position": 40,
          "segment": {"position": 0, "cursors": state[KEY_SEGMENT][KEY_CURSORS]}}
    assert mixture.resume(v1) == mixture.resume(state)  # the previous version's keys are read too


def test_resume_refuses_other_data_or_policy(sources: dict[str, TokenDataset], tmp_path: Path) -> None:
    weights = {"web": 1, "code": 1, "books": 1}
    state = Mixture(sources, weights=weights).stream_state(0, 10)
    with pytest.raises(ConfigError, match="saved with exhaustion='stop'"):
        Mixture(sources, weights=weights, exhaustion="cycle").resume(state)
    reseeded = dict(sources, code=TokenDataset(sources["code"].corpus.paths, seq_len=SEQ, seed=77))
    with pytest.raises(ConfigError, match=r"source 'code' is not the data it was saved with \(seed: saved 1, now 77\)"):
        Mixture(reseeded, weights=weights).resume(state)
    renamed = {"web": sources["web"], "code": sources["code"], "novels": sources["books"]}
    with pytest.raises(ConfigError, match="saved sources"):
        Mixture(renamed, weights={"web": 1, "code": 1, "novels": 1}).resume(state)
    broken = dict(state, cursors={"web": 0, "code": 0, "books": 0})
    with pytest.raises(ConfigError, match="do not follow from the segment"):
        Mixture(sources, weights=weights).resume(broken)
    with pytest.raises(ConfigError, match="not a mixture state of version 2"):
        Mixture(sources, weights=weights).resume({"version": 1})


def test_sources_must_agree(sources: dict[str, TokenDataset], tmp_path: Path) -> None:
    other_len = TokenDataset(sources["web"].corpus.paths, seq_len=SEQ + 1)
    with pytest.raises(ConfigError, match=r"'web' and 'other' differ \(seq_len: 8 vs 9\)"):
        Mixture({"web": sources["web"], "other": other_len}, weights={"web": 1, "other": 1})
    with pytest.raises(ConfigError, match=r"missing \['books'\], extra \['novels'\]"):
        Mixture(sources, weights={"web": 1, "code": 1, "novels": 1})
    with pytest.raises(ConfigError, match="'exhaustion' must be 'stop' or 'cycle'"):
        Mixture(sources, weights={"web": 1, "code": 1, "books": 1}, exhaustion="wrap")
