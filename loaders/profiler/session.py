"""One profiled run: start the sampler, run the script, then write the report (JSON, PNG) whatever the ending.

``profile(target, out_dir=..., swap_torch=..., interval_s=...)`` returns the script's exit status; an
exception from the script (KeyboardInterrupt too) propagates after the report is written. Under a
launcher (``WORLD_SIZE`` > 1) each rank writes its own files, ``report-rank{R}.json``.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loaders.profiler.report import RunInfo, build_report, summary_lines, write_report
from loaders.profiler.run import Target, run_target
from loaders.profiler.sampler import StatsSampler
from loaders.profiler.timeline import write_timeline
from loaders.read.topology import Topology, cpus_available

__all__ = ["REPORT_NAME", "TIMELINE_NAME", "profile"]

logger = logging.getLogger(__name__)

REPORT_NAME = "report.json"
TIMELINE_NAME = "timeline.png"


def _rank_files() -> tuple[str, str, int]:
    """(report file, timeline file, CPUs of this rank) for the calling process's rank."""
    topology = Topology.detect()
    cpus = max(1, cpus_available() // topology.local_world_size)
    if not topology.is_distributed:
        return REPORT_NAME, TIMELINE_NAME, cpus
    suffix = f"-rank{topology.rank}"
    return (REPORT_NAME.replace(".json", f"{suffix}.json"), TIMELINE_NAME.replace(".png", f"{suffix}.png"), cpus)


def profile(target: Target, *, out_dir: str | os.PathLike[str], swap_torch: bool = False,
            interval_s: float = 1.0) -> int:
    """Run ``target`` with its loaders sampled every ``interval_s``; write the report into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sampler = StatsSampler(interval_s)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    code, error = 1, None
    sampler.start()
    try:
        code = run_target(target, swap_torch=swap_torch)
    except BaseException as err:
        error = "".join(traceback.format_exception_only(err)).strip()
        raise
    finally:
        sampler.stop()
        run = RunInfo(target=target.name, argv=target.args, swap_torch=swap_torch, interval_s=interval_s,
                      started=started, duration_s=sampler.elapsed_s(), exit_code=code if error is None else 1,
                      error=error, failed_samples=sampler.failed_samples)
        _write(out, build_report(list(sampler.traces.values()), run, cpus=_rank_files()[2]))
    return code


def _write(out: Path, report: dict[str, Any]) -> None:
    """The PNG (when matplotlib is there), the JSON, and the summary on stderr (stdout is the script's)."""
    report_name, timeline_name, _ = _rank_files()
    try:
        png, note = write_timeline(report, out / timeline_name)
    except Exception as err:  # noqa: BLE001 - a plotting failure must not lose the JSON report
        png, note = None, f"not written: {type(err).__name__}: {err}"
    report["timeline_png"], report["timeline_note"] = (str(png) if png else None), note
    path = write_report(report, out / report_name)
    lines = [*summary_lines(report), f"report: {path}"]
    sys.stdout.flush()  # the script's own output first
    sys.stderr.write("".join(f"shardfeed-profile: {line}\n" for line in lines))
    sys.stderr.flush()
