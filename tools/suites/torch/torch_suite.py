"""PyTorch's own DataLoader tests against loaders.DataLoader (python -m tools.suites.torch.torch_suite).

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

This module is the parent side: it builds the child's environment, runs pytest in the
child (restarting it after a crash or hang without the tests already done), finds the
processes the run left behind, and prints the report. The child side, the patch and the
pytest plugin loaded by module name (``-p tools.suites.torch.child``) that writes one JSON
line per test start and report and bounds every test by a per-test time limit, is
``tools.suites.torch.child``; outcomes, comparison and report are ``tools.suites.torch.results``.

Needs ``expecttest`` (imported by ``torch.testing._internal``) and, for a few tests,
``psutil`` on the child's path: ``pip install --target DIR expecttest psutil`` and pass
``--extra-path DIR`` (default: a ``deps`` folder beside the test file, if present).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from tools.common.report import add_output_args, emit
from tools.suites.torch import child
from tools.suites.torch.child import EVENTS_ENV, START_METHOD_ENV, TARGET_ENV, TIMEOUT_ENV, WATCHDOG_GRACE_S
from tools.suites.torch.results import (
    SuiteRun,
    format_report,
    outcomes_from_events,
    regressions,
    run_from_json,
    run_to_json,
    signature,
)

__all__ = ["ProcStat", "child_environment", "main", "parse_proc_stat", "run_suite", "write_patch_dir"]

DEFAULT_TARGET = "loaders:DataLoader"
CHILD_PLUGIN = child.__name__  # loaded by the child by module name: "-p tools.suites.torch.child"
MAX_RESTARTS = 8
LEFTOVER_GRACE_S = 5.0  # a process of the run still alive this long after pytest exited is a leftover
REPO_ROOT = Path(__file__).resolve().parents[3]

_SITECUSTOMIZE = """\
# Written by tools.suites.torch.torch_suite: replace torch's DataLoader in every interpreter of the run.
import importlib.machinery, importlib.util, os, sys
if os.environ.get({env!r}):
    from {module} import install_patch_hook
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
# /proc: a run's leftover processes.


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
# Runner.


def write_patch_dir(path: Path) -> Path:
    """Create ``path`` holding the ``sitecustomize.py`` that patches torch in every interpreter; return it."""
    path.mkdir(parents=True, exist_ok=True)
    text = _SITECUSTOMIZE.format(env=TARGET_ENV, module=CHILD_PLUGIN)
    (path / "sitecustomize.py").write_text(text, encoding="utf-8")
    return path


