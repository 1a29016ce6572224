"""The report of one profiled run: per loader, the wait share over time, stage costs, the bottleneck, what-ifs.

``build_report(traces, run, cpus)`` is pure: it turns the sampler's ``LoaderTrace``s into one JSON
document (``REPORT_VERSION``). The loop's waits and steps are taken per interval between samples
(``intervals``), stage costs weighted by the batches handed over in each, so a long phase counts for
what it lasted and a slow batch where it fell.
``summary_lines`` is the same in words, what the command prints; ``write_report`` writes it.

Document: ``version``, ``run`` (``RunInfo``), ``overall`` (wait share and bottleneck over every
loader's batches), ``loaders`` (one per loader: ``name``, ``dataset``, ``summary``, ``timeline``,
``tuning`` with the time of each decision, ``advice``, ``what_if``), ``timeline_png`` and its ``note``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loaders.loader.advice import WAIT_TARGET
from loaders.loader.loader_stats import WINDOW_STEPS
from loaders.profiler.sampler import LoaderTrace, Sample
from loaders.profiler.whatif import Costs, what_ifs

__all__ = ["MAX_POINTS", "REPORT_VERSION", "Interval", "RunInfo", "build_report", "intervals", "summary_lines",
           "write_report"]

REPORT_VERSION = 1
MAX_POINTS = 1000  # timeline points kept per loader (evenly thinned beyond)


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """What ran: the script (or ``-m`` module) and its arguments, whether torch's DataLoader was swapped for
    ours, the sampling interval, when it started (ISO 8601, UTC), how long it ran, how it ended."""

    target: str
    argv: tuple[str, ...]
    swap_torch: bool
    interval_s: float
    started: str
    duration_s: float
    exit_code: int
    error: str | None = None
    failed_samples: int = 0


@dataclass(frozen=True, slots=True)
class Interval:
    """The loop between two samples: batches handed over, seconds blocked in ``next()`` and between calls (in
    all), and the bottleneck then (``"step"`` when it waited at most WAIT_TARGET of the interval)."""

    steps: int
    wait_s: float
    step_s: float
    bottleneck: str

    @property
    def wait_fraction(self) -> float:
        return self.wait_s / (self.wait_s + self.step_s) if self.wait_s + self.step_s > 0 else 0.0


def intervals(samples: Sequence[Sample]) -> list[Interval]:
    """The interval that ends at each sample (the first: since the start).

    While a loader's window has not yet dropped a batch (fewer than ``WINDOW_STEPS`` in it), the
    interval's totals are exact differences of the window's totals (mean x ``window_steps``); later, its
    means times the interval's batches. So a slow batch counts in the interval it fell in, not for a whole
    window.
    """
    out = []
    wait_before = step_before = 0.0
    steps_before = 0
    for sample in samples:
        batches = sample.steps - steps_before
        if sample.window_steps < WINDOW_STEPS:
            wait = sample.wait_s * sample.window_steps - wait_before
            step = sample.step_s * sample.window_steps - step_before
        else:
            wait, step = sample.wait_s * batches, sample.step_s * batches
        interval = Interval(batches, max(wait, 0.0), max(step, 0.0), sample.bottleneck)
        if interval.wait_fraction <= WAIT_TARGET:
            interval = Interval(interval.steps, interval.wait_s, interval.step_s, "step")
        out.append(interval)
        wait_before, step_before = sample.wait_s * sample.window_steps, sample.step_s * sample.window_steps
        steps_before = sample.steps
    return out


def _mean(values: Sequence[float], weights: Sequence[int]) -> float:
    total = sum(weights)
    return sum(v * w for v, w in zip(values, weights)) / total if total else 0.0


def _loader_summary(trace: LoaderTrace, spans: Sequence[Interval]) -> dict[str, Any]:
    samples, weights = trace.samples, [span.steps for span in spans]
    steps = sum(weights)
    waited, stepped = sum(span.wait_s for span in spans), sum(span.step_s for span in spans)
    names = sorted({name for s in samples for name in s.stages})
    stages = {name: _mean([s.stages.get(name, 0.0) for s in samples], weights) for name in names}
    votes: dict[str, int] = {}
    for span in spans:
        votes[span.bottleneck] = votes.get(span.bottleneck, 0) + span.steps
    last = samples[-1] if samples else None
    return {
        "steps": last.steps if last else 0, "wall_s": waited + stepped,
        "wait_fraction": waited / (waited + stepped) if waited + stepped > 0 else 0.0,
        "wait_s": waited / steps if steps else 0.0, "step_s": stepped / steps if steps else 0.0,
        "samples_per_s": _mean([s.samples_per_s for s in samples],  # a sample whose window is empty has no rate
                               [w if s.window_steps else 0 for s, w in zip(samples, weights)]),
        "stages": stages,
        "bottleneck": max(votes, key=lambda name: votes[name]) if any(votes.values()) else "step",
        "workers": last.workers if last else 0, "prefetch": last.prefetch if last else 0,
        **{key: trace.latest.get(key) for key in ("worker_type", "autotune", "saturated", "worker_busy",
                                                  "read_cpu_share", "decode")},
    }


def _steady(spans: Sequence[Interval]) -> dict[str, float]:
    """Mean seconds per batch waiting and stepping after the first interval (which holds the workers' start-up),
    and the wait share then; over every interval when there is only one."""
    later = [span for span in spans[1:] if span.steps] or list(spans)
    steps = sum(span.steps for span in later)
    waited, stepped = sum(span.wait_s for span in later), sum(span.step_s for span in later)
    return {"wait_s": waited / steps if steps else 0.0, "step_s": stepped / steps if steps else 0.0,
            "wait_fraction": waited / (waited + stepped) if waited + stepped > 0 else 0.0}


def _costs_of(summary: Mapping[str, Any], cpus: int, *, map_style: bool) -> Costs:
    """The what-ifs' inputs: the steady state's wait and step, the run's stage costs and settings."""
    stages, steady = summary["stages"], summary["steady"]
    return Costs(wait_s=steady["wait_s"], step_s=steady["step_s"],
                 build_s=stages.get("dataset", 0.0) + stages.get("collate", 0.0), decode_s=stages.get("decode", 0.0),
                 cpu_share=float(summary.get("read_cpu_share") or 0.0), workers=int(summary["workers"]),
                 worker_type=str(summary.get("worker_type") or "thread"), cpus=cpus,
                 decode_mode=str((summary.get("decode") or {}).get("mode", "cpu")),
                 samples_per_s=summary["samples_per_s"], map_style=map_style)


def _timeline(samples: Sequence[Sample], spans: Sequence[Interval]) -> list[dict[str, Any]]:
    """One point per sample (evenly thinned to MAX_POINTS): the sample, its window's wait share as
    ``window_wait_fraction``, and as ``wait_fraction`` and ``bottleneck`` those of the interval it ends."""
    points = [{**asdict(s), "stages": dict(s.stages), "window_wait_fraction": s.wait_fraction,
               "wait_fraction": span.wait_fraction, "bottleneck": span.bottleneck} for s, span in zip(samples, spans)]
    stride = max(1, math.ceil(len(points) / MAX_POINTS))
    kept = points[::stride]
    if points and kept[-1] is not points[-1]:
        kept.append(points[-1])
    return kept


def _time_of(step: int, samples: Sequence[Sample]) -> float | None:
    """When the loader had handed over ``step`` batches (the first sample at or past it), else None."""
    return next((s.t_s for s in samples if s.steps >= step), None)


def _loader_report(trace: LoaderTrace, cpus: int) -> dict[str, Any]:
    spans = intervals(trace.samples)
    summary = {**_loader_summary(trace, spans), "steady": _steady(spans)}
    tuning = [{**decision, "t_s": _time_of(int(decision["step"]), trace.samples)}
              for decision in trace.latest.get("tuning", [])]
    costs = _costs_of(summary, cpus, map_style=trace.map_style)
    return {"name": trace.name, "dataset": trace.dataset, "batch_size": trace.batch_size,
            "first_seen_s": trace.first_seen_s, "alive_at_end": trace.alive_at_end, "summary": summary,
            "timeline": _timeline(trace.samples, spans),
            "tuning": tuning, "advice": list(trace.latest.get("advice", [])),
            "what_if": [w.as_dict() for w in what_ifs(costs)] if summary["steps"] else []}


def build_report(traces: Sequence[LoaderTrace], run: RunInfo, *, cpus: int) -> dict[str, Any]:
    """The report document of a run (module docstring) from its loaders' traces; ``cpus``: of this rank."""
    loaders = [_loader_report(trace, cpus) for trace in sorted(traces, key=lambda t: t.number)]
    wall = sum(entry["summary"]["wall_s"] for entry in loaders)
    waited = sum(entry["summary"]["wall_s"] * entry["summary"]["wait_fraction"] for entry in loaders)
    main = max(loaders, key=lambda entry: entry["summary"]["wall_s"], default=None)
    return _jsonable({
        "version": REPORT_VERSION, "run": asdict(run), "cpus": cpus,
        "overall": {"loop_s": wall, "wait_fraction": waited / wall if wall > 0 else 0.0,
                    "bottleneck": main["summary"]["bottleneck"] if main else None,
                    "main_loader": main["name"] if main else None},
        "loaders": loaders, "timeline_png": None, "timeline_note": "",
    })


def _jsonable(value: Any) -> Any:
    """``value`` with tuples as lists and non-finite floats as None (strict JSON)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """The report in a few lines of text, as the command prints them."""
    run, overall = report["run"], report["overall"]
    ending = f"exit {run['exit_code']}" + (f", {run['error'].splitlines()[-1]}" if run.get("error") else "")
    lines = [f"{run['target']} ran {run['duration_s']:.1f} s ({ending}); the loop waited "
             f"{overall['wait_fraction']:.0%} of its time for data; bottleneck: {overall['bottleneck'] or 'none'}"]
    if not report["loaders"]:
        lines.append("no loaders.DataLoader was iterated (pass --swap-torch for a script that uses torch's)")
    for entry in report["loaders"]:
        lines.extend(_loader_lines(entry))
    lines.append(f"timeline: {report['timeline_png'] or report['timeline_note']}")
    return lines


def _loader_lines(entry: Mapping[str, Any]) -> list[str]:
    summary = entry["summary"]
    stages = ", ".join(f"{name} {seconds * 1e3:.2f}" for name, seconds in summary["stages"].items() if seconds > 0)
    lines = [f"{entry['name']} ({entry['dataset']}, workers: {summary['workers']} {summary['worker_type']}): "
             f"{summary['steps']} batches, waits {summary['wait_fraction']:.0%} (step {summary['step_s'] * 1e3:.1f} "
             f"ms, wait {summary['wait_s'] * 1e3:.1f} ms a batch); bottleneck: {summary['bottleneck']}",
             f"  stages, ms a batch: {stages or 'none measured'}"]
    if not entry["alive_at_end"]:
        lines.append("  (collected before the script ended: its batches after the last sample are not counted)")
    lines.extend(f"  advice: {line}" for line in entry["advice"])
    lines.extend(f"  tuning: step {d['step']}: {d['knob']} {d['old']} -> {d['new']} ({d['why']})"
                 for d in entry["tuning"])
    for what in entry["what_if"]:
        how = f" ({what['how']})" if what["how"] else ""
        if what["wait_fraction"] is None:
            lines.append(f"  what if {what['change']}: {what['note']}{how}")
        else:
            lines.append(f"  what if {what['change']}: waits ~{what['wait_fraction']:.0%}, "
                         f"~{what['samples_per_s']:.0f} samples/s; {what['note']}{how}")
    return lines


def write_report(report: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``report`` to ``path`` (atomically: a temporary file renamed); returns the path."""
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(partial, target)
    return target
