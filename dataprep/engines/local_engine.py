"""``--engine local`` (``LocalEngine``): the plan's ranges on this machine, checkpointed.

How the ``--workers`` cores are shared (``choose_split``, printed in the summary):

- ``--workers 1``, or a plan of one range: one process writes the ranges one after another
  (``CheckpointedRun``), cleaning inline; media with ``--workers`` > 1 on that many threads of
  a supervised child (``dataprep.engines.supervisor``), token output of a tokenizer.json
  tokenized on that many threads. Table rows and text are never sent to other processes: on
  a 2-core machine that cost more than the cleaning (2 worker processes were 1.8-2x slower
  than 1). A run started this way resumes this way (or as whole ranges, by ``--engine ray``).
- otherwise writer processes (``dataprep.engines.local_writers``), each writing whole ranges,
  one per core: media cleaned on ``MEDIA_THREADS`` threads of each (1: inline; decoding
  releases the GIL, so threads would share a process well, but a process per core needs no
  hand-off between threads and no shared GIL for the rest of the work: tar members, sha256,
  JSON), tables and text cleaned inline (their cleaning holds the GIL: processes, and no
  row pickled between processes). Never more writers than ranges: the ones left get the
  cores as threads where threads help (media, tokenizing with a tokenizer.json).

A run of whole ranges (writer processes, or Ray tasks of ``--engine ray``: the checkpoint's mode
``ranges``) resumes on writer processes, as many as ``--workers`` now says (one: in this process),
each open range from its place. OUT in object storage is written by this process alone (writer
processes there: not built).
"""

from __future__ import annotations

from dataprep.engines.context import RunContext, RunOutcome, WriterSplit
from dataprep.engines.local_writers import run_writers
from dataprep.engines.progress import ProgressLine
from dataprep.engines.run_modes import CheckpointedRun
from dataprep.engines.supervisor import run_supervised
from dataprep.engines.write_loop import InlineCleaning, WriteLoop
from dataprep.output.store import LocalStore
from dataprep.plan.checkpoint import MODE_RANGES, Checkpoint

# Cleaning threads per writer process for media (1: inline, on the writer's own thread; one writer per core).
MEDIA_THREADS = 1


class LocalEngine:
    """Writes the ranges from the checkpoint on, here (module docstring)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def check(self) -> None:
        """Nothing to check: this machine is always there."""

    def run(self, ctx: RunContext, checkpoint: Checkpoint, progress: ProgressLine) -> RunOutcome:
        handler, tokenizer = ctx.spec.handler, ctx.spec.tokenizer
        tokens = tokenizer is not None and tokenizer.backend is not None  # a library tokenizer releases the GIL
        split = choose_split(self.workers, media=handler.is_media, tokens=tokens, ranges=ctx.plan.num_ranges)
        if checkpoint.mode == MODE_RANGES:  # whole ranges (writer processes or Ray tasks): writers, from their places
            local = isinstance(ctx.store, LocalStore)  # OUT in object storage: one writer, this process
            return run_writers(ctx, checkpoint, progress, split if local else WriterSplit(1, 1, "OUT in a store"))
        if checkpoint.is_started or split.writers == 1 or not isinstance(ctx.store, LocalStore):
            return _sequential(ctx, checkpoint, progress, choose_split(self.workers, media=handler.is_media,
                                                                       tokens=tokens, ranges=1))
        return run_writers(ctx, checkpoint, progress, split)


def choose_split(workers: int, *, media: bool, tokens: bool, ranges: int) -> WriterSplit:
    """How ``workers`` cores are shared for a plan of ``ranges`` ranges (module docstring).

    media: the inputs are images (decoding releases the GIL); tokens: token output with a
    library tokenizer (its ``encode_batch`` releases the GIL; ``bytes`` ids are made holding it).
    """
    if workers == 1:
        return WriterSplit(1, 1, "--workers 1: one process")
    if ranges <= 1:
        threads = workers if media or tokens else 1
        why = "one range: one writer" + ("" if threads > 1 else ", cleaning rows inline (they hold the GIL)")
        return WriterSplit(1, threads, why)
    per = MEDIA_THREADS if media else 1
    writers = min(ranges, max(1, workers // per))
    threads = max(per, workers // writers) if media or tokens else 1
    what = ("images: one process per core, each decoding its own inputs" if media
            else "rows and text hold the GIL: one process per core")
    fewer = f"; {ranges} ranges: a writer per range" if writers == ranges and writers < workers // per else ""
    return WriterSplit(writers, threads, what + fewer)


def _sequential(ctx: RunContext, checkpoint: Checkpoint, progress: ProgressLine, split: WriterSplit) -> RunOutcome:
    """The ranges one after another in this process (media on threads in a supervised child)."""
    ctx = RunContext(spec=ctx.spec, store=ctx.store, plan=ctx.plan, workers=split.threads)
    mode = CheckpointedRun(ctx, checkpoint)
    if ctx.spec.handler.is_media and split.threads > 1:
        outcome = run_supervised(ctx, mode, progress)
    else:
        outcome = WriteLoop(ctx, mode, InlineCleaning(), progress).execute()
    return RunOutcome(totals=outcome.totals, shards=outcome.shards, processed=outcome.processed,
                      bytes_out=outcome.bytes_out, split=split)
