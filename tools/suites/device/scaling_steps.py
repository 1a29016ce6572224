"""device_suite's CPU-side steps: the data (a raw tree and its shards), then ``dataprep shard`` and loader scaling
over the cores, and ``dataprep shard`` on its writer processes (issue 27) for every kind of input."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loaders import cpus_available
from tools.common.loader_run import LoaderConfig, run_config
from tools.common.pagecache import files_under, warm_page_cache
from tools.common.report import ToolError
from tools.bench.writers_runs import make_bpe, make_rows
from tools.bench.writers_runs import time_shard as time_one_shard
from tools.common.synthetic import REPO_ROOT, make_raw_images, shard
from tools.gpu.end_to_end import BUDGET_SPENT
from tools.suites.device.run_state import Suite, need


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


def step_scaling_shard(suite: Suite) -> dict[str, Any]:
    """``dataprep shard`` at each thread count, then P writer processes over P parts of the inputs."""
    (raw,) = need(suite, "raw")
    warm_page_cache(files_under(raw))  # the shard timings are about CPU, not the disk
    cores, rows = cpus_available(), []
    for workers in suite.plan.scale_workers:
        if suite.remaining_s() < 30:
            rows.append({"mode": "threads", "workers": workers, "skipped": BUDGET_SPENT})
            continue
        rows.append({"mode": "threads", "workers": workers, "processes": 1,
                     **time_shard_commands([raw], suite.scratch / f"scale-threads-{workers}", workers)})
    for processes in suite.plan.writer_processes:
        if suite.remaining_s() < 30:
            rows.append({"mode": "processes", "processes": processes, "skipped": BUDGET_SPENT})
            continue
        threads = max(1, cores // processes)
        parts = split_tree(raw, suite.scratch / f"split-{processes}", processes)
        rows.append({"mode": "processes", "workers": processes * threads, "processes": processes,
                     "threads_each": threads,
                     **time_shard_commands(parts, suite.scratch / f"scale-procs-{processes}", threads)})
        shutil.rmtree(suite.scratch / f"split-{processes}", ignore_errors=True)
    add_efficiency(rows, key="images_per_s", workers_key="workers")
    return {"images": sum(1 for _ in raw.rglob("*.jpg")), "cores": cores, "rows": rows}


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


def step_shard_writers(suite: Suite) -> dict[str, Any]:
    """``dataprep shard --workers W`` (its writer processes) for W in ``plan.writer_workers``: the data step's
    photos to tar shards, ``plan.writer_rows`` JSON lines to Parquet and to tokens (a BPE trained on them,
    and ``bytes``); inputs/s, speed-up and efficiency against the same case on one core."""
    (raw,) = need(suite, "raw")
    rows_path = make_rows(suite.scratch / "writers" / "rows.jsonl", suite.plan.writer_rows)
    tokenizer = make_bpe(rows_path, suite.scratch / "writers" / "tokenizer.json")
    cases: dict[str, tuple[Path, list[str]]] = {
        "images": (raw, []), "table": (rows_path, []),
        "tokens-bpe": (rows_path, ["--tokenizer", os.fspath(tokenizer)]),
        "tokens-bytes": (rows_path, ["--tokenizer", "bytes"])}
    rows: list[dict[str, Any]] = []
    for case, (path, options) in cases.items():
        warm_page_cache(files_under(path) if path.is_dir() else [path])
        measured: list[dict[str, Any]] = []
        for workers in suite.plan.writer_workers:
            if suite.remaining_s() < 30:
                rows.append({"case": case, "workers": workers, "skipped": BUDGET_SPENT})
                continue
            timed = time_one_shard(path, suite.scratch / f"writers-{case}-{workers}", workers, options)
            measured.append({"case": case, "workers": workers, "inputs_per_s": timed.rate, "cpu_s": timed.cpu_s,
                             "elapsed_s": timed.seconds, "split": timed.split, "others_cores": timed.others_cores})
        add_efficiency(measured, key="inputs_per_s", workers_key="workers")
        rows += measured
    return {"cores": cpus_available(), "json_lines": suite.plan.writer_rows, "rows": rows}


def step_scaling_loader(suite: Suite) -> dict[str, Any]:
    """Loader img/s over the shards as raw (decode-bound) at each worker count, threads vs processes."""
    (shards,) = need(suite, "shards")
    rows: list[dict[str, Any]] = []
    for worker_type in ("thread", "process"):
        for workers in suite.plan.scale_workers:
            if suite.remaining_s() < 20:
                rows.append({"worker_type": worker_type, "workers": workers, "skipped": BUDGET_SPENT})
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