def child_environment(base: Mapping[str, str], *, patch_dir: Path | None, extra_paths: Sequence[Path],
                      events_path: Path, timeout_s: float, target: str, with_slow: bool = False,
                      start_method: str | None = None) -> dict[str, str]:
    """The child's environment: PYTHONPATH = [patch dir], repo root, extra paths, then the old one.

    with_slow: also run the tests torch marks ``@slowTest`` (``test_proper_exit``: minutes).
    start_method: multiprocessing's default start method in the pytest child, set before the
    tests run (None: the interpreter's own default).
    """
    env = dict(base)
    if with_slow:
        env["PYTORCH_TEST_WITH_SLOW"] = "1"
    env.pop(START_METHOD_ENV, None)
    if start_method:
        env[START_METHOD_ENV] = start_method
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
              with_slow: bool = False, start_method: str | None = None) -> SuiteRun:
    """Run ``test_file`` under pytest in a child interpreter (restarting after a crash or hang)."""
    work = Path(tempfile.mkdtemp(prefix="torch_suite-", dir=log_dir))
    patch_dir = write_patch_dir(work / "patch") if patched else None
    ini = work / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    events_path, log_path = work / "events.jsonl", work / "pytest.log"
    env = child_environment(os.environ, patch_dir=patch_dir, extra_paths=extra_paths, events_path=events_path,
                            timeout_s=timeout_s, target=target, with_slow=with_slow, start_method=start_method)
    start, attempts, exit_delay, leftovers = time.monotonic(), 0, None, []
    done: set[str] = set()
    while attempts < MAX_RESTARTS:
        attempts += 1
        cmd = [sys.executable, "-m", "pytest", str(test_file), "-p", CHILD_PLUGIN, "-p", "no:cacheprovider",
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
                # size 0: the child has not created the file yet (a slow start on a busy machine).
                if size and finished_at is None and b'"finished"' in events_path.read_bytes()[-300:]:
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


# ---------------------------------------------------------------------------------------
# Command line.


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.suites.torch.torch_suite",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("test_file", type=Path, help="a copy of PyTorch's test/test_dataloader.py")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--stock", action="store_true", help="run only stock torch (unpatched)")
    which.add_argument("--ours", action="store_true", help="run only ours (compare with --baseline if given)")
    parser.add_argument("--baseline", type=Path, metavar="JSON", help="stock results from an earlier --json report")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="pytest -k expression: run a subset")
    parser.add_argument("--with-slow", action="store_true", help="also run torch's @slowTest tests (test_proper_exit)")
    parser.add_argument("--start-method", choices=("fork", "forkserver", "spawn"), metavar="METHOD",
                        help="multiprocessing's default start method for the whole file: fork, forkserver or spawn "
                             "(set in the pytest child before the tests; default: the interpreter's)")
    parser.add_argument("--target", default=DEFAULT_TARGET,
                        help=f"replacement 'module:attr' (default {DEFAULT_TARGET})")
    parser.add_argument("--timeout", type=float, default=180.0, metavar="S", help="per-test limit in seconds")
    parser.add_argument("--exit-grace", type=float, default=20.0, metavar="S",
                        help="seconds the interpreter may take to exit after its last test")
    parser.add_argument("--extra-path", type=Path, action="append", default=None, metavar="DIR",
                        help="put DIR on the child's PYTHONPATH (default: deps/ beside the test file)")
    parser.add_argument("--log-dir", type=Path, metavar="DIR", help="where the logs and event files go (default: /tmp)")
    add_output_args(parser, plot=None)
    return parser.parse_args(argv)


def _exit_status(runs: Mapping[str, SuiteRun], target: str, subset: bool) -> int:
    """2: a run collected nothing or the patch did not take; 1: a stock pass failed on ours; else 0."""
    if any(r.collect_errors or not r.results for r in runs.values()):
        return 2
    unpatched = [r for r in runs.values() if r.patched and (r.dataloader or "").startswith("torch.")]
    if unpatched:
        print(f"torch_suite: the patched run still used {unpatched[0].dataloader}: the replacement "
              f"{target} did not take effect (see {unpatched[0].log_path})", file=sys.stderr)
        return 2
    if "stock" in runs and "ours" in runs and regressions(runs["stock"].results, runs["ours"].results, subset=subset):
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if not args.test_file.is_file():
        print(f"torch_suite: no test file at {args.test_file}; fetch PyTorch's test/test_dataloader.py "
              "at the tag of the installed torch", file=sys.stderr)
        return 2
    deps = args.test_file.parent / "deps"
    extra = args.extra_path if args.extra_path is not None else [deps] if deps.is_dir() else []
    common = dict(keyword=args.keyword, timeout_s=args.timeout, exit_grace_s=args.exit_grace,
                  extra_paths=extra, target=args.target, log_dir=args.log_dir, with_slow=args.with_slow,
                  start_method=args.start_method)
    runs: dict[str, SuiteRun] = {}
    if args.baseline:
        try:
            runs["stock"] = run_from_json(json.loads(args.baseline.read_text(encoding="utf-8"))["results"]["stock"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            print(f"torch_suite: cannot read the stock results of {args.baseline}: {err!r}; "
                  "expected a --json report of a run that included stock", file=sys.stderr)
            return 2
    elif not args.ours:
        runs["stock"] = run_suite(args.test_file.resolve(), patched=False, **common)
    if not args.stock:
        runs["ours"] = run_suite(args.test_file.resolve(), patched=True, **common)
    subset = bool(args.keyword) and args.baseline is not None
    emit("torch_suite", format_report(runs, subset=subset), {k: run_to_json(v) for k, v in runs.items()}, args.json,
         argv)
    return _exit_status(runs, args.target, subset)


if __name__ == "__main__":
    sys.exit(main())
