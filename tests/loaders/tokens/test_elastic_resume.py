"""Elastic resume, as a training job breaks it: save on one topology, resume on another.

A job of W ranks x B sequences (explicit ``Topology`` per rank, one loader each, in this
process) reads some steps, the last rank's state goes through ``torch.save`` +
``torch.load(weights_only=True)``, and a job of W' x B' (other workers, thread or process)
loads it. Each step's global batch is checked as the set of global sequences it holds
(``tests.loaders.tokens.ranks``): with B' W' = B W exactly the uninterrupted run's batches,
otherwise the sequences from the saved position on in global batches of B' W', nothing lost
or repeated, every rank the same number of batches; then the next epoch in full.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from loaders import ConfigError, DataLoader, Mixture, TokenDataset
from loaders.tokens import GlobalPosition, resume_grid
from tests.loaders.tokens.conftest import MIXTURE_WEIGHTS, SEQ_LEN
from tests.loaders.tokens.corpus import write_tokens
from tests.loaders.tokens.ranks import (
    EOS_ID,
    VOCAB_SIZE,
    SequenceMap,
    close,
    global_steps,
    grid,
    job,
    through_torch_save,
)

Job = tuple[int, int, int, str]  # world size, batch size per rank, workers per rank, worker type

# (stream, saved job, steps read before saving (None: the whole epoch), resumed job)
CASES: dict[str, tuple[str, Job, int | None, Job]] = {
    "dataset-4x2-process-to-2x4-thread": ("dataset", (4, 2, 2, "process"), 7, (2, 4, 3, "thread")),
    "mixture-4x2-thread-to-2x4-process": ("mixture", (4, 2, 2, "thread"), 9, (2, 4, 3, "process")),
    "dataset-1x8-to-4x2-thread": ("dataset", (1, 8, 0, "thread"), 11, (4, 2, 2, "thread")),
    "dataset-2x3-to-4x1": ("dataset", (2, 3, 0, "thread"), 13, (4, 1, 0, "thread")),
    "mixture-2x2-thread-to-1x5-process": ("mixture", (2, 2, 3, "thread"), 17, (1, 5, 2, "process")),
    "mixture-1x3-to-4x2": ("mixture", (1, 3, 0, "thread"), 40, (4, 2, 0, "thread")),
    "dataset-end-4x2-to-2x3-thread": ("dataset", (4, 2, 0, "thread"), None, (2, 3, 2, "thread")),
    "mixture-end-2x4-thread-to-4x2": ("mixture", (2, 4, 2, "thread"), None, (4, 2, 0, "thread")),
    "dataset-near-the-end-1x6-to-2x5": ("dataset", (1, 6, 0, "thread"), 55, (2, 5, 0, "thread")),
    "cycle-2x3-to-3x2-process": ("cycle", (2, 3, 0, "thread"), 30, (3, 2, 2, "process")),
    "cycle-1x4-to-2x3": ("cycle", (1, 4, 2, "thread"), 41, (2, 3, 0, "thread")),
}


@pytest.fixture
def streams(counting: TokenDataset, three_sources: Mixture, cycling_sources: Mixture) -> dict[str, Any]:
    return {"dataset": counting, "mixture": three_sources, "cycle": cycling_sources}


def _save(stream: TokenDataset | Mixture, saved: Job, steps: int | None) -> tuple[dict[str, Any], int]:
    """Run the saved job ``steps`` steps (or its whole epoch 0); (its last rank's state after torch.save/load,
    the global position: sequences consumed)."""
    world_size, batch_size, num_workers, worker_type = saved
    loaders = job(stream, world_size, batch_size, num_workers, worker_type)
    n = stream.epoch_length(0)
    count = resume_grid(GlobalPosition(0, 0), n, batch_size, world_size).grid.num_batches if steps is None else steps
    iterators = [iter(loader) for loader in loaders]
    sequences = SequenceMap(stream, 0)
    head = global_steps(iterators, sequences, count=count)
    assert head == sequences.expect(grid(0, n, batch_size * world_size))[:count]
    state = through_torch_save(loaders[-1].state_dict())
    close(loaders)
    return state, count * batch_size * world_size


def _resumed(stream: TokenDataset | Mixture, resumed: Job, state: dict[str, Any], *,
             peek: bool = False) -> list[DataLoader[Any]]:
    world_size, batch_size, num_workers, worker_type = resumed
    loaders = job(stream, world_size, batch_size, num_workers, worker_type)
    for loader in loaders:
        if peek:
            next(iter(loader))  # a look at the data before resuming (starts persistent workers)
        loader.load_state_dict(state)
    return loaders


def _check_rest(stream: TokenDataset | Mixture, loaders: list[DataLoader[Any]], consumed: int,
                global_batch: int) -> None:
    """The rest of epoch 0 from ``consumed`` on (when the state was mid-epoch), then epoch 1 in full."""
    n = stream.epoch_length(0)
    if consumed < n and loaders[0].epoch == 0:
        sequences = SequenceMap(stream, 0)
        rest = global_steps(loaders, sequences)
        assert rest == sequences.expect(grid(consumed, n, global_batch))
        assert n - consumed - len(rest) * global_batch < global_batch  # only the last incomplete global batch
    assert all(loader.epoch == 1 for loader in loaders)
    sequences = SequenceMap(stream, 1)
    assert global_steps(loaders, sequences) == sequences.expect(grid(0, stream.epoch_length(1), global_batch))


@pytest.mark.parametrize("case", list(CASES))
def test_a_job_resumes_on_another_topology(streams: dict[str, Any], case: str) -> None:
    name, saved, steps, resumed = CASES[case]
    stream = streams[name]
    state, consumed = _save(stream, saved, steps)
    loaders = _resumed(stream, resumed, state)
    assert {loader.epoch for loader in loaders} == {0 if steps is not None else 1}
    _check_rest(stream, loaders, consumed, resumed[0] * resumed[1])
    close(loaders)


@pytest.mark.parametrize("steps", [12, None])
def test_resume_then_set_epoch_as_the_loop_does(counting: TokenDataset, steps: int | None) -> None:
    """``for epoch in range(saved_epoch, E): loader.set_epoch(epoch)`` after the load keeps the resume; right
    after an epoch's last batch, set_epoch(that epoch) reads nothing more of it."""
    state, consumed = _save(counting, (2, 4, 0, "thread"), steps)
    loaders = _resumed(counting, (4, 2, 2, "thread"), state)
    for loader in loaders:
        loader.set_epoch(0)
    if steps is None:
        assert global_steps(loaders, SequenceMap(counting, 0)) == []
        for loader in loaders:
            loader.set_epoch(1)
    _check_rest(counting, loaders, consumed, 8)
    close(loaders)


