"""Everything issue 13 asks of a GPU machine, in one or two calls, with every result under ``--out``.

    python -m tools.suites.device.device_suite --out "$OUT" --budget-s 400  # part "one": every step below, in one call
    python -m tools.suites.device.device_suite --out "$OUT" --part 1     # tests on CUDA, copies, augment cost, decode
    python -m tools.suites.device.device_suite --out "$OUT" --part 2     # end to end training, scaling to 16 cores
    python -m tools.suites.device.device_suite --out DIR --smoke         # both parts, tiny, on the CPU (CI runs this)
    python -m tools.suites.device.device_suite --render DIR              # the tables of a finished run, from its JSON

Part 1 (about 4 minutes on one H100 with 16 cores):
  env        device name, torch / CUDA / cuDNN / nvImageCodec / torchvision versions, nvidia-smi, cores
  pytest     ``pytest -m gpu`` over the whole suite with CUDA_LAUNCH_BLOCKING=0: junit XML
             (pytest_gpu.xml) and log (pytest_gpu.log) in OUT; counts and failures in the JSON
  h2d        uint8 and float32 [256, 224, 224, 3] host-to-device copies, pinned vs pageable,
             GB/s and % of the PCIe link's theoretical peak (nvidia-smi's max gen x width)
  augment    ``Augment`` per batch as a share of one ResNet-50 step (bf16, channels_last, 256)
  decode     JPEG decode over raw images and over ``--resize-short 256`` shards: the CPU path on
             every core vs the loader's ``decode="device"`` (decode + crop + resize to 224 on the
             device; target >= 5x the CPU crop path) with nvImageCodec's hardware, GPU and hybrid
             backends each alone, each JPEG decoded in its crop's region and whole, with the
             distance from the CPU path's pixels; and ``torchvision.io.decode_jpeg`` batched where
             torchvision imports: the rows the default backend and region decode are picked from
Part 2 (about 6 minutes):
  data       synthetic ImageNet-like raw tree (``dataprep.synthetic``), sharded as is and
             pre-resized (``dataprep shard --resize-short 256``)
  end_to_end ResNet-50 training img/s, host wait and GPU idle (CUDA events) fed by
             ``loaders.DataLoader(device=...)`` (CPU decode) over both shard sets and by the stock
             DataLoader over the raw files (float32 transforms), at 4, 8, 16 workers, vs
             the synthetic ceiling
  end_to_end_decode  issue 28: ResNet-50 and ResNet-18 (bf16, channels_last) fed from the raw-size
             shards by ``decode="device"`` at 4 and 8 workers, by CPU decode in 16 worker processes,
             and by the stock DataLoader + torchvision at 16, each vs its model's synthetic ceiling,
             GPU idle % beside each row (targets: 95% and 90% of the ceilings)
  scaling_shard   ``dataprep shard`` images/s at 1..16 threads, and several writer
             processes over disjoint parts of the inputs; speed-up and CPU efficiency
  scaling_loader  loader img/s at 1..16 workers, threads vs processes (``tools.common.loader_run``,
             runner), with CPU efficiency per worker
  shard_writers   ``dataprep shard`` on its writer processes (issue 27) at 1, 4, 8, 16 workers: the
             photos, JSON lines to Parquet and to tokens (BPE and bytes); speed-up and efficiency

Part "one" (the default) runs env, pytest, h2d, augment, data, end_to_end (16 workers only),
decode, end_to_end_decode, scaling_loader, scaling_shard, shard_writers in that order within one
``--budget-s``: what a short lease needs most comes first.

Each step's result is written to OUT/part<N>.json (the whole document, rewritten after every
step) the moment the step ends, so a late failure or the call's time limit loses nothing
already measured. A step that fails is recorded with its error and the next one runs; one
whose turn comes after ``--budget-s`` (seconds for the whole invocation) is recorded as
skipped. Exit status: 0 when every step ran, 1 when any failed or was skipped, 2 for bad
arguments; failing tests do not change it (the pytest step's ``passed_all`` says).

Modules: the run's state and sizes ``run_state``; the steps ``check_steps`` (env, pytest),
``gpu_steps`` (h2d, augment, decode, end_to_end, end_to_end_decode) and ``scaling_steps`` (data, scaling_shard,
scaling_loader), all in ``tools.suites.device``; the synthetic data is ``tools.common.synthetic``;
the GPU measurements and their tables are ``tools.gpu``'s (``h2d``, ``render``...).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from tools.common.report import ToolError, format_table, int_list, machine_info
from tools.gpu.end_to_end import BUDGET_SPENT
from tools.gpu.render import render_augment, render_decode, render_end_to_end, render_h2d
from tools.gpu.train_step import FULL as BENCH_FULL
from tools.gpu.train_step import SMOKE as BENCH_SMOKE
from tools.suites.device.check_steps import step_env, step_pytest
from tools.suites.device.gpu_steps import (
    step_augment,
    step_decode,
    step_end_to_end,
    step_end_to_end_decode,
    step_h2d,
)
from tools.suites.device.run_state import Plan, Suite
from tools.suites.device.scaling_steps import step_data, step_scaling_loader, step_scaling_shard, step_shard_writers

TOOL = "device_suite"
SUITE_VERSION = 1
PARTS = {"1": ("env", "pytest", "h2d", "augment", "decode"),
         "2": ("env", "data", "end_to_end", "end_to_end_decode", "scaling_shard", "scaling_loader", "shard_writers"),
         # One call of the lease (issue 23): correctness first, then the figures in order of need.
         "one": ("env", "pytest", "h2d", "augment", "data", "end_to_end", "decode", "end_to_end_decode",
                 "scaling_loader", "scaling_shard", "shard_writers")}
# The files that hold the gpu-marked tests and the CUDA correctness tests (collecting the whole
# tree on the device costs time and trips on test extras that are not installed there).
GPU_TEST_FILES = ("tests/loaders/loader/test_cuda_correctness.py", "tests/loaders/loader/test_collate.py",
                  "tests/loaders/loader/test_buffers.py", "tests/loaders/loader/test_prefetch.py",
                  "tests/loaders/augment/test_augment_pipeline.py", "tests/loaders/tokens/test_loader_source.py",
                  "tests/tools/gpu/test_gpu_bench.py", "tests/loaders/batch_decode/test_device_decode_cuda.py")
FULL = Plan(bench=dataclasses.replace(BENCH_FULL, steps=30), raw_images=4096, decode_images=512,
            e2e_workers=(4, 8, 16), device_decode_workers=(4, 8), cpu_decode_workers=(16,),
            scale_workers=(1, 2, 4, 8, 16), writer_processes=(2, 4, 8), writer_workers=(1, 4, 8, 16),
            writer_rows=200_000, loader_batch=64, loader_epochs=2, pytest_targets=GPU_TEST_FILES,
            pytest_timeout_s=150.0)
# Part "one": end to end at 16 workers only, so that the scaling rows still fit the call.
FULL_ONE = dataclasses.replace(FULL, e2e_workers=(16,), scale_workers=(1, 4, 16))
SMOKE = Plan(bench=BENCH_SMOKE, raw_images=24, decode_images=16, e2e_workers=(1,), device_decode_workers=(1,),
             cpu_decode_workers=(1,), scale_workers=(1, 2), writer_processes=(2,), writer_workers=(1, 2),
             writer_rows=2000, loader_batch=4, loader_epochs=1,
             pytest_targets=("tests/loaders/loader/test_cuda_correctness.py",), pytest_timeout_s=120.0)


STEPS: dict[str, Callable[[Suite], dict[str, Any]]] = {
    "env": step_env, "pytest": step_pytest, "h2d": step_h2d, "augment": step_augment, "decode": step_decode,
    "data": step_data, "end_to_end": step_end_to_end, "end_to_end_decode": step_end_to_end_decode,
    "scaling_shard": step_scaling_shard, "scaling_loader": step_scaling_loader, "shard_writers": step_shard_writers,
}


def run_step(suite: Suite, name: str) -> bool:
    """Run one step, record it (ok, error with traceback, or skipped) and save the document; True if ok."""
    record: dict[str, Any]
    start = time.perf_counter()
    if suite.remaining_s() <= 0 and name != "env":
        record = {"status": "skipped", "reason": BUDGET_SPENT}
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
        return f"{head}\n" + render_h2d(result["rows"], f"link: {result['link']}")
    if name == "augment":
        return f"{head}\n" + render_augment(result, "augment")
    if name == "decode":
        return f"{head}\n" + "\n".join(render_decode(v, k) for k, v in result.items())
    if name == "end_to_end":
        return f"{head}\n" + render_end_to_end(result, f"end to end ({result['stock_transforms']} stock)")
    if name == "end_to_end_decode":
        return f"{head}\n" + "\n".join(
            render_end_to_end(rows, f"{model} from raw-size shards, target {result['targets'][model]:.0%} of the "
                                    f"ceiling with decode=device ({result['stock_transforms']} stock)")
            for model, rows in result["models"].items())
    if name in ("scaling_shard", "scaling_loader", "shard_writers"):
        keys = ["case", "mode", "worker_type", "workers", "processes", "split", "images_per_s", "inputs_per_s",
                "speedup", "scaling_efficiency", "cpu_efficiency"]
        keys = [k for k in keys if any(k in r for r in result["rows"])]
        return f"{head}\n" + format_table(keys, [[r.get(k) for k in keys] for r in result["rows"]])
    if name == "pytest":
        return (f"{head}: exit {result['exit_code']}, {result.get('tests')} tests, {result.get('failures')} failed, "
                f"{result.get('errors')} errors, {result.get('skipped')} skipped; failed: {result.get('failed')}")
    return f"{head}: {result}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.suites.device.device_suite",
                                     description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--out", type=Path, help="directory for the results (created)")
    action.add_argument("--render", type=Path, metavar="DIR",
                        help="print the tables of the part*.json files in DIR (from an earlier run); runs nothing")
    parser.add_argument("--part", choices=("one", "1", "2", "all"), default="one",
                        help="which part to run: one (default: every step in one call, in order of need), "
                             "1, 2, or all (1 then 2)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, on the CPU when there is no GPU")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds for the whole invocation (both parts with --part all); steps whose turn "
                             "comes later are skipped (default 540, inside a 600 s call; smoke 300)")
    parser.add_argument("--steps", default=None, help="comma-separated step names to run (default: all of the part)")
    parser.add_argument("--e2e-workers", default=None, metavar="N,N",
                        help="worker counts of the end_to_end rows (default: the plan's; 16 in part one)")
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
        suite = Suite(out=out, part=part, device=device, plan=plan, scratch=Path(tmp), deadline=deadline, smoke=smoke,
                      document=document)
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
                f"cuDNN {env.get('cudnn')}, nvImageCodec {env.get('nvimgcodec')}, "
                f"torchvision {env.get('torchvision')}; "
                f"`{' '.join(document.get('argv', []))}`")
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
        e2e_workers = (None if args.e2e_workers is None
                       else tuple(int_list("--e2e-workers", args.e2e_workers, minimum=1)))
        args.out.mkdir(parents=True, exist_ok=True)
    except (ToolError, OSError) as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    # Timed as a tuned run trains: cuDNN picks its algorithms in the untimed warm-up steps.
    torch.backends.cudnn.benchmark = device.type == "cuda"
    plan = SMOKE if args.smoke else (FULL_ONE if args.part == "one" else FULL)
    if e2e_workers is not None:
        plan = dataclasses.replace(plan, e2e_workers=e2e_workers)
    deadline = time.monotonic() + budget_s  # one budget for the whole invocation: it must fit one call
    ok = [run_part(args.out, part, device, plan, deadline, args.smoke, args.steps, argv_list) for part in parts]
    print(f"{TOOL}: results in {', '.join(str(args.out / f'part{p}.json') for p in parts)}", flush=True)
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
