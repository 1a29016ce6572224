"""tools.gpu_bench: --smoke runs parts 1 and 2 on the CPU, JSON report, --record only on request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tools import gpu_bench


def test_resnet50_has_the_standard_parameter_count_and_output() -> None:
    model = gpu_bench.resnet50()
    assert sum(p.numel() for p in model.parameters()) == 25_557_032  # torchvision's resnet50
    tiny = gpu_bench.resnet50(num_classes=7, width=4).to(memory_format=torch.channels_last)
    assert tiny(torch.randn(2, 3, 32, 32)).shape == (2, 7)


def test_smoke_run_measures_copy_and_augment_and_writes_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    results_md = tmp_path / "RESULTS.md"
    monkeypatch.setattr(gpu_bench, "RESULTS_MD", results_md)
    out = tmp_path / "report.json"
    assert gpu_bench.main(["--smoke", "--steps", "1", "--parts", "1,2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1. host-to-device copy" in printed and "2. augment" in printed
    assert not results_md.exists()  # never recorded without --record
    results = json.loads(out.read_text())["results"]
    assert results["smoke"] is True and {r["dtype"] for r in results["h2d"]} == {"uint8", "float32"}
    assert all(r["gb_s"] > 0 and r["ms"] > 0 for r in results["h2d"])
    augment = results["augment"]
    assert {a["out_dtype"] for a in augment["augment"]} == {"bfloat16", "float16"}
    assert all(a["fraction_of_step"] == pytest.approx(a["ms"] / augment["step_ms"]) for a in augment["augment"])


def test_record_appends_to_results_md(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results_md = tmp_path / "RESULTS.md"
    results_md.write_text("# earlier results\n")
    monkeypatch.setattr(gpu_bench, "RESULTS_MD", results_md)
    assert gpu_bench.main(["--smoke", "--parts", "1", "--record"]) == 0
    text = results_md.read_text()
    assert text.startswith("# earlier results\n") and "## gpu_bench" in text and "host-to-device" in text


def test_end_to_end_part_runs_or_says_why_not(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_bench.main(["--smoke", "--steps", "1", "--parts", "3", "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "3. end to end" in printed
    assert "skipped (loaders API not importable" in printed or "ceiling" in printed


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_full_run_without_cuda_exits_2_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_bench.main(["--parts", "1"]) == 2
    assert "use --smoke" in capsys.readouterr().err


def test_bad_option_values_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_bench.main(["--smoke", "--workers", "four"]) == 2
    assert "--workers must be comma-separated ints" in capsys.readouterr().err
    assert gpu_bench.main(["--smoke", "--steps", "0"]) == 2
