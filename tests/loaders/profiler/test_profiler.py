"""shardfeed-profile on small training scripts: the report's fields, the bottleneck, the PNG, how the run ended.

Each run is the command itself (``python -m loaders.profiler``, what the ``shardfeed-profile`` script calls)
in a subprocess, over a real loader and tiny data. The scripts' ratios are large (a 50 ms step against
an instant dataset; a dataset that sleeps 25 ms a sample against no step), so the verdicts cannot flip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from loaders import DataLoader
from loaders.loader.advice import WAIT_TARGET
from loaders.profiler.report import REPORT_VERSION, RunInfo, build_report, intervals, summary_lines
from loaders.profiler.sampler import LoaderTrace, Sample, StatsSampler
from loaders.profiler.timeline import NO_MATPLOTLIB, write_timeline
from loaders.profiler.whatif import Costs, what_ifs, workers_needed

ROOT = Path(__file__).resolve().parents[3]

STEP_BOUND = """
import sys, time
import torch
from torch.utils.data import Dataset
from loaders import DataLoader

class Instant(Dataset):
    def __len__(self):
        return 120
    def __getitem__(self, i):
        return torch.full((4,), i)

if __name__ == "__main__":
    loader = DataLoader(Instant(), batch_size=4, num_workers=1, worker_type="thread")
    for batch in loader:
        time.sleep(0.05)  # the training step
    print("args", sys.argv[1:])
    sys.exit(3)
"""

DATA_BOUND = """
import time
import torch
from torch.utils.data import DataLoader, Dataset  # torch's: --swap-torch makes it ours

class Sleepy(Dataset):
    def __len__(self):
        return 48
    def __getitem__(self, i):
        time.sleep(0.025)  # a read that waits
        return torch.full((4,), i)

if __name__ == "__main__":
    loader = DataLoader(Sleepy(), batch_size=4, num_workers=1)  # alive at the end: its last sample is taken
    for batch in loader:
        pass
