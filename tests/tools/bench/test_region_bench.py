from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loaders.read import region
from tests.samples import encode
from tools.bench import region_bench


@pytest.mark.skipif(not region.is_available(), reason="loaders._jpeg_region not built here")
def test_smoke_run_reports_every_stage_and_an_exact_lane(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert region_bench.main(["--smoke", "--images", "12", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert results["images"] == 12
    assert set(results["cpu_ms_per_image"]) == {"full decode", "entropy to crop bottom", "region decode",
                                                "fused, region lane", "fused, full decode"}
    assert all(v > 0 for v in results["cpu_ms_per_image"].values())
    assert results["lane_max_diff"] == 0 and results["lane_exact_share"] == 1.0  # Pillow-SIMD and stock Pillow
    out = capsys.readouterr().out
    assert "100.0% of images equal bit for bit" in out
    assert f"partial decode on (libjpeg: {region.libjpeg_file()})" in out


def test_without_the_extension_it_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(region, "_jpeg_region", None)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jpg").write_bytes(encode(np.zeros((16, 16, 3), np.uint8), "JPEG"))
    assert region_bench.main(["--raw", str(raw), "--smoke"]) == 2
    assert "not built" in capsys.readouterr().err


def test_empty_tree_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert region_bench.main(["--raw", str(tmp_path), "--smoke"]) == 2
    assert "no .jpg files" in capsys.readouterr().err
