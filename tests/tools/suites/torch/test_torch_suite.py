"""tools.suites.torch.torch_suite and its parts (child, results): outcomes from the
plugin's events, regressions, the JSON report, /proc parsing, the patch reaching spawned children,
per-test time limits and leftover processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools.suites.torch import child as plugin
from tools.suites.torch import torch_suite
from tools.suites.torch.results import (
    Outcome,
    SuiteRun,
    outcomes_from_events,
    regressions,
    run_from_json,
    run_to_json,
    signature,
)
from tools.suites.torch.torch_suite import parse_proc_stat

TARGET = plugin.TARGET_ENV


def _report(nodeid: str, when: str, outcome: str, message: str = "", xfail: bool = False) -> dict[str, object]:
    return {"event": "report", "nodeid": nodeid, "when": when, "outcome": outcome, "message": message,
            "xfail": xfail, "duration_s": 0.5}


def _lifecycle(nodeid: str, call: str = "passed", message: str = "", setup: str = "passed",
               teardown: str = "passed") -> list[dict[str, object]]:
    events = [{"event": "start", "nodeid": nodeid},
              _report(nodeid, "setup", setup, message if setup != "passed" else "")]
    if setup == "passed":
        events.append(_report(nodeid, "call", call, message if call != "passed" else ""))
    events.append(_report(nodeid, "teardown", teardown, message if teardown == "failed" else ""))
    return events


def test_outcomes_from_events_names_every_kind_of_ending() -> None:
    events = [
        *_lifecycle("t::ok"),
        *_lifecycle("t::bad", call="failed", message="E   RecursionError: maximum recursion depth exceeded"),
        *_lifecycle("t::setup_error", setup="failed", message="E   ImportError: x"),
        *_lifecycle("t::teardown_error", teardown="failed", message="E   OSError: y"),
        *_lifecycle("t::slow", call="failed",
                    message="E   tools.suites.torch.child.TestTimeout: TIMEOUT: test ran past 2 s"),
        {"event": "start", "nodeid": "t::skip"}, _report("t::skip", "setup", "skipped", "CUDA unavailable"),
        _report("t::skip", "teardown", "passed"),
        {"event": "start", "nodeid": "t::xfail"}, _report("t::xfail", "setup", "passed"),
        _report("t::xfail", "call", "skipped", "reason", xfail=True), _report("t::xfail", "teardown", "passed"),
        {"event": "start", "nodeid": "t::died"}, _report("t::died", "setup", "passed"),
    ]
    got = {k: v.status for k, v in outcomes_from_events(events).items()}
    assert got == {"t::ok": "passed", "t::bad": "failed", "t::setup_error": "error", "t::teardown_error": "error",
                   "t::slow": "timeout", "t::skip": "skipped", "t::xfail": "xfailed", "t::died": "crashed"}
    assert "RecursionError" in outcomes_from_events(events)["t::bad"].message
    assert "interpreter died" in outcomes_from_events(events)["t::died"].message


def test_a_teardown_failure_after_a_failed_call_keeps_the_first_failure() -> None:
    events = _lifecycle("t::x", call="failed", message="E   ValueError: first", teardown="failed")
    assert outcomes_from_events(events)["t::x"] == Outcome("failed", 1.5, "E   ValueError: first")


def test_regressions_are_stock_passes_that_do_not_pass_on_ours() -> None:
    stock = {"a": Outcome("passed"), "b": Outcome("passed"), "c": Outcome("failed"), "d": Outcome("xfailed"),
             "e": Outcome("passed"), "f": Outcome("skipped")}
    ours = {"a": Outcome("passed"), "b": Outcome("timeout"), "c": Outcome("failed"), "d": Outcome("xpassed"),
            "f": Outcome("failed")}
    assert ({k: v.status for k, v in regressions(stock, ours).items()}
            == {"b": "timeout", "d": "xpassed", "e": "not run"})
    # ours ran a -k selection against a full stock baseline: what it did not select is not lost
    assert {k: v.status for k, v in regressions(stock, ours, subset=True).items()} == {"b": "timeout", "d": "xpassed"}


def test_a_run_survives_the_json_report_it_is_written_to() -> None:
    run = SuiteRun(patched=True, results={"t::a": Outcome("passed", 1.5), "t::b": Outcome("timeout", 3.0, "E  x")},
                   wall_s=9.0, attempts=2, exit_delay_s=None, leftovers=("42 python -c x",),
                   collect_errors=("t.py: ImportError: y",), dataloader="loaders.dataloader.DataLoader", log_path="/l")
    doc = json.loads(json.dumps(run_to_json(run)))
    assert doc["counts"]["passed"] == 1 and doc["counts"]["timeout"] == 1 and doc["counts"]["crashed"] == 0
    assert run_from_json(doc) == run


def test_the_plugin_keeps_the_head_and_tail_of_a_long_failure() -> None:
    head, tail = plugin.MESSAGE_HEAD, plugin.MESSAGE_TAIL
    text = "h" * head + "m" * 10 + "t" * tail
    assert plugin._clip(text) == "h" * head + "\n[... 10 characters ...]\n" + "t" * tail
    assert plugin._clip(text[:-10]) == text[:-10]


def test_the_child_side_loads_alone_without_torch_or_the_runner() -> None:
    code = ("import sys, tools.suites.torch.child as c; assert hasattr(c, 'pytest_configure'); "
            "print(sorted(m for m in sys.modules "
            "if m in ('torch', 'tools.suites.torch.torch_suite', 'tools.suites.torch.results')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=torch_suite.REPO_ROOT, capture_output=True, text=True,
                         timeout=60, check=False)
    assert (out.returncode, out.stdout.strip()) == (0, "[]"), out.stderr
    assert torch_suite.CHILD_PLUGIN == "tools.suites.torch.child"


def test_signature_is_the_exception_line() -> None:
    text = ("def test():\n>       boom()\nE       RecursionError: maximum recursion depth exceeded\n\n"
            "file.py:3: RecursionError")
    assert signature(text) == "RecursionError: maximum recursion depth exceeded"
    scalars = ("E   AssertionError: Scalars are not equal!\nE   \nE   Expected 50 but got 1.\n"
               "E   Absolute difference: 49")
    assert signature(scalars) == "AssertionError: Scalars are not equal! Expected 50 but got 1."
    assert signature("Skipped: CUDA unavailable") == "Skipped: CUDA unavailable"
    assert signature("") == ""


def test_parse_proc_stat_counts_fields_after_a_command_name_with_spaces_and_parentheses() -> None:
    stat = parse_proc_stat("4242 (pt_data (worker) 1) S 4200 4100 4000 0 -1 4194560 100 0")
    assert stat == torch_suite.ProcStat(pid=4242, state="S", ppid=4200, pgrp=4100, session=4000)
    with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as f:
        own = parse_proc_stat(f.read())
    assert (own.pid, own.ppid, own.session) == (os.getpid(), os.getppid(), os.getsid(0))


def test_child_environment_puts_the_patch_first_only_when_patched(tmp_path: Path) -> None:
    base = {"PYTHONPATH": "/old", TARGET: "stale:Thing", "PYTEST_ADDOPTS": "-x"}
    env = torch_suite.child_environment(base, patch_dir=tmp_path, extra_paths=[Path("/deps")],
                                        events_path=tmp_path / "e.jsonl", timeout_s=5.0, target="m:C")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), str(torch_suite.REPO_ROOT), "/deps", "/old"]
    assert env[TARGET] == "m:C" and "PYTEST_ADDOPTS" not in env
    stock = torch_suite.child_environment(base, patch_dir=None, extra_paths=[], events_path=tmp_path / "e.jsonl",
                                          timeout_s=5.0, target="m:C")
    assert TARGET not in stock and stock["PYTHONPATH"].split(os.pathsep)[0] == str(torch_suite.REPO_ROOT)


_PROBE = textwrap.dedent("""\
    import multiprocessing as mp
    import torch.utils.data
    import torch.utils.data.dataloader

    def name():
        import torch.utils.data
        d = torch.utils.data
        assert d.DataLoader is d.dataloader.DataLoader, "the two attributes differ"
        return d.DataLoader.__module__ + "." + d.DataLoader.__qualname__

    if __name__ == "__main__":
        with mp.get_context("spawn").Pool(1) as pool:
            print(name(), pool.apply(name))
