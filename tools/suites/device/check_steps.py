"""device_suite's checks: where the numbers come from (``env``) and ``pytest -m gpu`` on the device (``pytest``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from loaders import cpus_available
from tools.common.synthetic import REPO_ROOT
from tools.gpu.versions import versions
from tools.suites.device.run_state import Suite


def step_env(suite: Suite) -> dict[str, Any]:
    """Where the numbers come from: device, versions, driver, cores, launch mode."""
    device = suite.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    smi = _command_output(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                           "--format=csv,noheader"]) if device.type == "cuda" else None
    return {"device": name, **versions(device), "nvidia_smi": smi, "cores_available": cpus_available(),
            "cuda_launch_blocking": os.environ.get("CUDA_LAUNCH_BLOCKING"), "smoke": suite.smoke}


def step_pytest(suite: Suite) -> dict[str, Any]:
    """``pytest -m gpu`` in a child process: the GPU-marked tests, with asynchronous launches."""
    xml_path, log_path = suite.out / "pytest_gpu.xml", suite.out / "pytest_gpu.log"
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rfEs",
               "--continue-on-collection-errors", f"--junitxml={xml_path}", *suite.plan.pytest_targets]
    env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "0", "PYTHONUNBUFFERED": "1"}
    # Leave a minute of the budget to the steps after it, but give it at least 10 s.
    timeout_s = min(suite.plan.pytest_timeout_s, max(10.0, suite.remaining_s() - 60))
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        # Its own process group, so that a hung run's worker processes are stopped with it
        # and do not load the cores during the measurements that follow.
        child = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            exit_code: int | None = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            exit_code = None
    result: dict[str, Any] = {"command": " ".join(command[1:]), "exit_code": exit_code,
                              "timed_out_after_s": None if exit_code is not None else timeout_s,
                              "seconds": time.perf_counter() - start, **junit_summary(xml_path)}
    # Without CUDA every selected test is a skip (exit 0); exit 5, nothing selected, is no pass.
    result["passed_all"] = exit_code == 0 and not result.get("failed")
    return result


def junit_summary(path: Path) -> dict[str, Any]:
    """Counts (tests, failures, errors, skipped) and the failed test ids of a junit XML file."""
    if not path.exists():
        return {"junit": None}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}" for case in root.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    return {"junit": path.name, **counts, "failed": failed}


def _command_output(command: Sequence[str]) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        return f"{command[0]} failed: {err}"
