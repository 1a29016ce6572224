"""Everything issue 13 asks of a GPU machine, in one or two calls, with every result under ``--out``.

    python -m tools.device_suite --out "$OUT" --part 1     # tests on CUDA, copies, augment cost, decode
    python -m tools.device_suite --out "$OUT" --part 2     # end to end training, scaling to 16 cores
    python -m tools.device_suite --out DIR --smoke         # both parts, tiny, on the CPU (CI runs this)
    python -m tools.device_suite --render DIR              # the tables of a finished run, from its JSON

Part 1 (about 4 minutes on one H100 with 16 cores):
  env        device name, torch / CUDA / cuDNN / torchvision versions, nvidia-smi, cores
  pytest     ``pytest -m gpu`` over the whole suite with CUDA_LAUNCH_BLOCKING=0: junit XML
             (pytest_gpu.xml) and log (pytest_gpu.log) in OUT; counts and failures in the JSON
  h2d        uint8 and float32 [256, 224, 224, 3] host-to-device copies, pinned vs pageable,
             GB/s and % of the PCIe link's theoretical peak (nvidia-smi's max gen x width)
  augment    ``Augment`` per batch as a share of one ResNet-50 step (bf16, channels_last, 256)
  decode     JPEG decode: Pillow on every core vs ``torchvision.io.decode_jpeg`` batched on
             the GPU, over raw images and over ``--resize-short 256`` shards
Part 2 (about 5 minutes):
  data       synthetic ImageNet-like raw tree (``dataprep.synthetic``), sharded as is and
             pre-resized (``dataprep shard --resize-short 256``)
  end_to_end ResNet-50 training img/s, host wait and GPU idle (CUDA events) fed by
             ``loaders.DataLoader(device=...)`` over both shard sets and by the stock
             DataLoader over the raw files (float32 transforms), at 4, 8, 16 workers, vs
             the synthetic ceiling
  scaling_shard   ``dataprep shard`` images/s at 1..16 threads, and several writer
             processes over disjoint parts of the inputs; speed-up and CPU efficiency
  scaling_loader  loader img/s at 1..16 workers, threads vs processes (``tools.loader``'s
             runner), with CPU efficiency per worker

Each step's result is written to OUT/part<N>.json (the whole document, rewritten after every
step) the moment the step ends, so a late failure or the call's time limit loses nothing
already measured. A step that fails is recorded with its error and the next one runs; one
whose turn comes after ``--budget-s`` (seconds for the whole invocation) is recorded as
skipped. Exit status: 0 when every step ran, 1 when any failed or was skipped, 2 for bad
arguments; failing tests do not change it (the pytest step's ``passed_all`` says).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from tools import gpu_bench
from tools._report import ToolError, format_table, machine_info, write_json

TOOL = "device_suite"
SUITE_VERSION = 1
REPO_ROOT = Path(__file__).resolve().parents[1]
PARTS = {"1": ("env", "pytest", "h2d", "augment", "decode"),
         "2": ("env", "data", "end_to_end", "scaling_shard", "scaling_loader")}


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes of one run: full (a GPU machine) or smoke (seconds on a CPU).

    bench: the GPU measurements' sizes; raw_images / decode_images: synthetic images made
    for part 2 / for the decode step; e2e_workers, scale_workers, writer_processes: what
    the rows of part 2 sweep; loader_batch, loader_epochs: batch size and epochs (persistent
    workers, each epoch's first batch left out of the rate) of the scaling loader rows;
    pytest_targets: what ``pytest -m gpu`` collects; pytest_timeout_s: its limit.
    """

    bench: gpu_bench.Sizes
    raw_images: int
    decode_images: int
    e2e_workers: tuple[int, ...]
    scale_workers: tuple[int, ...]
    writer_processes: tuple[int, ...]
    loader_batch: int
    loader_epochs: int
    pytest_targets: tuple[str, ...]
    pytest_timeout_s: float


FULL = Plan(bench=dataclasses.replace(gpu_bench.FULL, steps=30), raw_images=4096, decode_images=512,
            e2e_workers=(4, 8, 16), scale_workers=(1, 2, 4, 8, 16), writer_processes=(2, 4, 8), loader_batch=64,
            loader_epochs=2, pytest_targets=("tests",), pytest_timeout_s=300.0)