""")


@pytest.mark.slow
def test_the_replacement_reaches_the_test_process_and_its_spawned_children(tmp_path: Path) -> None:
    (tmp_path / "fake_loader.py").write_text("class DataLoader:\n    pass\n")
    (tmp_path / "probe.py").write_text(_PROBE)
    patch = torch_suite.write_patch_dir(tmp_path / "patch")
    env = torch_suite.child_environment(os.environ, patch_dir=patch, extra_paths=[tmp_path],
                                        events_path=tmp_path / "e.jsonl", timeout_s=5.0,
                                        target="fake_loader:DataLoader")
    out = subprocess.run([sys.executable, str(tmp_path / "probe.py")], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["fake_loader.DataLoader", "fake_loader.DataLoader"]
    assert "Error in sitecustomize" not in out.stderr


def test_the_patch_runs_quietly_and_still_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    shadowed = tmp_path / "other"
    shadowed.mkdir()
    (shadowed / "sitecustomize.py").write_text("print('shadowed sitecustomize ran')\n")
    patch = torch_suite.write_patch_dir(tmp_path / "patch")
    env = torch_suite.child_environment(os.environ, patch_dir=patch, extra_paths=[shadowed],
                                        events_path=tmp_path / "e.jsonl", timeout_s=5.0, target="m:C")
    code = "import sys; print(any(type(f).__name__ == '_TorchImportHook' for f in sys.meta_path))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         check=False)
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.split("\n")[:2] == ["shadowed sitecustomize ran", "True"]


_FAKE_SUITE = textwrap.dedent("""\
    import subprocess, sys, threading, time
    import pytest

    def test_passes():
        pass

    def test_fails():
        raise ValueError("expected failure")

    @pytest.mark.skip(reason="not here")
    def test_skipped():
        pass

    def test_hangs():
        time.sleep(60)

    def test_leaves_a_process_and_a_thread():
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        threading.Thread(target=time.sleep, args=(60,), daemon=False).start()
""")


@pytest.mark.slow
def test_run_suite_reports_timeouts_an_interpreter_that_does_not_exit_and_leftover_processes(tmp_path: Path) -> None:
    test_file = tmp_path / "suite" / "test_fake.py"
    test_file.parent.mkdir()
    test_file.write_text(_FAKE_SUITE)
    run = torch_suite.run_suite(test_file, patched=False, keyword=None, timeout_s=2.0, exit_grace_s=2.0,
                                extra_paths=[], log_dir=tmp_path)
    got = {k.split("::")[-1]: v.status for k, v in run.results.items()}
    assert got == {"test_passes": "passed", "test_fails": "failed", "test_skipped": "skipped",
                   "test_hangs": "timeout", "test_leaves_a_process_and_a_thread": "passed"}
    assert "expected failure" in run.results["test_fake.py::test_fails"].message
    assert run.exit_delay_s is None, "the non-daemon thread keeps the interpreter alive: reported as not exiting"
    assert any("did not exit" in p for p in run.leftovers)
    assert any("time.sleep(60)" in p for p in run.leftovers), run.leftovers


def test_run_suite_sets_the_start_method_for_the_whole_file_before_it_is_imported(tmp_path: Path) -> None:
    test_file = tmp_path / "suite" / "test_method.py"
    test_file.parent.mkdir()
    test_file.write_text("import multiprocessing\nAT_IMPORT = multiprocessing.get_start_method(allow_none=True)\n"
                         "def test_method():\n    assert AT_IMPORT == multiprocessing.get_start_method() == 'spawn'\n")
    stale = {**os.environ, plugin.START_METHOD_ENV: "forkserver"}
    assert plugin.START_METHOD_ENV not in torch_suite.child_environment(
        stale, patch_dir=None, extra_paths=[], events_path=tmp_path / "e.jsonl", timeout_s=5.0, target="m:C")
    run = torch_suite.run_suite(test_file, patched=False, keyword=None, timeout_s=60.0, exit_grace_s=20.0,
                                extra_paths=[], log_dir=tmp_path, start_method="spawn")
    assert {k.split("::")[-1]: v.status for k, v in run.results.items()} == {"test_method": "passed"}


def test_main_refuses_a_missing_test_file_and_an_unreadable_baseline(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert torch_suite.main([str(tmp_path / "absent.py")]) == 2
    assert "no test file at" in capsys.readouterr().err
    test_file = tmp_path / "test_x.py"
    test_file.write_text("def test_x():\n    pass\n")
    baseline = tmp_path / "base.json"
    baseline.write_text('{"results": {"ours": {}}}')
    assert torch_suite.main([str(test_file), "--ours", "--baseline", str(baseline)]) == 2
    assert "cannot read the stock results" in capsys.readouterr().err
