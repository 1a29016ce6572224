"""tools.bench.shard_bench: single-core vs ``dataprep shard`` on the same images, the ratio, --record, failure paths."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from dataprep.formats.manifest import read_manifest
from dataprep.synthetic import SyntheticSpec, make_dataset
from tools.bench import shard_bench
from tools.bench.shard_bench import TARGET_RATIO, ShardBenchReport, format_report, measure_shard, record_result
from tools.common.report import ToolError


@pytest.fixture(scope="module")
def report(sharded: tuple[Path, Path]) -> ShardBenchReport:
    return measure_shard(raw=sharded[0], workers=1)


def test_both_runs_cover_the_same_images_and_the_ratio_is_consistent(report: ShardBenchReport,
                                                                     sharded: tuple[Path, Path]) -> None:
    assert ((report.images, report.samples_kept, report.rejected, report.workers, report.generated)
            == (24, 24, 0, 1, False))
    assert report.raw_dir == str(sharded[0])
    # Every raw file belongs to a record (images and their .txt/.json sidecars): input bytes count them all.
    assert report.input_bytes == sum(p.stat().st_size for p in sharded[0].rglob("*") if p.is_file())
    assert (report.single_core_cpu_s > 0 and report.single_core_wall_s > 0 and report.shard_wall_s > 0
            and report.shard_cpu_s > 0)
    assert report.ideal_images_per_s == pytest.approx(report.single_core_images_per_s * 1)
    assert report.ratio == pytest.approx(report.shard_images_per_s / report.ideal_images_per_s)
    assert report.ratio > 0 and report.cpu_efficiency > 0 and report.cores_used > 0  # figures, not bounds
    assert report.meets_target == (report.ratio >= TARGET_RATIO)
    assert report.one_worker_wall_s > 0
    assert (report.write_loop_samples == report.samples_kept and report.write_loop_wall_s > 0
            and report.write_loop_cpu_s > 0)
    # The same samples as `dataprep shard` wrote into the fixture's 3 shards, in one shard: one end-of-archive, not 3.
    shards = read_manifest(sharded[1]).shards
    assert report.write_loop_bytes == sum(s.bytes for s in shards) - 1024 * (len(shards) - 1)
    assert report.writer_bound_cores == pytest.approx(report.write_loop_images_per_s / report.single_core_images_per_s)
    assert report.scaling == pytest.approx(report.shard_images_per_s / report.one_worker_images_per_s)  # workers=1
    assert report.serial_share == pytest.approx(report.one_worker_images_per_s / report.single_core_images_per_s)
    assert report.resident_after_warmup is None or report.resident_after_warmup > 0.99


def test_table_states_the_warm_cache_and_the_verdict(report: ShardBenchReport) -> None:
    text = format_report(report)
    assert "page cache warmed first" in text and "ratio = shard / ideal" in text
    assert "write loop alone" in text and f"keeps up with ~{report.writer_bound_cores:.0f} cores" in text
    assert ("dataprep shard --workers 1 (wall)" in text
            and f"scaling = workers 1 / (workers 1 x 1) = {report.scaling:.0%}" in text)
    assert ("meets" if report.meets_target else "BELOW") in text and f"{TARGET_RATIO:.0%} target" in text


def test_main_generates_raw_data_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert shard_bench.main(["--images", "6", "--workers", "2", "--json", str(out)]) == 0
    assert "dataprep shard --workers 2" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["tool"] == "shard_bench"
    results = doc["results"]
    assert set(results) >= {"images", "input_bytes", "cores", "workers", "single_core_images_per_s",
                            "shard_images_per_s", "shard_input_mb_s", "ideal_images_per_s", "ratio", "target_ratio",
                            "meets_target", "cpu_efficiency", "cores_used", "resident_after_warmup", "notes"}
    assert results["generated"] is True and results["images"] == 6 and results["samples_kept"] == 6
    assert results["target_ratio"] == TARGET_RATIO and results["ratio"] > 0


def test_record_appends_dated_entries_and_says_so(report: ShardBenchReport, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "RESULTS.md"
    when = dt.datetime(2025, 1, 2, 3, 4, tzinfo=dt.UTC)
    record_result(report, results, now=when)
    record_result(report, results, now=when)
    text = results.read_text()
    assert text.count("# Measured results") == 1 and text.count("## 2025-01-02 03:04 UTC: shard_bench") == 2
    assert "cores available" in text and f"{report.ratio:.1%}" in text
    monkeypatch.setattr(shard_bench, "RESULTS_PATH", tmp_path / "fresh.md")
    monkeypatch.setattr(shard_bench, "measure_shard", lambda **kwargs: report)
    assert shard_bench.main(["--record"]) == 0
    assert f"recorded in {tmp_path / 'fresh.md'}" in capsys.readouterr().err
    assert "shard_bench" in (tmp_path / "fresh.md").read_text()


def test_bad_input_fails_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert shard_bench.main(["--raw", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    with pytest.raises(ToolError, match="'images' must be a positive int"):
        measure_shard(images=0)
    with pytest.raises(ToolError, match="'workers' must be a positive int"):
        measure_shard(images=1, workers=0)
    make_dataset(tmp_path / "data", SyntheticSpec(images=1, classes=1, broken=False, tables=True, text=False))
    with pytest.raises(ToolError, match="measures image datasets"):
        measure_shard(raw=tmp_path / "data" / "tables")
