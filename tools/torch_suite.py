"""PyTorch's own DataLoader tests against loaders.DataLoader (python -m tools.torch_suite).

Runs a copy of PyTorch's ``test/test_dataloader.py`` (fetched from PyTorch's repository at
the tag of the installed torch; never committed here) with pytest in a child interpreter,
twice: stock, and with ``torch.utils.data.DataLoader`` and
``torch.utils.data.dataloader.DataLoader`` replaced by ``loaders.DataLoader``. Prints the
counts of both runs, every test that passes on stock but not on ours with the last line
of its error, and whether the child interpreter exited promptly with no process left.

How the replacement reaches every process: the child's ``PYTHONPATH`` starts with a
temporary folder holding a ``sitecustomize.py`` that installs an import hook; when
``torch`` finishes importing, the hook imports the target (``loaders:DataLoader``) and
assigns it to both torch attributes. Every interpreter started from the child (spawned
workers, ``sys.executable -c`` subprocesses) inherits the environment and so the hook;
forked workers inherit the patched modules.

This module also is the pytest plugin loaded into the child (``-p tools.torch_suite``): it
writes one JSON line per test start and report to the file named by
``SHARDFEED_TORCH_SUITE_EVENTS``, and bounds every test by a per-test time limit (SIGALRM
raises ``TestTimeout`` in the test; a faulthandler watchdog ends the process if the test
cannot be interrupted, and the runner restarts pytest without the tests already done).

Needs ``expecttest`` (imported by ``torch.testing._internal``) and, for a few tests,
``psutil`` on the child's path: ``pip install --target DIR expecttest psutil`` and pass
``--extra-path DIR`` (default: a ``deps`` folder beside the test file, if present).
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import importlib
import importlib.machinery
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "Outcome",
    "ProcStat",
    "SuiteRun",
    "child_environment",
    "install_patch_hook",
    "main",
    "outcomes_from_events",
    "parse_proc_stat",
    "regressions",
    "run_suite",
    "write_patch_dir",
]

DEFAULT_TARGET = "loaders:DataLoader"
TARGET_ENV = "SHARDFEED_TORCH_SUITE_TARGET"  # "module:attr" that replaces torch's DataLoader
EVENTS_ENV = "SHARDFEED_TORCH_SUITE_EVENTS"  # JSON-lines file the plugin appends to
TIMEOUT_ENV = "SHARDFEED_TORCH_SUITE_TIMEOUT_S"
WATCHDOG_GRACE_S = 30.0  # past the per-test limit, the watchdog ends a test that SIGALRM could not
MESSAGE_HEAD, MESSAGE_TAIL = 1500, 3500  # characters of a failure kept in the report
MAX_RESTARTS = 8
LEFTOVER_GRACE_S = 5.0  # a process of the run still alive this long after pytest exited is a leftover
REPO_ROOT = Path(__file__).resolve().parent.parent

_SITECUSTOMIZE = """\
# Written by tools.torch_suite: replace torch's DataLoader in every interpreter of the run.
import importlib.machinery, importlib.util, os, sys
if os.environ.get({env!r}):
    from tools.torch_suite import install_patch_hook
    install_patch_hook(os.environ[{env!r}])
# Run the sitecustomize this one shadows, if any (as another module: this one stays imported).
_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _spec is not None and _spec.loader is not None:
    _shadowed = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_shadowed)
"""


# ---------------------------------------------------------------------------------------
# Child side: the patch and the pytest plugin.


class TestTimeout(Exception):
    """A test ran past the per-test limit of tools.torch_suite."""


def _apply_patch(target: str) -> None:
    module_name, _, attr = target.partition(":")
    replacement = getattr(importlib.import_module(module_name), attr or "DataLoader")
    import torch.utils.data
    import torch.utils.data.dataloader

    torch.utils.data.DataLoader = replacement
    torch.utils.data.dataloader.DataLoader = replacement


class _TorchImportHook:
    """Meta-path finder that patches torch's DataLoader once ``torch`` has finished importing."""

    def __init__(self, target: str) -> None:
        self.target = target

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module
        patch_target = self.target

        def exec_then_patch(module: Any) -> None:
            exec_module(module)
            _apply_patch(patch_target)

        spec.loader.exec_module = exec_then_patch  # type: ignore[method-assign]
        return spec