@pytest.mark.parametrize(("name", "worker_type"), [("dataset", "process"), ("mixture", "thread")])
def test_a_peek_before_resuming_does_not_move_the_resume(streams: dict[str, Any], name: str,
                                                         worker_type: str) -> None:
    stream = streams[name]
    state, consumed = _save(stream, (2, 3, 0, "thread"), 10)
    loaders = _resumed(stream, (3, 2, 2, worker_type), state, peek=True)
    _check_rest(stream, loaders, consumed, 6)
    close(loaders)


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_new_weights_at_resume_apply_from_the_saved_position(
        mixture_sources: dict[str, TokenDataset], three_sources: Mixture, worker_type: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """The user builds the Mixture with new weights and loads the old state: each source continues from its
    cursor, nothing repeated or skipped; workers started before the load (a peek) read the new schedule too."""
    state, consumed = _save(three_sources, (2, 3, 0, "thread"), 20)
    reweighted = Mixture(mixture_sources, weights={"web": 0.2, "code": 0.3, "books": 0.5})
    with caplog.at_level(logging.INFO, logger="loaders.tokens.mixture"):
        loaders = _resumed(reweighted, (3, 2, 2, worker_type), state, peek=True)
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == len(loaders) == 3
    assert "weights changed at resume: epoch 0 from position 120 on" in caplog.records[0].getMessage()
    segment = reweighted.resume(state["tokens"]["data"], quiet=True)
    sequences = SequenceMap(reweighted, 0, segment=segment, start=consumed)
    rest = global_steps(loaders, sequences)
    assert rest == list(grid(consumed, sequences.end, 6))
    before = [three_sources.source_item(k, 0) for k in range(consumed)]
    after = [reweighted.source_item(k, 0, segment) for sequence in rest for k in sequence]
    for source in range(3):  # each source read in its own order: its sequences 0, 1, 2, ... once each
        read = [sample.index for s, sample in before + after if s == source]
        assert read == list(range(len(read)))
    digest = reweighted.order_digest(consumed, sequences.end, 0, segment)  # epoch 0 as this job read it
    assert loaders[0].order_digest(consumed, sequences.end, epoch=0) == digest
    close(loaders)


def test_a_resume_on_other_data_is_refused_naming_what_differs(counting: TokenDataset, three_sources: Mixture,
                                                               tmp_path: Any) -> None:
    state, _ = _save(counting, (1, 4, 0, "thread"), 3)
    paths = counting.corpus.paths
    other_tokenizer = write_tokens(tmp_path / "retokenized", [counting.corpus.read(d, 0, int(n)) for d, n in
                                                              enumerate(counting.corpus.lengths)],
                                   vocab_size=VOCAB_SIZE, eos_id=EOS_ID, tokenizer_sha256="c" * 64)
    refused = {
        r"seq_len: saved 8, now 9": TokenDataset(paths, seq_len=SEQ_LEN + 1, seed=5),
        r"seed: saved 5, now 6": TokenDataset(paths, seq_len=SEQ_LEN, seed=6),
        r"tokenizer_sha256: saved 'b+', now 'c+'": TokenDataset(other_tokenizer, seq_len=SEQ_LEN, seed=5),
        r"num_documents: saved 240, now 200": TokenDataset(three_sources.sources["web"].corpus.paths,
                                                           seq_len=SEQ_LEN, seed=5),
    }
    for message, dataset in refused.items():
        loader = DataLoader(dataset, batch_size=4, num_workers=0, seed=0)
        with pytest.raises(ConfigError, match=message):
            loader.load_state_dict(state)
        assert loader.epoch == 0 and loader.batches_consumed == 0  # nothing changed
    with pytest.raises(ConfigError, match="not a mixture state"):
        DataLoader(three_sources, batch_size=4, num_workers=0, seed=0).load_state_dict(state)
    image_like = DataLoader(counting, batch_size=4, num_workers=0, seed=0, sampler=range(len(counting)))
    with pytest.raises(ConfigError, match="lacks 'plan'"):
        image_like.load_state_dict(state)
    exhausted = Mixture(three_sources.sources, weights=MIXTURE_WEIGHTS, exhaustion="cycle")
    mixture_state, _ = _save(three_sources, (1, 4, 0, "thread"), 3)
    with pytest.raises(ConfigError, match="saved with exhaustion='stop'"):
        DataLoader(exhausted, batch_size=4, num_workers=0, seed=0).load_state_dict(mixture_state)


def test_batches_handed_over_out_of_order_resume_only_where_they_were_saved(counting: TokenDataset) -> None:
    state, consumed = _save(counting, (2, 3, 0, "thread"), 4)
    ahead = through_torch_save({**state, "ahead": [5]})  # rank 1 had batch 5 too (in_order=False)
    same = job(counting, 2, 3)
    same[1].load_state_dict(ahead)
    rows = [SequenceMap(counting, 0).of(batch) for batch in same[1]]
    assert rows[0] == list(range(consumed + 3, consumed + 6)) and rows[1] == list(range(consumed + 15, consumed + 18))
    with pytest.raises(ConfigError, match=r"batches \[5\] were handed over out of order \(in_order=False\) on rank 1"):
        job(counting, 3, 2)[1].load_state_dict(ahead)


def test_a_new_run_of_the_resumed_epoch_reads_it_on_its_own_grid(counting: TokenDataset) -> None:
    """After a resume with another global batch (a shifted grid) and the rest of that epoch, ``set_epoch`` of the
    same epoch reads it whole, from sequence 0 (the loaded state applied to the run it resumed only)."""
    state, consumed = _save(counting, (1, 5, 0, "thread"), 7)  # 35 sequences: not a multiple of 4
    (loader,) = _resumed(counting, (2, 2, 0, "thread"), state)[1:]
    sequences = SequenceMap(counting, 0)
    assert [sequences.of(batch)[:1] for batch in loader][:2] == [[consumed + 2], [consumed + 6]]
    loader.set_epoch(0)
    iterator = iter(loader)
    assert [sequences.of(next(iterator)) for _ in range(2)] == [[2, 3], [6, 7]]
    assert len(loader) == len(counting) // 4 and loader.state_dict()["tokens"]["global_position"] == 8
    assert loader.order_digest(0, 8) == counting.order_digest(0, 8, 0)


FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_a_state_saved_by_the_previous_version_resumes(counting: TokenDataset) -> None:
    """``tests/loaders/fixtures/tokens_state_v3.json``: rank 0's state after 4 steps of 2 ranks x 3 over the
    counting corpus, saved by 50a6471 (loader state version 3, ``"sequence"`` and ``"stream"`` in the source's
    document of version 1). It resumes on 4 x 2 from sequence 24; a document of an unknown version is refused."""
    saved = json.loads((FIXTURES / "tokens_state_v3.json").read_text())["state"]
    assert saved["version"] == 3 and saved["tokens"]["sequence"] == 24
    loaders = _resumed(counting, (4, 2, 0, "thread"), saved)
    _check_rest(counting, loaders, 24, 8)
    state = loaders[0].state_dict()
    close(loaders)
    assert state["version"] == 4 and state["tokens"]["version"] == 2 and "stream" not in state["tokens"]
    with pytest.raises(ConfigError, match=r"'tokens' must be a global-position state of version 2 \(got version 1\)"):
        job(counting, 1, 2)[0].load_state_dict({**state, "tokens": saved["tokens"]})


def test_a_mixture_state_saved_by_the_previous_version_resumes(three_sources: Mixture) -> None:
    """``fixtures/mixture_state_v3.json``: rank 1's state after 9 steps of 2 ranks x 2 over the three-source
    mixture, saved by 50a6471 (the mixture's state of version 1: ``"position"`` for both the positions consumed
    and the segment's start). It resumes on 3 x 2 from position 36, and saves the one key of each meaning."""
    saved = json.loads((FIXTURES / "mixture_state_v3.json").read_text())["state"]
    assert saved["tokens"]["stream"]["version"] == 1 and saved["tokens"]["stream"]["position"] == 36
    loaders = _resumed(three_sources, (3, 2, 0, "thread"), saved)
    _check_rest(three_sources, loaders, 36, 6)
    data = loaders[0].state_dict()["tokens"]["data"]
    close(loaders)
    assert data["version"] == 2 and data["global_position"] == 0 and data["segment"]["start"] == 0
