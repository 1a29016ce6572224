"""What torch_suite's runs found: per-test outcomes from the plugin's events, regressions, the report.

Pure: ``outcomes_from_events`` folds the JSON lines of ``tools.suites.torch.child`` into one
``Outcome`` per test, ``regressions`` lists the tests that pass on stock and not on ours,
and ``format_report`` / ``run_to_json`` / ``run_from_json`` turn a ``SuiteRun`` into the
printed table and the ``--json`` report and back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from tools.suites.torch.child import TIMEOUT_MARKER

__all__ = ["Outcome", "SuiteRun", "counts", "format_report", "outcomes_from_events", "regressions",
           "run_from_json", "run_to_json", "signature"]


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one test: status (passed, failed, error, skipped, xfailed, xpassed,
    timeout, crashed), its duration in seconds, and the failure text (clipped)."""

    status: str
    duration_s: float = 0.0
    message: str = ""


_DIED = ("the interpreter died while this test ran (a crash, or the faulthandler watchdog "
         "ending a test that ignored its time limit)")
PASSING = frozenset({"passed", "xfailed"})  # "xfailed" as on stock: the test's own expectation holds
STATUSES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "timeout", "crashed")


def outcomes_from_events(events: Iterable[Mapping[str, Any]]) -> dict[str, Outcome]:
    """Fold the plugin's events into one ``Outcome`` per test id.

    A test with a start but no report was running when its interpreter died: ``crashed``.
    A failure carrying the per-test limit's marker is ``timeout``; a failure in setup or
    teardown is ``error`` (pytest's wording), in the call ``failed``.
    """
    results: dict[str, Outcome] = {}
    for event in events:
        kind, nodeid = event.get("event"), event.get("nodeid", "")
        if kind == "start":
            results[nodeid] = Outcome("crashed", 0.0, _DIED)
        elif kind == "report":
            results[nodeid] = _fold_report(results.get(nodeid), event)
    return results


def _fold_report(before: Outcome | None, event: Mapping[str, Any]) -> Outcome:
    when, outcome, message = event["when"], event["outcome"], event.get("message", "")
    duration = (before.duration_s if before else 0.0) + float(event.get("duration_s", 0.0))
    if outcome == "failed":
        status = "timeout" if TIMEOUT_MARKER in message else ("failed" if when == "call" else "error")
        if before is not None and before.status in ("failed", "timeout", "error") and when == "teardown":
            return dataclasses.replace(before, duration_s=duration)  # keep the first failure
        return Outcome(status, duration, message)
    if outcome == "skipped":
        return Outcome("xfailed" if event.get("xfail") else "skipped", duration, message)
    if when == "call":
        return Outcome("xpassed" if event.get("xfail") else "passed", duration, "")
    # A passed setup or teardown changes nothing; before the call the test counts as crashed
    # (its start event said so) until a call report arrives.
    return dataclasses.replace(before, duration_s=duration) if before else Outcome("crashed", duration, _DIED)


def counts(results: Mapping[str, Outcome]) -> dict[str, int]:
    """Number of tests per status (every status in ``STATUSES``, zeros included)."""
    out = dict.fromkeys(STATUSES, 0)
    for outcome in results.values():
        out[outcome.status] = out.get(outcome.status, 0) + 1
    return out


def regressions(stock: Mapping[str, Outcome], ours: Mapping[str, Outcome], *,
                subset: bool = False) -> dict[str, Outcome]:
    """The tests that pass on stock and do not pass on ours.

    A test missing from ours counts as not passing ("not run"), unless ``subset`` (ours ran a
    ``-k`` selection against a full stock baseline): then only the tests ours ran count.
    """
    return {k: ours.get(k, Outcome("not run")) for k, v in sorted(stock.items())
            if v.status in PASSING and ours.get(k, Outcome("not run")).status not in PASSING
            and (k in ours or not subset)}


def signature(message: str) -> str:
    """A one-line gist of a pytest failure text: its first ``E`` line (the exception), followed by
    the next one when that is only a heading ("Scalars are not equal!"); else the text's last line."""
    lines = [ln[1:].strip() for ln in message.splitlines() if ln.startswith("E ") and ln[1:].strip()]
    if lines:
        return " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(("!", ":")) else lines[0]
    tail = [ln.strip() for ln in message.splitlines() if ln.strip()]
    return tail[-1] if tail else ""


@dataclasses.dataclass(frozen=True)
class SuiteRun:
    """One run of the test file: per-test outcomes and how the interpreter ended.

    exit_delay_s: seconds from the end of the last test to the interpreter's exit (None
    when it had to be killed); leftovers: "pid cmdline" of processes of the run still
    alive after it exited (then killed); collect_errors: import or collection failures.
    """

    patched: bool
    results: dict[str, Outcome]
    wall_s: float
    attempts: int
    exit_delay_s: float | None
    leftovers: tuple[str, ...]
    collect_errors: tuple[str, ...]
    dataloader: str | None
    log_path: str


def run_to_json(run: SuiteRun) -> dict[str, Any]:
    """The JSON form of ``run`` (the dataclass's fields, plus ``counts`` per status)."""
    doc = dataclasses.asdict(run)
    doc["counts"] = counts(run.results)
    return doc


def run_from_json(doc: Mapping[str, Any]) -> SuiteRun:
    """The ``SuiteRun`` of a ``run_to_json`` document (``counts`` and unknown keys ignored)."""
    fields = {k: v for k, v in doc.items() if k in {f.name for f in dataclasses.fields(SuiteRun)}}
    fields["results"] = {k: Outcome(**v) for k, v in doc["results"].items()}
    fields["leftovers"], fields["collect_errors"] = tuple(doc["leftovers"]), tuple(doc["collect_errors"])
    return SuiteRun(**fields)


def format_report(runs: Mapping[str, SuiteRun], *, subset: bool = False) -> str:
    """Counts per run, the exit of each interpreter, and the tests that pass on stock only."""
    from tools.common.report import format_table

    rows = [[name, *counts(run.results).values(), len(run.results), round(run.wall_s), run.attempts]
            for name, run in runs.items()]
    out = [format_table(["run", *STATUSES, "total", "wall s", "attempts"], rows, title="torch test_dataloader.py")]
    for name, run in runs.items():
        ending = ("killed: did not exit" if run.exit_delay_s is None
                  else f"exited {run.exit_delay_s:.1f} s after its last test")
        out.append(f"\n{name}: DataLoader = {run.dataloader}; {ending}; log {run.log_path}")
        out += [f"  collection error: {e}" for e in run.collect_errors]
        out += [f"  left over (killed): {p}" for p in run.leftovers]
    if "stock" in runs and "ours" in runs:
        lost = regressions(runs["stock"].results, runs["ours"].results, subset=subset)
        out.append(f"\npass on stock, not on ours: {len(lost)}")
        out += [f"  {k}  [{v.status}]  {signature(v.message)[:160]}" for k, v in lost.items()]
    return "\n".join(out)
