from __future__ import annotations

import json

from tools.bench.open_bench import main


def test_open_bench_reports_positive_times(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--samples", "5000", "--shards", "7", "--batch-size", "64", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert results["samples"] == 5000
    for name in ("open_dataset_s", "make_loader_s", "first_batch_s", "total_s"):
        assert results[name] > 0
    assert results["total_s"] >= results["first_batch_s"]
    assert "first_batch_s" in capsys.readouterr().out
