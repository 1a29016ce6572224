"""device_suite part 1: environment, ``pytest -m gpu``, host-to-device copies, augmentation cost, JPEG decode."""

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

from tools._augment_cost import measure_augment
from tools._decode_gpu import jpegs_in, measure_decode
from tools._h2d import link_info, measure_h2d
from tools._suite import Suite, free_gpu
from tools._synthetic import REPO_ROOT, make_raw_images, rgb_jpegs, shard
from tools._train_step import train_step_fn
from tools.gpu_bench import versions


def step_env(suite: Suite) -> dict[str, Any]:
    """Where the numbers come from: device, versions, driver, cores, launch mode."""
    device = suite.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    smi = _command_output(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                           "--format=csv,noheader"]) if device.type == "cuda" else None
    from loaders import cpus_available

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


def step_h2d(suite: Suite) -> dict[str, Any]:
    link = link_info(suite.device)
    rows = measure_h2d(suite.device, suite.plan.bench, link.get("peak_gb_s"), repeats=20)
    result = {"link": link, "batch": suite.plan.bench.batch, "side": suite.plan.bench.side, "rows": rows}
    if suite.device.type != "cuda":
        result["not_measured"] = {"pinned rows": "pinned host memory needs CUDA",
                                  "of_link_peak": f"no link peak: {link.get('skipped')}"}
    return result


def step_augment(suite: Suite) -> dict[str, Any]:
    step = train_step_fn(suite.device, suite.plan.bench)
    try:
        return measure_augment(suite.device, suite.plan.bench, step)
    finally:
        del step
        free_gpu(suite.device)


def step_decode(suite: Suite) -> dict[str, Any]:
    """Decode rates over raw JPEGs and over the same images pre-resized by ``dataprep shard``."""
    raw = make_raw_images(suite.scratch / "decode-raw", suite.plan.decode_images)
    resized = shard(raw, suite.scratch / "decode-r256", resize_short=256)
    from loaders import cpus_available

    threads = cpus_available()
    sets = {"raw": rgb_jpegs(p.read_bytes() for p in sorted(raw.rglob("*.jpg"))),
            "resized_256": rgb_jpegs(jpegs_in(resized, suite.plan.decode_images))}
    return {name: measure_decode(suite.device, jpegs, threads=threads, side=suite.plan.bench.side)
            for name, jpegs in sets.items()}


def _command_output(command: Sequence[str]) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        return f"{command[0]} failed: {err}"
