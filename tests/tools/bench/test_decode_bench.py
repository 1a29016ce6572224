from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from loaders.read.decode import Backend, available_backends
from tools.bench import decode_bench

CASE_FIELDS = {"operation", "backend", "cpu_seconds", "images_per_s", "megapixels_per_s"}
THREAD_FIELDS = {"operation", "backend", "images_per_s_1_thread", "images_per_s_2_threads", "speedup",
                 "cpu_per_wall_2_threads", "python_share"}
RESULT_FIELDS = {"images", "cases", "threads", "fused_ratio_simplejpeg_vs_pillow", "chosen_backend",
                 "library_default", "active_backend", "cores_available"}


def _run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert decode_bench.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_report_has_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    # Small images: the resize to 224 is then an upscale, several times the decode's cost,
    # so the ordering check below has a wide margin even on a busy machine.
    doc = _run_json(capsys, "--n", "3", "--size", "96x64", "--repeat", "3")
    assert doc["tool"] == "decode_bench" and doc["version"] == 1 and "machine" in doc
    results = doc["results"]
    assert set(results) == RESULT_FIELDS
    assert results["images"]["count"] == 3 and results["images"]["mean_width"] == 96
    backends = {b.value for b in available_backends()}
    cases = {(c["operation"], c["backend"]): c for c in results["cases"]}
    assert {b for _, b in cases} == backends
    for backend in backends:
        assert {op for op, b in cases if b == backend} == {
            "decode full", "decode 1/2", "decode + resize 224", "RandomResizedCropDecode(224)",
            "CenterCropDecode(224)"}
    for case in results["cases"]:
        assert set(case) == CASE_FIELDS
        assert case["images_per_s"] > 0 and case["megapixels_per_s"] > 0 and case["cpu_seconds"] > 0
    # Clock-free: every case counts the same 3 encoded images, so megapixels per image agree (which
    # case is faster is the measurement, never an assertion).
    per_image = {case["megapixels_per_s"] / case["images_per_s"] for case in results["cases"]}
    assert max(per_image) == pytest.approx(min(per_image))
    assert {t["backend"] for t in results["threads"]} == backends
    for row in results["threads"]:
        assert set(row) == THREAD_FIELDS
        assert row["images_per_s_1_thread"] > 0 and row["images_per_s_2_threads"] > 0 and row["speedup"] > 0
    assert results["chosen_backend"] in {b.value for b in Backend}
    assert results["library_default"] == Backend.PILLOW.value
    if Backend.SIMPLEJPEG.value in backends:
        assert results["fused_ratio_simplejpeg_vs_pillow"] > 0


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert decode_bench.main(["--n", "2", "--size", "64x48", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "RandomResizedCropDecode(224)" in out and "images/s" in out and "chosen:" in out


def test_images_from_directory_and_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jpegs = decode_bench.synthetic_jpegs(2, 64, 48, 90, seed=0)
    files = tmp_path / "files" / "class_a"
    files.mkdir(parents=True)
    for i, data in enumerate(jpegs):
        (files / f"img{i}.JPG").write_bytes(data)
    (files / "notes.txt").write_text("not an image")
    assert decode_bench.load_jpegs(tmp_path / "files", 10) == jpegs

    shards = tmp_path / "shards"
    shards.mkdir()
    with tarfile.open(shards / "shard-000000.tar", "w") as tar:
        for i, data in enumerate(jpegs):
            for name, payload in ((f"s{i}.jpg", data), (f"s{i}.cls", b"1")):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    assert decode_bench.load_jpegs(shards, 1) == jpegs[:1]
    doc = _run_json(capsys, "--images", str(shards), "--n", "2", "--repeat", "1")
    assert doc["results"]["images"]["count"] == 2


def test_bad_input_exits_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert decode_bench.main(["--images", str(tmp_path)]) == 2
    assert "no .jpg" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        decode_bench.main(["--size", "big"])
    assert info.value.code == 2