def install_patch_hook(target: str) -> None:
    """Make ``torch.utils.data[.dataloader].DataLoader`` the object named by ``target`` ("module:attr").

    Patches at once if torch is already imported, else as soon as ``import torch`` completes.
    """
    if "torch" in sys.modules:
        _apply_patch(target)
    else:
        sys.meta_path.insert(0, _TorchImportHook(target))


class _Recorder:
    """The plugin object: JSON lines of starts and reports, and the per-test time limit."""

    def __init__(self, path: str, timeout_s: float) -> None:
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole session
        self.timeout_s = timeout_s

    def write(self, **event: Any) -> None:
        self.file.write(json.dumps({"t": time.time(), **event}) + "\n")
        self.file.flush()

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.write(event="collect_error", nodeid=report.nodeid, message=_clip(str(report.longrepr)))

    def pytest_collection_finish(self, session: Any) -> None:
        data = sys.modules.get("torch.utils.data")
        loader = getattr(data, "DataLoader", None)
        name = f"{loader.__module__}.{loader.__qualname__}" if loader is not None else None
        self.write(event="collected", count=len(session.items), dataloader=name, pid=os.getpid())

    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Any:
        self.write(event="start", nodeid=item.nodeid)
        signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, self.timeout_s)
        faulthandler.dump_traceback_later(self.timeout_s + WATCHDOG_GRACE_S, exit=True, file=sys.__stderr__)
        return None  # let the default protocol run the test

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()

    def pytest_runtest_logreport(self, report: Any) -> None:
        message = _clip(str(report.longrepr)) if report.longrepr else ""
        self.write(event="report", nodeid=report.nodeid, when=report.when, outcome=report.outcome,
                   xfail=hasattr(report, "wasxfail"), duration_s=report.duration, message=message)

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        self.write(event="finished", exitstatus=int(exitstatus))

    def _on_alarm(self, signum: int, frame: Any) -> None:
        faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)
        raise TestTimeout(f"TIMEOUT: test ran past {self.timeout_s:g} s (tools.torch_suite per-test limit)")


def _clip(text: str) -> str:
    if len(text) <= MESSAGE_HEAD + MESSAGE_TAIL:
        return text
    return f"{text[:MESSAGE_HEAD]}\n[... {len(text) - MESSAGE_HEAD - MESSAGE_TAIL} characters ...]\n{text[-MESSAGE_TAIL:]}"


def pytest_configure(config: Any) -> None:
    """Register the recorder when the runner asked for events (a plain ``-p`` load does nothing)."""
    path = os.environ.get(EVENTS_ENV)
    if path:
        config.pluginmanager.register(_Recorder(path, float(os.environ.get(TIMEOUT_ENV, "180"))), "torch_suite")


# ---------------------------------------------------------------------------------------
# Pure parts: outcomes, comparisons, /proc parsing.


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
        status = "timeout" if "TIMEOUT: test ran past" in message else ("failed" if when == "call" else "error")
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


class ProcStat(NamedTuple):
    """The fields of ``/proc/PID/stat`` that find a run's leftovers."""

    pid: int
    state: str  # R, S, D, Z (zombie: dead, waiting to be reaped), ...
    ppid: int
    pgrp: int
    session: int


def parse_proc_stat(text: str) -> ProcStat:
    """The pid, state, parent, process group and session in the text of ``/proc/PID/stat``.

    The command name sits in parentheses and may itself hold spaces and parentheses,
    so the fields are counted from the last ')'.
    """
    pid = int(text[: text.index("(")].strip())
    fields = text[text.rindex(")") + 2 :].split()
    return ProcStat(pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]))


