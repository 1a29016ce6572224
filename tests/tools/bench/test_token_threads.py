"""tools.bench.token_threads: one small run reports every figure; a corpus too small for the run is a usage error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench.token_threads import main


def test_one_small_run_reports_every_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    argv = ["--docs", "500", "--tokens", "100000", "--seq-len", "32", "--batch-size", "2", "--batches", "3",
            "--rounds", "2", "--dir", str(tmp_path), "--json", str(out)]
    assert main(argv) == 0
    results = json.loads(out.read_text())["results"]
    assert set(results["threads"]) == {"1", "2"} and results["threads"]["1"]["ratio"] == 1.0
    assert all(len(v["rounds"]) == 2 and v["tokens_per_s"] > 0 for v in results["threads"].values())
    assert set(results["loader"]) == {"0 thread", "2 thread", "2 process"}
    assert all(v["tokens_per_s"] > 0 for v in results["loader"].values())
    text = capsys.readouterr().out
    assert "reading threads" in text and "loaders.DataLoader workers" in text
    assert main(["--docs", "10", "--tokens", "400", "--seq-len", "32", "--dir", str(tmp_path)]) == 2
    assert "the run needs" in capsys.readouterr().err
