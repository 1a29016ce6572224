"""tools.profile.cpu: per-core stage rates and thread/process scaling on real shards, JSON fields, failure paths."""

from __future__ import annotations

import functools
import io
import json
import tarfile
from pathlib import Path

import pytest
from PIL import Image

from dataprep.formats.tar.index import index_path_for, index_tar, write_index
from dataprep.formats.manifest import Manifest, ShardInfo, Totals, sha256_file, write_manifest
from loaders.errors import ShardError
from tools.common.proctree import ProcessTeam
from tools.common.report import ToolError
from tools.profile import cpu
from tools.common.shard_images import read_field, read_images
from tools.profile.cpu import (CENTER_CROP, COLLATE, DECODE, DECODE_ARRAY, DECODE_RESIZE, PROCESS, RANDOM_CROP, THREAD,
                               CpuReport, image_library, measure_cpu, worker_counts)


@pytest.fixture(scope="module")
def report(sharded: tuple[Path, Path]) -> CpuReport:
    return measure_cpu(sharded[1], n=12, max_workers=2, repeat=2)


def text_only_shards(root: Path) -> Path:
    """A shard directory whose samples hold only "txt" and "cls": no image field."""
    root.mkdir()
    path = root / "shard-000000.tar"
    with tarfile.open(path, "w") as tar:
        for i in range(3):
            for field, payload in (("txt", b"hello"), ("cls", b"1")):
                member = tarfile.TarInfo(f"s{i}.{field}")
                member.size = len(payload)
                tar.addfile(member, io.BytesIO(payload))
    index = index_tar(path)
    write_index(index_path_for(path), index)
    info = ShardInfo(path.name, 3, path.stat().st_size, sha256_file(path), index_path_for(path).name, index.fields)
    write_manifest(root, Manifest("wds", "grouped", (info,), Totals(3, 3, 0)))
    return root


def test_every_stage_is_measured_with_consistent_figures(report: CpuReport) -> None:
    assert [s.stage for s in report.stages] == [DECODE, DECODE_ARRAY, DECODE_RESIZE, RANDOM_CROP, CENTER_CROP, COLLATE]
    # Only what does not depend on the clock: every stage saw the 12 images and took some CPU time
    # (which stage is faster is what the tool measures, never what a test may assert).
    for rate in report.stages:
        assert rate.images == 12 and rate.cpu_seconds > 0
        assert rate.images_per_s == pytest.approx(12 / rate.cpu_seconds)
    # Megapixels count the encoded images (mean 519x439 here) for every decoding stage, the
    # 224x224 outputs for collate.
    info = report.images
    encoded = report.stage(DECODE).megapixels
    assert encoded == pytest.approx(12 * info["mean_width"] * info["mean_height"] / 1e6, rel=0.2)
    for stage in (DECODE_ARRAY, DECODE_RESIZE, RANDOM_CROP, CENTER_CROP):
        assert report.stage(stage).megapixels == pytest.approx(encoded)
    assert report.stage(COLLATE).megapixels == pytest.approx(12 * 224 * 224 / 1e6)
    with pytest.raises(KeyError, match="no stage"):
        report.stage("nope")


def test_scaling_covers_threads_and_processes_with_efficiency_against_one_worker(report: CpuReport) -> None:
    points = {(p.mode, p.workers): p for p in report.scaling}
    assert set(points) == {(THREAD, 1), (THREAD, 2), (PROCESS, 1), (PROCESS, 2)}
    for p in report.scaling:
        assert p.images == 12 and p.wall_seconds > 0 and p.efficiency > 0
    assert points[(THREAD, 1)].efficiency == pytest.approx(1.0)
    assert points[(PROCESS, 1)].efficiency == pytest.approx(1.0)
    two = points[(THREAD, 2)]
    assert two.efficiency == pytest.approx(two.images_per_s / (2 * points[(THREAD, 1)].images_per_s))


def test_library_reports_pillow_flavour_and_jpeg_codec() -> None:
    library = image_library()
    assert library.pillow == Image.__version__
    assert library.pillow_simd == (".post" in Image.__version__)
    assert library.libjpeg_turbo == (library.libjpeg_turbo_version is not None)
    assert library.pillow in library.describe() and library.active_backend in library.describe()


def test_main_writes_json_with_the_documented_fields(sharded: tuple[Path, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cpu.json"
    assert cpu.main([str(sharded[1]), "--n", "6", "--max-workers", "1", "--repeat", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "one core" in printed and "Pillow" in printed and RANDOM_CROP in printed
    doc = json.loads(out.read_text())
    assert (doc["version"], doc["tool"]) == (1, "cpu") and doc["machine"]["cores_available"] >= 1
    results = doc["results"]
    assert set(results) >= {"shard_dir", "images", "cores_available", "library", "stages", "scaling", "notes"}
    assert set(results["library"]) == {"pillow", "pillow_simd", "libjpeg_turbo", "libjpeg_turbo_version",
                                       "jpeg_version", "simplejpeg", "active_backend"}
    assert results["images"]["count"] == 6 and results["images"]["num_samples"] == 24
    for stage in results["stages"]:
        assert set(stage) >= {"stage", "images", "cpu_seconds", "megapixels", "images_per_s", "megapixels_per_s"}
    assert [(p["mode"], p["workers"]) for p in results["scaling"]] == [(THREAD, 1), (PROCESS, 1)]


def test_json_to_stdout_prints_no_table(sharded: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "measure_scaling", lambda *a, **k: ())  # the stages are what this test reads
    assert cpu.main([str(sharded[1]), "--n", "3", "--repeat", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tool"] == "cpu" and len(doc["results"]["stages"]) == 6


def test_read_images_samples_distinct_images_deterministically(sharded: tuple[Path, Path]) -> None:
    first, again = read_images(sharded[1], 5, seed=3), read_images(sharded[1], 5, seed=3)
    assert (first.indices == again.indices and len(set(first.indices)) == 5
            and list(first.indices) == sorted(first.indices))
    assert first.images == again.images and all(d[:3] == b"\xff\xd8\xff" for d in first.images)
    assert len(read_images(sharded[1], 1000).images) == 24  # capped at the samples there are


def test_worker_counts_are_powers_of_two_and_the_maximum() -> None:
    assert worker_counts(1) == [1]
    assert worker_counts(2) == [1, 2]
    assert worker_counts(6) == [1, 2, 4, 6]
    assert worker_counts(8) == [1, 2, 4, 8]


def test_bad_arguments_and_data_fail_clearly(sharded: tuple[Path, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ToolError, match="'n' must be a positive int"):
        measure_cpu(sharded[1], n=0)
    with pytest.raises(ToolError, match="'max_workers' must be a positive int"):
        measure_cpu(sharded[1], n=2, max_workers=0)
    with pytest.raises(ToolError, match="no image field"):
        read_images(text_only_shards(tmp_path / "text"), 2)
    with pytest.raises(ShardError):
        read_images(tmp_path / "missing", 2)
    assert cpu.main([str(tmp_path / "missing")]) == 2
    assert "cpu:" in capsys.readouterr().err


def test_a_failing_scaling_process_is_reported_not_waited_for(tmp_path: Path) -> None:
    load = functools.partial(read_field, str(tmp_path / "gone"), "jpg", [0])
    with pytest.raises(ToolError, match="process scaling run failed in a worker process: ShardError"):
        with ProcessTeam(load, functools.partial(cpu._random_crops, "jpg"), 1):
            pass
