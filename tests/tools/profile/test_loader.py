"""tools.profile.loader: configurations on real shards, stage costs, the bottleneck verdict, allocators, failure
paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tools.common.allocators import AllocatorNotFound, find_library
from tools.common.loader_run import ConfigResult, EpochResult, LoaderConfig, batch_length, run_config, run_in_child
from tools.common.proctree import TreeSampler, cpu_seconds_of, descendants, pss_of, rss_of
from tools.common.report import ToolError
from tools.profile import loader
from tools.profile.loader import LoaderReport, expand_configs, profile_loader
from tools.profile.loader_stages import COLLATE, DECODE, READ, TRANSFORM, StageCost

CONFIGS = [LoaderConfig(0, batch_size=8), LoaderConfig(1, "thread", 8), LoaderConfig(1, "process", 8),
           LoaderConfig(1, "process", 8, stock=True)]


@pytest.fixture(scope="module")
def report(sharded: tuple[Path, Path]) -> LoaderReport:
    return profile_loader(sharded[1], CONFIGS, sample_images=8)


def test_every_configuration_loads_every_sample(report: LoaderReport) -> None:
    assert [r.config for r in report.results] == CONFIGS
    for result in report.results:
        (epoch,) = result.epochs
        assert (epoch.samples, epoch.batches, epoch.first_batch_samples) == (24, 3, 8)
        assert 0 < epoch.first_batch_s <= epoch.seconds
        assert epoch.gap_p50_s is not None and epoch.gap_p99_s is not None and 0 < epoch.gap_p50_s <= epoch.gap_p99_s
        assert result.images_per_s > 0 and result.epoch_images_per_s > 0 and result.cpu_s_per_1000 > 0
        assert result.peak_rss_bytes is not None and result.peak_pss_bytes is not None
        assert 0 < result.peak_pss_bytes <= result.peak_rss_bytes
        assert result.allocator_loaded in ("system", "jemalloc", "tcmalloc")
    main, thread, process, _ = report.results
    # A worker process adds its own resident memory to the tree; a thread does not.
    assert process.peak_rss_bytes > thread.peak_rss_bytes and process.peak_rss_bytes > main.peak_rss_bytes


def test_stages_ceiling_and_recommendation_agree(report: LoaderReport) -> None:
    assert [s.stage for s in report.stages][:4] == [READ, DECODE, TRANSFORM, COLLATE]
    assert all(s.seconds_per_sample >= 0 for s in report.stages) and report.stage_samples == 8
    assert {s.basis for s in report.stages if s.stage == READ} == {"wall"}
    assert report.ceiling_images_per_s == pytest.approx(report.cores / report.seconds_per_sample)
    assert report.bottleneck == max(report.stages[:4], key=lambda s: s.seconds_per_sample).stage
    # The synthetic photos are ~500x375: pre-resizing them to a short side of 256 makes the crop cheaper.
    assert report.pre_resized_images > 0 and report.pre_resize_factor > 1.1
    assert report.best() is not None and report.best(stock=True) is report.results[3]
    expected = {READ: "I/O-bound", DECODE: "decode-bound", TRANSFORM: "decode-bound", COLLATE: "collate-bound"}
    assert report.recommendation().startswith(expected[report.bottleneck])


def test_json_has_the_documented_fields(sharded: tuple[Path, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "loader.json"
    argv = [str(sharded[1]), "--workers", "0,1", "--worker-types", "thread", "--batch-sizes", "12",
            "--sample-images", "4", "--json", str(out)]
    assert loader.main(argv) == 0
    printed = capsys.readouterr().out
    assert "recommendation:" in printed and "loaders thread x1 b12" in printed
    doc = json.loads(out.read_text())
    assert doc["tool"] == "loader"
    results = doc["results"]
    assert set(results) >= {"stages", "configs", "ceiling_images_per_s", "bottleneck", "recommendation", "pre_resize",
                            "best", "epochs", "notes", "device", "cores"}
    assert [c["label"] for c in results["configs"]] == ["loaders main b12", "loaders thread x1 b12"]
    config = results["configs"][1]
    assert set(config) >= {"images_per_s", "first_batch_s", "gap_p50_s", "gap_p99_s", "cpu_s_per_1000_samples",
                           "peak_rss_bytes", "peak_pss_bytes", "epochs", "allocator_loaded"}
    assert config["epochs"][0]["samples"] == 24 and config["epochs"][0]["batches"] == 2


def test_batches_caps_each_epoch(sharded: tuple[Path, Path]) -> None:
    result = run_config(sharded[1], LoaderConfig(1, "thread", 4), batches=2, epochs=2)
    assert [(e.samples, e.batches) for e in result.epochs] == [(8, 2), (8, 2)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD allocators are Linux-only")
def test_allocator_comparison_runs_each_allocator_in_a_child(sharded: tuple[Path, Path]) -> None:
    try:
        find_library("jemalloc")
    except AllocatorNotFound:
        pytest.skip("libjemalloc2 is not installed")
    report = profile_loader(sharded[1], [LoaderConfig(1, "process", 8)], allocators=["system", "jemalloc"],
                            epochs=2, sample_images=4)
    assert ([(r.config.allocator, r.allocator_loaded) for r in report.results]
            == [("system", "system"), ("jemalloc", "jemalloc")])
    for result in report.results:
        assert len(result.epochs) == 2 and all(e.samples == 24 and (e.peak_rss_bytes or 0) > 0 for e in result.epochs)
    assert "[jemalloc]" in report.results[1].config.label and "peak RSS per epoch" in loader.format_report(report)


def test_recommendation_names_the_bottleneck_and_the_remedy() -> None:
    epoch = EpochResult(256, 4, 1.0, 0.25, 64, 0.25, 0.25, 2**28, 2**27)
    best = ConfigResult(LoaderConfig(2, "process", 64), (epoch,), 1.0, "system")
    stages = (StageCost(READ, 0.001, "wall"), StageCost(DECODE, 0.004, "cpu"), StageCost(TRANSFORM, 0.001, "cpu"),
              StageCost(COLLATE, 0.0001, "cpu"))
    decode_bound = LoaderReport("d", 256, 2, "ext4 on /dev/x", stages, 8, 100e3, 2.5, 8, (best,), 1)
    text = decode_bound.recommendation()
    # 256 img/s against 2 cores / 6.1 ms per sample = 328 img/s.
    assert text.startswith("decode-bound: 2 process workers give 78% of the 2-core ceiling (256 of 328 img/s)")
    assert "The loader is below its ceiling: try" not in text  # it already runs a worker per core
    assert "--resize-short 256` for ~2.5x more" in text
    small = LoaderReport("d", 256, 2, "ext4", stages, 8, 100e3, 1.0, 0, (best,), 1)
    assert "already small" in small.recommendation()
    # ceiling 2 / 7.5 ms = 267 img/s
    full = (StageCost(READ, 0.001, "wall"), StageCost(DECODE, 0.0054, "cpu"), *stages[2:])
    assert ("give the whole 2-core ceiling (256 of 267 img/s)"
            in LoaderReport("d", 256, 2, "x", full, 8, 1e5, 1.0, 0, (best,), 1).recommendation())
    one = ConfigResult(LoaderConfig(1, "thread", 64), (epoch,), 1.0, "system")
    slow = LoaderReport("d", 256, 4, "x", stages, 8, 100e3, 1.0, 0, (one,), 1).recommendation()
    assert slow.startswith("decode-bound: 1 thread worker gives 39% of the 4-core ceiling")
    assert slow.endswith("try 4 workers")
    collate = (*stages[:3], StageCost(COLLATE, 0.01, "cpu"))
    collate_bound = LoaderReport("d", 256, 2, "x", collate, 8, 1e5, 1.0, 0, (best,), 1).recommendation()
    assert collate_bound.startswith("collate-bound")
    slow_disk = (StageCost(READ, 0.05, "wall"), *stages[1:])
    io_bound = LoaderReport("d", 256, 2, "ext4 on /dev/x", slow_disk, 8, 1e6, 2.5, 8, (best,), 1,
                            disk_sequential_mib_s=100.0)
    assert io_bound.bottleneck == READ
    assert io_bound.recommendation().startswith("I/O-bound at 256.0 MB/s on ext4 on /dev/x of 105 MB/s sequential")


def test_expand_configs_runs_zero_workers_once_and_adds_stock() -> None:
    configs = expand_configs([0, 2], ["thread", "process"], [16], [1, 2], stock=True)
    labels = [c.label for c in configs]
    assert labels == ["loaders main b16", "torch main b16", "loaders thread x2 b16", "loaders thread x2 b16 t2",
                      "loaders process x2 b16", "loaders process x2 b16 t2", "torch process x2 b16"]


def test_batch_length_finds_the_first_tensor() -> None:
    assert batch_length({"__key__": ["a", "b", "c"], "image": torch.zeros(3, 2), "cls": torch.zeros(3)}) == 3
    assert batch_length([torch.zeros(5, 1), torch.zeros(5)]) == 5
    assert batch_length(torch.zeros(7, 3)) == 7


def test_tree_sampler_sums_children() -> None:
    code = "import time; block = bytearray(64 << 20); block[::4096] = b'x' * len(block[::4096]); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        own = rss_of(os.getpid()) or 0
        deadline = time.monotonic() + 20
        while (rss_of(child.pid) or 0) < 64 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in descendants(os.getpid())
        with TreeSampler(interval_s=0.01) as sampler:
            rss, pss = sampler.take_peaks()
        assert rss is not None and rss >= own + (64 << 20)
        assert pss is not None and pss_of(child.pid) is not None
        assert child.pid in sampler.child_cpu_s and (cpu_seconds_of(child.pid) or 0) >= 0
    finally:
        child.kill()
        child.wait()


def test_bad_configurations_fail_before_running(sharded: tuple[Path, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ToolError, match="no thread workers"):
        LoaderConfig(2, "thread", stock=True)
    with pytest.raises(ToolError, match="'worker_type' must be 'thread' or 'process'"):
        LoaderConfig(2, "fibre")
    with pytest.raises(ToolError, match="'num_workers' must be a non-negative int"):
        LoaderConfig(-1)
    with pytest.raises(ToolError, match="at least one"):
        profile_loader(sharded[1], [])
    with pytest.raises(ToolError, match="'allocator' must be one of"):
        profile_loader(sharded[1], CONFIGS[:1], allocators=["hoard"])
    assert loader.main([str(tmp_path / "missing"), "--workers", "0"]) == 2
    assert "loader:" in capsys.readouterr().err


def test_a_failing_child_is_reported_with_its_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="child process exited with status 1"):
        run_in_child(tmp_path / "missing", LoaderConfig(0, allocator="system"), batches=1, epochs=1, seed=0)