SMOKE = Plan(bench=gpu_bench.SMOKE, raw_images=24, decode_images=16, e2e_workers=(1,), scale_workers=(1, 2),
             writer_processes=(2,), loader_batch=4, loader_epochs=1, pytest_targets=("tests/loaders/test_cuda_correctness.py",),
             pytest_timeout_s=120.0)


@dataclasses.dataclass
class Suite:
    """One run's state: where results go, the device, the plan, the scratch directory, the
    deadline (``time.monotonic()``) and what earlier steps left for later ones."""

    out: Path
    part: str
    device: torch.device
    plan: Plan
    scratch: Path
    deadline: float
    smoke: bool
    document: dict[str, Any]
    data: dict[str, Path] = dataclasses.field(default_factory=dict)

    @property
    def json_path(self) -> Path:
        return self.out / f"part{self.part}.json"

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()

    def save(self) -> None:
        write_json(os.fspath(self.json_path), self.document)


# ---------------------------------------------------------------- part 1


def step_env(suite: Suite) -> dict[str, Any]:
    """Where the numbers come from: device, versions, driver, cores, launch mode."""
    device = suite.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    smi = _command_output(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                           "--format=csv,noheader"]) if device.type == "cuda" else None
    from loaders import cpus_available

    return {"device": name, **gpu_bench.versions(device), "nvidia_smi": smi, "cores_available": cpus_available(),
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
    link = gpu_bench.link_info(suite.device)
    rows = gpu_bench.measure_h2d(suite.device, suite.plan.bench, link.get("peak_gb_s"), repeats=20)
    result = {"link": link, "batch": suite.plan.bench.batch, "side": suite.plan.bench.side, "rows": rows}
    if suite.device.type != "cuda":
        result["not_measured"] = {"pinned rows": "pinned host memory needs CUDA",
                                  "of_link_peak": f"no link peak: {link.get('skipped')}"}
    return result


def step_augment(suite: Suite) -> dict[str, Any]:
    step = gpu_bench.train_step_fn(suite.device, suite.plan.bench)
    try:
        return gpu_bench.measure_augment(suite.device, suite.plan.bench, step)
    finally:
        del step
        _free_gpu(suite.device)


def step_decode(suite: Suite) -> dict[str, Any]:
    """Decode rates over raw JPEGs and over the same images pre-resized by ``dataprep shard``."""
    raw = make_raw_images(suite.scratch / "decode-raw", suite.plan.decode_images)
    resized = shard(raw, suite.scratch / "decode-r256", resize_short=256)
    from loaders import cpus_available

    threads = cpus_available()
    sets = {"raw": rgb_jpegs(p.read_bytes() for p in sorted(raw.rglob("*.jpg"))),
            "resized_256": rgb_jpegs(gpu_bench.jpegs_in(resized, suite.plan.decode_images))}
    return {name: gpu_bench.measure_decode(suite.device, jpegs, threads=threads, side=suite.plan.bench.side)
            for name, jpegs in sets.items()}


# ---------------------------------------------------------------- part 2


def step_data(suite: Suite) -> dict[str, Any]:
    """The raw tree and its two shard sets, kept in ``suite.data`` for the later steps."""
    start = time.perf_counter()
    raw = make_raw_images(suite.scratch / "raw", suite.plan.raw_images)
    made_s = time.perf_counter() - start
    suite.data["raw"] = raw
    suite.data["shards"] = shard(raw, suite.scratch / "shards")
    suite.data["shards_256"] = shard(raw, suite.scratch / "shards-r256", resize_short=256)
    sizes = {name: sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) for name, path in suite.data.items()}
    return {"images": sum(1 for p in raw.rglob("*.jpg")), "make_raw_s": made_s, "bytes": sizes}


def step_end_to_end(suite: Suite) -> dict[str, Any]:
    raw, shards, shards_256 = _need(suite, "raw", "shards", "shards_256")
    device, sizes = suite.device, suite.plan.bench
    feeds = [gpu_bench.ours_feed("loaders, shards pre-resized 256", shards_256, sizes, device),
             gpu_bench.ours_feed("loaders, shards as raw", shards, sizes, device),
             gpu_bench.stock_feed("torch, raw files, float32", raw, sizes, device)]
    step = gpu_bench.train_step_fn(device, sizes)
    _, implementation = gpu_bench.stock_dataset(raw, sizes.side)
    partial: dict[str, Any] = {"stock_transforms": implementation, "batch": sizes.batch, "side": sizes.side}

    def save_row(results: dict[str, Any]) -> None:
        suite.document["steps"]["end_to_end"] = {"status": "running", "result": {**partial, **results}}
        suite.save()

    # The scaling steps after this one need about a third of what is left.
    deadline = time.monotonic() + 0.65 * suite.remaining_s()
    try:
        results = gpu_bench.measure_end_to_end(device, sizes, step, feeds, suite.plan.e2e_workers,
                                               deadline=deadline, on_row=save_row)
    finally:
        del step
        _free_gpu(device)
    if device.type != "cuda":
        results["not_measured"] = {"gpu_idle_fraction": "CUDA events need a CUDA device"}
    return {**partial, **results}


