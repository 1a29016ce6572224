"""``--engine local``: the plan's ranges one after another on this machine, checkpointed (``LocalEngine``).

Tables and text run the write loop in this process with ``--workers`` cleaning processes;
media with ``--workers`` > 1 are cleaned on threads in a supervised child
(``dataprep.engines.supervisor``); ``--workers 1`` runs everything inline in one process.
"""

from __future__ import annotations

from dataprep.plan.checkpoint import Checkpoint
from dataprep.errors import UsageError
from dataprep.engines.progress import ProgressLine
from dataprep.engines.context import RunContext, RunOutcome
from dataprep.engines.run_modes import CheckpointedRun
from dataprep.engines.supervisor import run_supervised
from dataprep.engines.write_loop import ProcessCleaning, WriteLoop


class LocalEngine:
    """Writes the ranges from the checkpoint on, here (module docstring)."""

    def check(self) -> None:
        """Nothing to check: this machine is always there."""

    def run(self, ctx: RunContext, checkpoint: Checkpoint, progress: ProgressLine) -> RunOutcome:
        if checkpoint.ranges_done:
            raise UsageError(f"{ctx.store.describe()} holds a run started with --engine ray "
                             f"({len(checkpoint.ranges_done)} of {ctx.plan.num_ranges} ranges done); resume it with "
                             "--engine ray, or pass --overwrite")
        mode = CheckpointedRun(ctx, checkpoint)
        workers = ctx.workers
        if ctx.spec.handler.is_media and workers > 1:
            return run_supervised(ctx, mode, progress)
        return WriteLoop(ctx, mode, ProcessCleaning(workers), progress).execute()
