"""tools.bench.autotune_bench: a smoke run reports default, tuned and the sweep side by side; bad workloads are
usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench.autotune_bench import SWEEP, main


def test_a_smoke_run_reports_every_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert main(["--smoke", "--workloads", "slow_step", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    summary = results["workloads"]["slow_step"]
    labels = {"default", "tuned", *(f"fixed {count} {kind}" for kind, count in SWEEP["slow_step"])}
    assert labels <= set(summary)
    for label in labels:
        run = summary[label]
        assert run["samples_per_s"] > 0 and 0 <= run["wait_share"] <= 1 and run["cpu_s_per_1k"] >= 0
        assert run["peak_rss_mib"] > 0
    assert summary["best_fixed"] in labels and summary["tuned_vs_best"] > 0
    assert 0 < results["accounting_overhead_s"]
    text = capsys.readouterr().out
    assert "slow_step (step 50 ms)" in text and "accounting:" in text


def test_an_unknown_workload_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--smoke", "--workloads", "waiting,nope"]) == 2
    assert "--workloads" in capsys.readouterr().err
