"""The child side of torch_suite: the DataLoader patch and the pytest plugin that records each test.

Imported in every interpreter of a patched run by the ``sitecustomize.py`` that
``tools.suites.torch.torch_suite`` writes (``install_patch_hook``), and loaded into the pytest child by
module name (``-p tools.suites.torch.child``): it writes one JSON line per test start and
report to the file named by ``SHARDFEED_TORCH_SUITE_EVENTS``, and bounds every test by a
per-test time limit (SIGALRM raises ``TestTimeout`` in the test; a faulthandler watchdog
ends the process if the test cannot be interrupted). Standard library only, so that every
interpreter of the run stays light.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.machinery
import json
import os
import signal
import sys
import time
from typing import Any

__all__ = ["TestTimeout", "install_patch_hook", "pytest_configure"]

TARGET_ENV = "SHARDFEED_TORCH_SUITE_TARGET"  # "module:attr" that replaces torch's DataLoader
EVENTS_ENV = "SHARDFEED_TORCH_SUITE_EVENTS"  # JSON-lines file the plugin appends to
TIMEOUT_ENV = "SHARDFEED_TORCH_SUITE_TIMEOUT_S"
START_METHOD_ENV = "SHARDFEED_TORCH_SUITE_START_METHOD"  # multiprocessing's default in the pytest child
WATCHDOG_GRACE_S = 30.0  # past the per-test limit, the watchdog ends a test that SIGALRM could not
MESSAGE_HEAD, MESSAGE_TAIL = 1500, 3500  # characters of a failure kept in the report
TIMEOUT_MARKER = "TIMEOUT: test ran past"  # opens the message of every TestTimeout


class TestTimeout(Exception):
    """A test ran past the per-test limit of tools.suites.torch.torch_suite."""


def _apply_patch(target: str) -> None:
    module_name, _, attr = target.partition(":")
    replacement = getattr(importlib.import_module(module_name), attr or "DataLoader")
    import torch.utils.data
    import torch.utils.data.dataloader

    # Replacing torch's class with another is the point of the patch, which its stubs cannot allow.
    torch.utils.data.DataLoader = replacement  # type: ignore[misc]  # see the comment above
    torch.utils.data.dataloader.DataLoader = replacement  # type: ignore[misc]  # see the comment above


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

        # Wrapping the loader's method on this one spec is the hook's whole job; mypy forbids method assignment.
        spec.loader.exec_module = exec_then_patch  # type: ignore[method-assign]  # see the comment above
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
        faulthandler.dump_traceback_later(self.timeout_s + WATCHDOG_GRACE_S, exit=True,
                                          file=sys.__stderr__ or sys.stderr)
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
        faulthandler.dump_traceback(file=sys.__stderr__ or sys.stderr, all_threads=True)
        raise TestTimeout(f"{TIMEOUT_MARKER} {self.timeout_s:g} s (tools.suites.torch.torch_suite per-test limit)")


def _clip(text: str) -> str:
    if len(text) <= MESSAGE_HEAD + MESSAGE_TAIL:
        return text
    left_out = len(text) - MESSAGE_HEAD - MESSAGE_TAIL
    return f"{text[:MESSAGE_HEAD]}\n[... {left_out} characters ...]\n{text[-MESSAGE_TAIL:]}"


def pytest_configure(config: Any) -> None:
    """Register the recorder when the runner asked for events (a plain ``-p`` load does nothing); set
    multiprocessing's default start method when the runner named one (before the test file is imported)."""
    method = os.environ.get(START_METHOD_ENV)
    if method:
        import multiprocessing

        multiprocessing.set_start_method(method, force=True)
    path = os.environ.get(EVENTS_ENV)
    if path:
        config.pluginmanager.register(_Recorder(path, float(os.environ.get(TIMEOUT_ENV, "180"))), "torch_suite")