def step_scaling_shard(suite: Suite) -> dict[str, Any]:
    """``dataprep shard`` at each thread count, then P writer processes over P parts of the inputs."""
    from loaders import cpus_available

    (raw,) = _need(suite, "raw")
    warm_page_cache(raw)
    cores, rows = cpus_available(), []
    for workers in suite.plan.scale_workers:
        if suite.remaining_s() < 30:
            rows.append({"mode": "threads", "workers": workers, "skipped": gpu_bench.BUDGET_SPENT})
            continue
        rows.append({"mode": "threads", "workers": workers, "processes": 1,
                     **time_shard_commands([raw], suite.scratch / f"scale-threads-{workers}", workers)})
    for processes in suite.plan.writer_processes:
        if suite.remaining_s() < 30:
            rows.append({"mode": "processes", "processes": processes, "skipped": gpu_bench.BUDGET_SPENT})
            continue
        threads = max(1, cores // processes)
        parts = split_tree(raw, suite.scratch / f"split-{processes}", processes)
        rows.append({"mode": "processes", "workers": processes * threads, "processes": processes,
                     "threads_each": threads,
                     **time_shard_commands(parts, suite.scratch / f"scale-procs-{processes}", threads)})
        shutil.rmtree(suite.scratch / f"split-{processes}", ignore_errors=True)
    add_efficiency(rows, key="images_per_s", workers_key="workers")
    return {"images": sum(1 for _ in raw.rglob("*.jpg")), "cores": cores, "rows": rows}


def warm_page_cache(root: Path) -> None:
    """Read every file under ``root`` once: the shard timings are about CPU, not the disk."""
    for path in root.rglob("*"):
        if path.is_file():
            path.read_bytes()


def time_shard_commands(raws: Sequence[Path], scratch: Path, threads: int) -> dict[str, Any]:
    """Run one ``dataprep shard RAW_k OUT_k --workers THREADS --json`` per input tree, all at
    once, each writing its own shards; ``images_per_s`` uses the slowest command's own
    ``elapsed_s`` (interpreter start-up excluded), ``wall_s`` includes it, ``cpu_s`` is the
    children's user + system time (start-up included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    commands = [[sys.executable, "-m", "dataprep.cli", "shard", os.fspath(raw), os.fspath(scratch / f"out-{k}"),
                 "--workers", str(threads), "--json", "--no-progress"] for k, raw in enumerate(raws)]
    children = [subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for command in commands]
    outputs = [child.communicate() for child in children]
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(scratch, ignore_errors=True)
    failures = [f"dataprep shard {raw} (--workers {threads}) exited {child.returncode}: "
                f"{err.decode(errors='replace').strip()[-300:]}"
                for raw, child, (_, err) in zip(raws, children, outputs) if child.returncode != 0]
    if failures:
        raise ToolError("; ".join(failures))
    try:
        summaries = [json.loads(out) for out, _ in outputs]
        kept = sum(int(s["totals"]["samples_kept"]) for s in summaries)
        elapsed_s = max(float(s["elapsed_s"]) for s in summaries)
    except (ValueError, KeyError, TypeError) as err:
        raise ToolError("dataprep shard --json printed no summary with totals.samples_kept and elapsed_s "
                        f"({type(err).__name__}: {err})") from err
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"kept": kept, "elapsed_s": elapsed_s, "wall_s": wall_s, "cpu_s": cpu_s,
            "images_per_s": kept / max(elapsed_s, 1e-9)}


def split_tree(raw: Path, root: Path, count: int) -> list[Path]:
    """``count`` image-folder trees under ``root`` holding every file of ``raw`` once
    (round robin in sorted order, hard links where possible), the class folders kept."""
    files = sorted(p for p in raw.rglob("*") if p.is_file())
    parts = [root / f"part-{k}" for k in range(count)]
    for k, path in enumerate(files):
        target = parts[k % count] / path.relative_to(raw)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
    return parts


def step_scaling_loader(suite: Suite) -> dict[str, Any]:
    """Loader img/s over the shards as raw (decode-bound) at each worker count, threads vs processes."""
    from tools._loader_run import LoaderConfig, run_config

    (shards,) = _need(suite, "shards")
    rows: list[dict[str, Any]] = []
    for worker_type in ("thread", "process"):
        for workers in suite.plan.scale_workers:
            if suite.remaining_s() < 20:
                rows.append({"worker_type": worker_type, "workers": workers,
                             "skipped": gpu_bench.BUDGET_SPENT})
                continue
            config = LoaderConfig(workers, worker_type, suite.plan.loader_batch)
            result = run_config(shards, config, epochs=suite.plan.loader_epochs)
            rows.append({"worker_type": worker_type, "workers": workers, "images_per_s": result.images_per_s,
                         "cpu_s": result.cpu_seconds, "cpu_s_per_1000": result.cpu_s_per_1000,
                         "first_batch_s": result.epochs[0].first_batch_s, "samples": result.samples})
    for worker_type in ("thread", "process"):
        add_efficiency([r for r in rows if r["worker_type"] == worker_type], key="images_per_s", workers_key="workers")
    return {"batch_size": suite.plan.loader_batch, "epochs": suite.plan.loader_epochs, "rows": rows,
            "not_built": "a hybrid of worker processes each running threads needs a loaders option (not in "
                         "this suite's scope): compare the thread and process rows to see whether it would pay"}


def add_efficiency(rows: list[dict[str, Any]], *, key: str, workers_key: str) -> None:
    """Add to each measured row ``speedup`` (rate over the 1-worker row's) and per worker
    ``scaling_efficiency`` (speedup / workers) and ``cpu_efficiency`` (the 1-worker row's CPU
    seconds over this row's: 1 means no CPU spent beyond what one worker spends)."""
    base = next((r for r in rows if r.get(workers_key) == 1 and key in r and r.get("processes", 1) == 1), None)
    if base is None:
        return
    for row in rows:
        if key not in row:
            continue
        row["speedup"] = row[key] / base[key]
        row["scaling_efficiency"] = row["speedup"] / row[workers_key]
        if row.get("cpu_s") and base.get("cpu_s"):
            row["cpu_efficiency"] = base["cpu_s"] / row["cpu_s"]


# ---------------------------------------------------------------- data


def make_raw_images(root: Path, images: int, *, classes: int = 10) -> Path:
    """An image-folder tree of about ``images`` synthetic ImageNet-like photos under
    ``root``: ``dataprep.synthetic`` trees made by up to one child process per core, merged,
    keeping only colour JPEGs with plain names (its PNG, grey, CMYK and odd-name variants
    test cleaning, not speed, and an older Pillow or nvJPEG may refuse some of them)."""
    from loaders import cpus_available

    # Each chunk begins with 12 special variants (PNG, grey, CMYK...): 256 images or more
    # per chunk keeps them under 5 % of an ImageNet-like set.
    chunks = max(1, min(cpus_available(), images // 256))
    per = [images // chunks + (1 if k < images % chunks else 0) for k in range(chunks)]
    code = ("import sys; from dataprep.synthetic import make_image_tree; "
            "make_image_tree(sys.argv[1], images=int(sys.argv[2]), classes=int(sys.argv[3]), seed=int(sys.argv[4]), "
            "broken=False, sidecars=False)")
    children = [subprocess.Popen([sys.executable, "-c", code, os.fspath(root / f"gen-{k}"), str(n),
                                  str(min(classes, n)), str(k)], cwd=REPO_ROOT, stderr=subprocess.PIPE)
                for k, n in enumerate(per)]
    for k, child in enumerate(children):
        _, err = child.communicate()
        if child.returncode != 0:
            raise ToolError(f"making synthetic images (chunk {k}) failed: {err.decode(errors='replace')[-300:]}")
    merged = root / "images"
    for k in range(chunks):
        for path in sorted((root / f"gen-{k}").rglob("*")):
            if path.is_file() and path.suffix == ".jpg" and path.name.isascii() and rgb_jpegs([path.read_bytes()]):
                target = merged / path.parent.name / f"g{k}-{path.name}"
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
        shutil.rmtree(root / f"gen-{k}")
    return merged


def rgb_jpegs(datas: Iterable[bytes]) -> list[bytes]:
    """The colour (3-component) JPEGs of ``datas``: the synthetic tree's grey and CMYK
    variants test cleaning, not decode speed, and nvJPEG may refuse CMYK."""
    kept = []
    for data in datas:
        with Image.open(io.BytesIO(data)) as img:
            if img.format == "JPEG" and img.mode == "RGB":
                kept.append(data)
    return kept


def shard(raw: Path, out: Path, *, resize_short: int | None = None) -> Path:
    """``python -m dataprep.cli shard RAW OUT`` (every core; pre-resized when asked): OUT."""
    command = [sys.executable, "-m", "dataprep.cli", "shard", os.fspath(raw), os.fspath(out), "--shard-size", "64MB",
               "--no-progress"]
    if resize_short is not None:
        command += ["--resize-short", str(resize_short)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ToolError(f"dataprep shard {raw} {out} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return out


def _need(suite: Suite, *names: str) -> list[Path]:
    missing = [n for n in names if n not in suite.data]
    if missing:
        raise ToolError(f"needs the data step's {', '.join(missing)}, which did not complete")
    return [suite.data[n] for n in names]


def _free_gpu(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def _command_output(command: Sequence[str]) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        return f"{command[0]} failed: {err}"


# ---------------------------------------------------------------- running and reporting


STEPS: dict[str, Callable[[Suite], dict[str, Any]]] = {
    "env": step_env, "pytest": step_pytest, "h2d": step_h2d, "augment": step_augment, "decode": step_decode,
    "data": step_data, "end_to_end": step_end_to_end, "scaling_shard": step_scaling_shard,
    "scaling_loader": step_scaling_loader,
}


def run_step(suite: Suite, name: str) -> bool:
    """Run one step, record it (ok, error with traceback, or skipped) and save the document; True if ok."""
    record: dict[str, Any]
    start = time.perf_counter()
    if suite.remaining_s() <= 0 and name != "env":
        record = {"status": "skipped", "reason": gpu_bench.BUDGET_SPENT}
    else:
        try:
            record = {"status": "ok", "result": STEPS[name](suite)}
        # The suite's promise is that one failing step never loses the others: record it.
        except Exception as err:  # noqa: BLE001
            record = {"status": "error", "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
    record["seconds"] = time.perf_counter() - start
    suite.document["steps"][name] = record
    suite.save()
    try:
        text = render_step(name, record)
    except (KeyError, TypeError, ValueError) as err:  # a table of unexpected shape must not stop the suite
        text = f"== {name}: {record['status']} (not rendered: {type(err).__name__}: {err}; see {suite.json_path.name})"
    print(text, flush=True)
    return record["status"] == "ok"


def render_step(name: str, record: dict[str, Any]) -> str:
    """A few lines for the log: the step's table, or why it did not run."""
    head = f"== {name}: {record['status']} in {record['seconds']:.1f} s"
    if record["status"] != "ok":
        return f"{head}: {record.get('error') or record.get('reason')}"
    result = record["result"]
    if name == "h2d":
        return f"{head}\n" + gpu_bench.render_h2d(result["rows"], f"link: {result['link']}")
    if name == "augment":
        return f"{head}\n" + gpu_bench.render_augment(result, "augment")
    if name == "decode":
        return f"{head}\n" + "\n".join(gpu_bench.render_decode(v, k) for k, v in result.items())
    if name == "end_to_end":
        return f"{head}\n" + gpu_bench.render_end_to_end(result, f"end to end ({result['stock_transforms']} stock)")
    if name in ("scaling_shard", "scaling_loader"):
        keys = ["mode", "worker_type", "workers", "processes", "images_per_s", "speedup", "scaling_efficiency",
                "cpu_efficiency"]
        keys = [k for k in keys if any(k in r for r in result["rows"])]
        return f"{head}\n" + format_table(keys, [[r.get(k) for k in keys] for r in result["rows"]])
    if name == "pytest":
        return (f"{head}: exit {result['exit_code']}, {result.get('tests')} tests, {result.get('failures')} failed, "
                f"{result.get('errors')} errors, {result.get('skipped')} skipped; failed: {result.get('failed')}")
    return f"{head}: {result}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m tools.{TOOL}", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--out", type=Path, help="directory for the results (created)")
    action.add_argument("--render", type=Path, metavar="DIR",
                        help="print the tables of the part*.json files in DIR (from an earlier run); runs nothing")
    parser.add_argument("--part", choices=("1", "2", "all"), default="all", help="which part to run (default all)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, on the CPU when there is no GPU")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds for the whole invocation (both parts with --part all); steps whose turn "
                             "comes later are skipped (default 540, inside a 600 s call; smoke 300)")
    parser.add_argument("--steps", default=None, help="comma-separated step names to run (default: all of the part)")
    return parser.parse_args(argv)


def selected_steps(part: str, only: str | None) -> list[str]:
    """The steps of ``part`` in order, limited to ``only`` (comma-separated) when given; env always first."""
    names = list(PARTS[part])
    if only is None:
        return names
    wanted = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in STEPS]
    if unknown:
        raise ToolError(f"--steps: unknown step {', '.join(unknown)} (known: {', '.join(STEPS)})")
    return [n for n in names if n == "env" or n in wanted]


def run_part(out: Path, part: str, device: torch.device, plan: Plan, deadline: float, smoke: bool,
             only: str | None, argv: Sequence[str]) -> bool:
    """Run one part's steps into ``out/part<part>.json``; True when every step ran."""
    names = selected_steps(part, only)
    document = {"version": SUITE_VERSION, "tool": TOOL, "part": part, "argv": list(argv), "machine": machine_info(),
                "steps": {}}
    with tempfile.TemporaryDirectory(prefix=f"device_suite_{part}_") as tmp:
        suite = Suite(out, part, device, plan, Path(tmp), deadline, smoke, document)
        ok = [run_step(suite, name) for name in names]
    return all(ok)


def render_saved(directory: Path) -> str:
    """The tables of every ``part*.json`` in ``directory``, each under its device and versions."""
    paths = sorted(directory.glob("part*.json"))
    if not paths:
        raise ToolError(f"--render {directory}: no part*.json files there (run with --out first)")
    blocks = []
    for path in paths:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            steps = document["steps"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ToolError(f"{path}: not a {TOOL} document ({type(err).__name__}: {err})") from err
        env = steps.get("env", {}).get("result", {})
        head = (f"# {path.name}: {env.get('device', '?')}; torch {env.get('torch')}, CUDA {env.get('cuda')}, "
                f"cuDNN {env.get('cudnn')}, torchvision {env.get('torchvision')}; `{' '.join(document.get('argv', []))}`")
        rendered = []
        for name, record in steps.items():
            if name == "env":
                continue
            try:
                rendered.append(render_step(name, {"seconds": 0.0, **record}))
            except (KeyError, TypeError, ValueError) as err:
                rendered.append(f"== {name}: {record.get('status')} (not rendered: {type(err).__name__}: {err})")
        blocks.append("\n".join([head, *rendered]))
    return "\n\n".join(blocks)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    argv_list = list(sys.argv[1:] if argv is None else argv)
    if args.render is not None:
        try:
            print(render_saved(args.render))
        except ToolError as err:
            print(f"{TOOL}: {err}", file=sys.stderr)
            return 2
        return 0
    try:
        if not args.smoke and not torch.cuda.is_available():
            raise ToolError("needs CUDA (no GPU found); use --smoke for a tiny run on the CPU")
        budget_s = args.budget_s if args.budget_s is not None else (300.0 if args.smoke else 540.0)
        if budget_s <= 0:
            raise ToolError(f"--budget-s must be positive (got {budget_s})")
        parts = ["1", "2"] if args.part == "all" else [args.part]
        for part in parts:
            selected_steps(part, args.steps)  # validate before anything runs
        args.out.mkdir(parents=True, exist_ok=True)
    except (ToolError, OSError) as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    # Timed as a tuned run trains: cuDNN picks its algorithms in the untimed warm-up steps.
    torch.backends.cudnn.benchmark = device.type == "cuda"
    plan = SMOKE if args.smoke else FULL
    deadline = time.monotonic() + budget_s  # one budget for the whole invocation: it must fit one call
    ok = [run_part(args.out, part, device, plan, deadline, args.smoke, args.steps, argv_list) for part in parts]
    print(f"{TOOL}: results in {', '.join(str(args.out / f'part{p}.json') for p in parts)}", flush=True)
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