def session_members(session_id: int) -> list[int]:
    """Pids of the live (not zombie) processes whose session is ``session_id``: a run's leftovers."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = parse_proc_stat(f.read())
        except (OSError, ValueError):
            continue
        if stat.session == session_id and stat.pid != os.getpid() and stat.state != "Z":
            pids.append(stat.pid)
    return sorted(pids)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


# ---------------------------------------------------------------------------------------
# Runner side.


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


def write_patch_dir(path: Path) -> Path:
    """Create ``path`` holding the ``sitecustomize.py`` that patches torch in every interpreter; return it."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(env=TARGET_ENV), encoding="utf-8")
    return path


def child_environment(base: Mapping[str, str], *, patch_dir: Path | None, extra_paths: Sequence[Path],
                      events_path: Path, timeout_s: float, target: str, with_slow: bool = False) -> dict[str, str]:
    """The child's environment: PYTHONPATH = [patch dir], repo root, extra paths, then the old one.

    with_slow: also run the tests torch marks ``@slowTest`` (``test_proper_exit``: minutes).
    """
    env = dict(base)
    if with_slow:
        env["PYTORCH_TEST_WITH_SLOW"] = "1"
    paths = ([str(patch_dir)] if patch_dir else []) + [str(REPO_ROOT)] + [str(p) for p in extra_paths]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[EVENTS_ENV] = str(events_path)
    env[TIMEOUT_ENV] = str(timeout_s)
    env.pop("PYTEST_ADDOPTS", None)
    env["PYTORCH_PRINT_REPRO_ON_FAILURE"] = "0"  # torch's TestCase would end every failure with a rerun hint
    if patch_dir:
        env[TARGET_ENV] = target
    else:
        env.pop(TARGET_ENV, None)
    return env


def _read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a killed process
    return events


def run_suite(test_file: Path, *, patched: bool, keyword: str | None, timeout_s: float, exit_grace_s: float,
              extra_paths: Sequence[Path], target: str = DEFAULT_TARGET, log_dir: Path | None = None,
              with_slow: bool = False) -> SuiteRun:
    """Run ``test_file`` under pytest in a child interpreter (restarting after a crash or hang)."""
    work = Path(tempfile.mkdtemp(prefix="torch_suite-", dir=log_dir))
    patch_dir = write_patch_dir(work / "patch") if patched else None
    ini = work / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    events_path, log_path = work / "events.jsonl", work / "pytest.log"
    env = child_environment(os.environ, patch_dir=patch_dir, extra_paths=extra_paths, events_path=events_path,
                            timeout_s=timeout_s, target=target, with_slow=with_slow)
    start, attempts, exit_delay, leftovers = time.monotonic(), 0, None, []
    done: set[str] = set()
    while attempts < MAX_RESTARTS:
        attempts += 1
        cmd = [sys.executable, "-m", "pytest", str(test_file), "-p", "tools.torch_suite", "-p", "no:cacheprovider",
               "-c", str(ini), "--rootdir", str(test_file.parent), "-q", "-rN"]
        cmd += ["-k", keyword] if keyword else []
        for nodeid in sorted(done):
            cmd += ["--deselect", nodeid]
        delay, left = _run_child(cmd, env, log_path, events_path, timeout_s, exit_grace_s)
        exit_delay = delay  # only the last attempt can reach the end of the file
        leftovers += left
        events = _read_events(events_path)
        if any(e.get("event") == "finished" for e in events[_last_session_start(events):]):
            break
        seen = set(outcomes_from_events(events))
        if not seen - done:
            break  # no progress: collection failed or the child died before the first test
        done |= seen
    events = _read_events(events_path)
    collected = [e for e in events if e.get("event") == "collected"]
    return SuiteRun(patched=patched, results=outcomes_from_events(events), wall_s=time.monotonic() - start,
                    attempts=attempts, exit_delay_s=exit_delay, leftovers=tuple(leftovers),
                    collect_errors=tuple(f"{e['nodeid']}: {signature(e['message'])}" for e in events
                                         if e.get("event") == "collect_error"),
                    dataloader=collected[0].get("dataloader") if collected else None, log_path=str(log_path))