"""

def _profile(tmp_path: Path, script: str, *options: str,
             args: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    out = tmp_path / "profile"
    run = subprocess.run([sys.executable, "-m", "loaders.profiler", "--out", str(out), "--interval", "0.2", *options,
                          str(path), *args], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    report = json.loads((out / "report.json").read_text())
    return run, report, out


def _check_timeline(report: dict[str, Any], out: Path) -> None:
    if importlib.util.find_spec("matplotlib") is not None:
        assert report["timeline_png"] == str(out / "timeline.png")
        assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert report["timeline_png"] is None and report["timeline_note"] == NO_MATPLOTLIB


def test_a_script_that_sleeps_in_its_step_is_step_bound(tmp_path: Path) -> None:
    run, report, out = _profile(tmp_path, STEP_BOUND, args=("--epochs", "1"))
    assert run.returncode == 3, run.stderr  # the script's own exit status
    assert "args ['--epochs', '1']" in run.stdout  # its own arguments, its own stdout
    assert report["version"] == REPORT_VERSION
    assert report["run"]["exit_code"] == 3 and report["run"]["argv"] == ["--epochs", "1"]
    assert report["run"]["error"] is None and report["run"]["swap_torch"] is False
    [loader] = report["loaders"]
    summary = loader["summary"]
    assert loader["dataset"] == "Instant" and loader["batch_size"] == 4 and loader["alive_at_end"]
    assert summary["steps"] == 30 and summary["bottleneck"] == "step"
    assert summary["wait_fraction"] < 0.5 and summary["step_s"] >= 0.04
    assert summary["workers"] == 1 and summary["worker_type"] == "thread"
    assert {"dataset", "collate"} <= set(summary["stages"])
    times = [point["t_s"] for point in loader["timeline"]]
    assert times == sorted(times) and loader["timeline"][-1]["steps"] == 30
    assert [w["change"].split(" ")[0] for w in loader["what_if"]] == ["more", "pre-resized", "decode"]
    assert report["overall"]["bottleneck"] == "step" and report["overall"]["main_loader"] == "loader0"
    assert "bottleneck: step" in run.stderr and f"report: {out / 'report.json'}" in run.stderr
    _check_timeline(report, out)


def test_a_script_whose_dataset_sleeps_is_data_bound_with_torch_swapped(tmp_path: Path) -> None:
    run, report, out = _profile(tmp_path, DATA_BOUND, "--swap-torch")
    assert run.returncode == 0, run.stderr
    assert report["run"]["swap_torch"] is True
    [loader] = report["loaders"]
    summary = loader["summary"]
    assert loader["dataset"] == "Sleepy" and summary["steps"] == 12
    assert summary["bottleneck"] == "dataset" and summary["wait_fraction"] > 0.5
    assert summary["stages"]["dataset"] >= 4 * 0.02  # four samples of 25 ms a batch
    more = loader["what_if"][0]
    assert more["change"].startswith("num_workers 1 -> ") and more["samples_per_s"] > summary["samples_per_s"]
    assert any("wait" in line for line in loader["advice"])
    _check_timeline(report, out)


def test_a_failing_script_still_gets_its_report_and_without_the_swap_no_loader(tmp_path: Path) -> None:
    failing = DATA_BOUND.replace("return 48", "return 8") + '    raise ValueError("boom after the loop")\n'
    run, report, _ = _profile(tmp_path, failing)
    assert run.returncode == 1
    assert "ValueError: boom after the loop" in run.stderr and "Traceback" in run.stderr
    assert report["run"]["exit_code"] == 1 and report["run"]["error"] == "ValueError: boom after the loop"
    assert report["loaders"] == [] and "pass --swap-torch" in run.stderr  # torch's own loader is not ours


# ---------------------------------------------------------------- the pure parts: what-ifs, report, timeline


def _costs(**changes: Any) -> Costs:
    base: dict[str, Any] = dict(wait_s=0.0, step_s=0.016, build_s=0.004 * 32, decode_s=0.0, cpu_share=0.05,
                                workers=2, worker_type="process", cpus=2, decode_mode="cpu", samples_per_s=500.0)
    return Costs(**{**base, **changes})


def test_waiting_reads_need_threads_beyond_the_cpus_and_cpu_bound_work_stops_at_them() -> None:
    waiting = _costs(wait_s=0.048)  # the loop waits 75%: the data's period is 64 ms a batch
    needed = workers_needed(waiting)
    assert needed == 8  # 64 ms of data a batch over 8 workers: 8 ms, under the 16 ms step
    more = what_ifs(waiting)[0]
    assert more.how == "DataLoader(num_workers=8, worker_type='thread')"
    assert more.wait_fraction is not None and more.wait_fraction <= WAIT_TARGET
    assert more.samples_per_s == pytest.approx(500.0 * 64 / 16)  # the loop at the step's pace
    cpu_bound = _costs(wait_s=0.048, cpu_share=1.0)
    assert workers_needed(cpu_bound) is None
    assert what_ifs(cpu_bound)[0].wait_fraction is None  # two workers already fill the two CPUs


def test_a_step_bound_loop_is_told_how_few_workers_keep_up() -> None:
    relaxed = _costs(build_s=0.002, workers=8, cpus=16)
    fewer = what_ifs(relaxed)[0]
    assert fewer.change == "num_workers 8 -> 1" and fewer.wait_fraction is not None
    assert fewer.wait_fraction <= WAIT_TARGET


def test_decode_what_ifs_need_a_decode_time() -> None:
    _, resized, device = what_ifs(_costs(wait_s=0.05))
    assert resized.wait_fraction is None and "no decode time" in resized.note
    _, resized, device = what_ifs(_costs(wait_s=0.05, decode_s=0.1))
    assert resized.wait_fraction is not None and device.wait_fraction is not None
    assert device.wait_fraction <= resized.wait_fraction < 0.05 / 0.066  # both below the measured 76%
    assert what_ifs(_costs(wait_s=0.05, decode_s=0.1, decode_mode="device"))[2].wait_fraction is None


def _sample(t_s: float, steps: int, bottleneck: str, wait_s: float, step_s: float = 0.01,
            window_steps: int | None = None) -> Sample:
    return Sample(t_s=t_s, steps=steps, window_steps=min(steps, 64) if window_steps is None else window_steps,
                  wait_fraction=wait_s / (wait_s + step_s), wait_s=wait_s, step_s=step_s, samples_per_s=100.0,
                  workers=2, prefetch=2, queued=0, bottleneck=bottleneck, stages={"dataset": 0.02, "collate": 0.001})


def _report(*samples: Sample, latest: dict[str, Any] | None = None) -> dict[str, Any]:
    trace = LoaderTrace(0, "D", 8, 0.0, samples=list(samples), latest=latest or {"worker_type": "thread"})
    run = RunInfo(target="t.py", argv=(), swap_torch=False, interval_s=1.0, started="now", duration_s=2.0,
                  exit_code=0)
    return build_report([trace], run, cpus=2)


def test_the_report_weights_each_interval_by_its_batches() -> None:
    tuning = [{"step": 50, "knob": "num_workers", "old": 2, "new": 4, "why": "waits"}]
    report = _report(_sample(1.0, 10, "dataset", 0.03), _sample(2.0, 100, "step", 0.0),
                     latest={"worker_type": "thread", "tuning": tuning, "advice": ["a"]})
    summary = report["loaders"][0]["summary"]
    assert summary["bottleneck"] == "step" and summary["steps"] == 100  # 90 of 100 batches were step-bound
    assert summary["wait_s"] == pytest.approx(0.003)  # 10 batches at 30 ms, 90 at none
    assert report["loaders"][0]["tuning"][0]["t_s"] == 2.0  # step 50 was reached by the second sample
    assert json.loads(json.dumps(report)) == report
    assert any("tuning: step 50: num_workers 2 -> 4" in line for line in summary_lines(report))


def test_a_sample_taken_before_the_window_holds_a_step_does_not_lower_the_rate() -> None:
    empty = replace(_sample(0.5, 1, "step", 0.0, window_steps=0), samples_per_s=0.0)  # only the pass's first batch
    report = _report(empty, _sample(1.0, 10, "dataset", 0.03), _sample(2.0, 20, "dataset", 0.03))
    assert report["loaders"][0]["summary"]["samples_per_s"] == pytest.approx(100.0)


def test_a_slow_batch_counts_in_its_interval_not_for_its_whole_window() -> None:
    # The loader's window (all 5 batches, none dropped yet) still holds the 1.6 s wait of the first interval
    # and says "dataset" throughout; the difference of its totals puts that wait in the first interval only.
    first, later = _sample(1.0, 1, "dataset", 1.6, 0.0), _sample(5.0, 5, "dataset", 1.6 / 5, 0.75)
    spans = intervals([first, later])
    assert [span.bottleneck for span in spans] == ["dataset", "step"]
    assert spans[1].wait_s == pytest.approx(0.0) and spans[1].step_s == pytest.approx(3.75)
    report = _report(first, later)
    summary, timeline = report["loaders"][0]["summary"], report["loaders"][0]["timeline"]
    assert summary["bottleneck"] == "step" and summary["wait_fraction"] == pytest.approx(1.6 / (1.6 + 3.75))
    assert [point["wait_fraction"] for point in timeline] == pytest.approx([1.0, 0.0])
    assert timeline[1]["window_wait_fraction"] == pytest.approx(0.32 / 1.07)


def test_without_matplotlib_the_timeline_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # what an environment without the plot extra has
    report = {"loaders": [{"timeline": [1]}], "run": {"target": "t.py"}}
    assert write_timeline(report, tmp_path / "t.png") == (None, NO_MATPLOTLIB)
    assert not (tmp_path / "t.png").exists()


class Waiting(Dataset[torch.Tensor]):
    """Items that wait 1 ms each (a read)."""

    def __len__(self) -> int:
        return 240

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.001)
        return torch.tensor(index)


def test_the_sampler_reads_a_running_loader_without_a_failure() -> None:
    """stats() is read on the sampler's thread while the loop runs (thread switches forced often): one read a
    sample, none failing (stats() is a consistent snapshot from any thread, nothing to retry)."""
    loader: DataLoader[torch.Tensor] = DataLoader(Waiting(), batch_size=2, num_workers=2, worker_type="thread",
                                                  autotune=True)
    sampler = StatsSampler(0.0005, loaders=lambda: [(0, loader)])
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        sampler.start()
        assert sum(len(batch) for batch in loader) == 240
    finally:
        sampler.stop()
        sys.setswitchinterval(interval)
    trace = sampler.traces[0]
    assert sampler.failed_samples == 0 and len(trace.samples) >= 2 and trace.alive_at_end
    assert trace.samples[-1].steps == len(loader)
