"""Media cleaned on threads in a forked child that writes the shards, watched by this process for crashes.

Media inputs (``--workers`` > 1, and every range task of media) are cleaned on threads
(decoding releases the GIL) in a forked child process that also runs the write loop, so
image bytes are never pickled or piped between processes. If a decoder crashes that
child, this process cleans each input that was in flight alone, in a process of its own;
those that crash again become ``worker_crash`` rejects, and a new child goes on from
where the run's mode says (``WriteMode.after_crash``: the last checkpoint, or the start of
the range task's range).
"""

from __future__ import annotations

import logging

from dataprep.errors import WorkerCrashError
from dataprep.engines.parallel import InFlight, describe_exit, run_forked
from dataprep.inputs.records import Reject
from dataprep.engines.progress import ProgressSink
from dataprep.engines.context import RunContext, RunOutcome
from dataprep.engines.write_loop import ThreadCleaning, WriteLoop, WriteMode, crash_culprits

log = logging.getLogger(__name__)

# Inputs submitted to the cleaning threads ahead of the writer, per thread.
THREAD_WINDOW_PER_WORKER = 32


def run_supervised(ctx: RunContext, mode: WriteMode, progress: ProgressSink) -> RunOutcome:
    """Run the write loop in a forked child cleaning media on ``config.workers`` threads; survive decoder crashes."""
    workers = ctx.workers
    in_flight = InFlight(workers * THREAD_WINDOW_PER_WORKER)
    crashed: dict[int, Reject] = {}
    while True:
        loop = WriteLoop(ctx, mode, ThreadCleaning(workers, in_flight, dict(crashed)), progress)
        forked = run_forked(loop.execute)
        if not forked.died:
            return forked.result()
        suspects = [p for p in in_flight.positions() if p not in crashed]
        culprits = crash_culprits(ctx.spec.handler, ctx.plan, suspects)
        if not culprits:
            names = [getattr(ctx.plan.at(p), "source", "?") for p in suspects]
            shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
            raise WorkerCrashError(
                f"the process cleaning and writing shards died ({describe_exit(forked.exit_status)}) while cleaning "
                f"{len(names)} inputs ({shown or 'none'}), none of which crashes when cleaned alone; "
                f"rerun the same command to resume from the last complete shard",
                names,
            )
        crashed.update(culprits)
        in_flight.reset()
        for reject in culprits.values():
            log.warning("%s: %s; rejected (worker_crash), the run resumes from its last complete shard",
                        reject.source, reject.detail)
        mode = mode.after_crash()