def _last_session_start(events: Sequence[Mapping[str, Any]]) -> int:
    starts = [i for i, e in enumerate(events) if e.get("event") == "collected"]
    return starts[-1] if starts else 0


def _run_child(cmd: list[str], env: Mapping[str, str], log_path: Path, events_path: Path, timeout_s: float,
               exit_grace_s: float) -> tuple[float | None, list[str]]:
    """Run one pytest child in its own session; return (exit delay after the last test, leftovers)."""
    with open(log_path, "ab") as log:
        log.write(f"\n$ {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, env=dict(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=str(REPO_ROOT))
        finished_at, last_size, last_change, gave_up = None, -1, time.monotonic(), False
        while proc.poll() is None:
            time.sleep(0.5)
            size = events_path.stat().st_size if events_path.exists() else 0
            if size != last_size:
                last_size, last_change = size, time.monotonic()
                if finished_at is None and b'"finished"' in events_path.read_bytes()[-300:]:
                    finished_at = time.monotonic()
            stuck = time.monotonic() - last_change > timeout_s + WATCHDOG_GRACE_S + 60
            if (finished_at is not None and time.monotonic() - finished_at > exit_grace_s) or stuck:
                gave_up = True
                if _catches(proc.pid, signal.SIGUSR1):  # the test file registers faulthandler on SIGUSR1
                    log.write(b"\n[torch_suite] the child did not exit; its threads:\n")
                    log.flush()
                    _signal(proc.pid, signal.SIGUSR1)
                    time.sleep(2.0)
                break
        delay = max(0.0, time.monotonic() - finished_at) if finished_at is not None and not gave_up else None
        members = _lingering(proc.pid, 0.0 if gave_up else LEFTOVER_GRACE_S)
        left = [f"{pid} {_cmdline(pid)}" for pid in members if not (gave_up and pid == proc.pid)]
        if gave_up:
            why = (f"did not exit within {exit_grace_s:g} s after its last test" if finished_at is not None
                   else "made no progress (no test event) and was killed")
            left.insert(0, f"{proc.pid} pytest itself {why}")
        for pid in members:
            _signal(pid, signal.SIGKILL)
        proc.wait()
    return delay, left


def _lingering(session_id: int, grace_s: float) -> list[int]:
    """Members of the session still alive after ``grace_s`` seconds (helpers such as
    multiprocessing's resource tracker end a moment after the interpreter they serve)."""
    deadline = time.monotonic() + grace_s
    members = session_members(session_id)
    while members and time.monotonic() < deadline:
        time.sleep(0.2)
        members = session_members(session_id)
    return members


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (the SigCgt mask of /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            mask = next(int(ln.split()[1], 16) for ln in f if ln.startswith("SigCgt:"))
    except (OSError, StopIteration, ValueError):
        return False
    return bool(mask >> (signum - 1) & 1)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------------------------------
# Report.


def _run_to_json(run: SuiteRun) -> dict[str, Any]:
    doc = dataclasses.asdict(run)
    doc["counts"] = counts(run.results)
    return doc


def _run_from_json(doc: Mapping[str, Any]) -> SuiteRun:
    fields = {k: v for k, v in doc.items() if k in {f.name for f in dataclasses.fields(SuiteRun)}}
    fields["results"] = {k: Outcome(**v) for k, v in doc["results"].items()}
    fields["leftovers"], fields["collect_errors"] = tuple(doc["leftovers"]), tuple(doc["collect_errors"])
    return SuiteRun(**fields)


def format_report(runs: Mapping[str, SuiteRun], *, subset: bool = False) -> str:
    """Counts per run, the exit of each interpreter, and the tests that pass on stock only."""
    from tools._report import format_table

    rows = [[name, *counts(run.results).values(), len(run.results), round(run.wall_s), run.attempts]
            for name, run in runs.items()]
    out = [format_table(["run", *STATUSES, "total", "wall s", "attempts"], rows, title="torch test_dataloader.py")]
    for name, run in runs.items():
        ending = "killed: did not exit" if run.exit_delay_s is None else f"exited {run.exit_delay_s:.1f} s after its last test"
        out.append(f"\n{name}: DataLoader = {run.dataloader}; {ending}; log {run.log_path}")
        out += [f"  collection error: {e}" for e in run.collect_errors]
        out += [f"  left over (killed): {p}" for p in run.leftovers]
    if "stock" in runs and "ours" in runs:
        lost = regressions(runs["stock"].results, runs["ours"].results, subset=subset)
        out.append(f"\npass on stock, not on ours: {len(lost)}")
        out += [f"  {k}  [{v.status}]  {signature(v.message)[:160]}" for k, v in lost.items()]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.torch_suite", description=__doc__.split("\n")[0])
    parser.add_argument("test_file", type=Path, help="a copy of PyTorch's test/test_dataloader.py")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--stock", action="store_true", help="run only stock torch (unpatched)")
    which.add_argument("--ours", action="store_true", help="run only ours (compare with --baseline if given)")
    parser.add_argument("--baseline", type=Path, metavar="JSON", help="stock results from an earlier --json report")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="pytest -k expression: run a subset")
    parser.add_argument("--with-slow", action="store_true", help="also run torch's @slowTest tests (test_proper_exit)")
    parser.add_argument("--target", default=DEFAULT_TARGET, help=f"replacement 'module:attr' (default {DEFAULT_TARGET})")
    parser.add_argument("--timeout", type=float, default=180.0, metavar="S", help="per-test limit in seconds")
    parser.add_argument("--exit-grace", type=float, default=20.0, metavar="S",
                        help="seconds the interpreter may take to exit after its last test")
    parser.add_argument("--extra-path", type=Path, action="append", default=None, metavar="DIR",
                        help="put DIR on the child's PYTHONPATH (default: deps/ beside the test file)")
    parser.add_argument("--log-dir", type=Path, metavar="DIR", help="where the logs and event files go (default: /tmp)")
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH ('-' for stdout)")
    args = parser.parse_args(argv)
    if not args.test_file.is_file():
        print(f"torch_suite: no test file at {args.test_file}; fetch PyTorch's test/test_dataloader.py "
              "at the tag of the installed torch", file=sys.stderr)
        return 2
    extra = args.extra_path if args.extra_path is not None else [p for p in [args.test_file.parent / "deps"] if p.is_dir()]
    common = dict(keyword=args.keyword, timeout_s=args.timeout, exit_grace_s=args.exit_grace,
                  extra_paths=extra, target=args.target, log_dir=args.log_dir, with_slow=args.with_slow)
    runs: dict[str, SuiteRun] = {}
    if args.baseline:
        try:
            runs["stock"] = _run_from_json(json.loads(args.baseline.read_text(encoding="utf-8"))["results"]["stock"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            print(f"torch_suite: cannot read the stock results of {args.baseline}: {err!r}; "
                  "expected a --json report of a run that included stock", file=sys.stderr)
            return 2
    elif not args.ours:
        runs["stock"] = run_suite(args.test_file.resolve(), patched=False, **common)
    if not args.stock:
        runs["ours"] = run_suite(args.test_file.resolve(), patched=True, **common)
    subset = bool(args.keyword) and args.baseline is not None
    text = format_report(runs, subset=subset)
    if args.json != "-":
        print(text)
    if args.json:
        from tools._report import report_document, write_json

        write_json(args.json, report_document("torch_suite", {k: _run_to_json(v) for k, v in runs.items()}))
    if any(r.collect_errors or not r.results for r in runs.values()):
        return 2
    unpatched = [r for r in runs.values() if r.patched and (r.dataloader or "").startswith("torch.")]
    if unpatched:
        print(f"torch_suite: the patched run still used {unpatched[0].dataloader}: the replacement "
              f"{args.target} did not take effect (see {unpatched[0].log_path})", file=sys.stderr)
        return 2
    if "stock" in runs and "ours" in runs and regressions(runs["stock"].results, runs["ours"].results, subset=subset):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
