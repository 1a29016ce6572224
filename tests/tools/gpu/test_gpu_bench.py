"""tools.gpu.gpu_bench: --smoke runs parts 1-3 on the CPU, JSON report, --record only on request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tools.common.report import ToolError
from tools.gpu import gpu_bench
from tools.gpu.decode import jpegs_in, measure_decode
from tools.gpu.end_to_end import measure_end_to_end, run_fed
from tools.gpu.feeds import Feed, cycled_indices, stock_feed
from tools.gpu.h2d import link_info, measure_h2d, pcie_peak_gb_s
from tools.gpu.render import render_decode
from tools.gpu.resnet import resnet18, resnet50
from tools.gpu.train_step import SMOKE

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_resnet50_has_the_standard_parameter_count_and_output() -> None:
    model = resnet50()
    assert sum(p.numel() for p in model.parameters()) == 25_557_032  # torchvision's resnet50
    tiny = resnet50(num_classes=7, width=4).to(memory_format=torch.channels_last)
    assert tiny(torch.randn(2, 3, 32, 32)).shape == (2, 7)


def test_resnet18_has_the_standard_parameter_count_and_output() -> None:
    assert sum(p.numel() for p in resnet18().parameters()) == 11_689_512  # torchvision's resnet18
    tiny = resnet18(num_classes=7, width=4).to(memory_format=torch.channels_last)
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
    assert f"torch {torch.__version__}" in text and "`python -m tools.gpu.gpu_bench --smoke --parts 1 --record`" in text


def test_end_to_end_part_trains_from_its_own_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    assert gpu_bench.main(["--smoke", "--steps", "1", "--parts", "3", "--workers", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3. end to end" in printed and "ceiling" in printed
    (row,) = json.loads(out.read_text())["results"]["end_to_end"]["fed"]
    assert row["num_workers"] == 1 and row["steps"] == 1 and row["img_s"] > 0 and 0 <= row["wait_fraction"] <= 1


def test_cycled_indices_are_shuffled_passes_over_every_sample() -> None:
    indices = cycled_indices(5, 12)
    assert len(indices) == 12 and all(isinstance(i, int) for i in indices)
    assert sorted(indices[:5]) == sorted(indices[5:10]) == list(range(5))
    assert indices == cycled_indices(5, 12)  # seeded
    with pytest.raises(ToolError, match="no samples"):
        cycled_indices(0, 3)


def test_decode_part_without_cuda_is_skipped_without_making_shards(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("checks the CPU path")

    def no_shards(*args: object) -> Path:
        raise AssertionError("part 4 alone made shards on the CPU")

    monkeypatch.setattr(gpu_bench, "make_shards", no_shards)
    assert gpu_bench.main(["--smoke", "--parts", "4"]) == 0
    assert "4. JPEG decode: skipped" in capsys.readouterr().out


def test_failing_shard_creation_skips_part_3_and_keeps_the_others(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*args: object) -> Path:
        raise ToolError("dataprep shard failed (1): no space left")

    monkeypatch.setattr(gpu_bench, "make_shards", broken)
    assert gpu_bench.main(["--smoke", "--steps", "1", "--parts", "1,3"]) == 0
    printed = capsys.readouterr().out
    assert "1. host-to-device copy" in printed and "3. end to end: skipped (making synthetic shards failed" in printed


def test_missing_shards_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_bench.main(["--smoke", "--parts", "3", "--shards", str(tmp_path / "absent")]) == 2
    assert "is not a directory" in capsys.readouterr().err


@pytest.mark.gpu
@needs_cuda
def test_smoke_run_on_cuda_measures_every_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_bench, "RESULTS_MD", tmp_path / "RESULTS.md")
    out = tmp_path / "report.json"
    assert gpu_bench.main(["--smoke", "--steps", "2", "--workers", "1,2", "--json", str(out), "--record"]) == 0
    results = json.loads(out.read_text())["results"]
    assert results["device"] == torch.cuda.get_device_name() and results["cuda"] == torch.version.cuda
    assert {(r["dtype"], r["host"]) for r in results["h2d"]} == {
        (d, h) for d in ("uint8", "float32") for h in ("pinned", "pageable")}
    assert all(a["ms"] > 0 for a in results["augment"]["augment"])
    assert [r["num_workers"] for r in results["end_to_end"]["fed"]] == [1, 2]
    assert "gpu_decode" in results
    assert results["device"] in (tmp_path / "RESULTS.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_full_run_without_cuda_exits_2_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_bench.main(["--parts", "1"]) == 2
    assert "use --smoke" in capsys.readouterr().err


def test_bad_option_values_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_bench.main(["--smoke", "--workers", "four"]) == 2
    assert "--workers must be comma-separated ints" in capsys.readouterr().err
    assert gpu_bench.main(["--smoke", "--steps", "0"]) == 2


def test_pcie_peak_follows_line_rate_and_encoding() -> None:
    assert pcie_peak_gb_s(4, 16) == pytest.approx(16 * 16 * (128 / 130) / 8)  # ~31.5 GB/s
    assert pcie_peak_gb_s(5, 16) == pytest.approx(2 * pcie_peak_gb_s(4, 16))
    assert pcie_peak_gb_s(2, 8) == pytest.approx(5 * 8 * 0.8 / 8)
    with pytest.raises(ToolError, match="no PCIe generation 9"):
        pcie_peak_gb_s(9, 16)


def test_h2d_rows_carry_the_share_of_the_link_peak() -> None:
    rows = measure_h2d(torch.device("cpu"), SMOKE, peak_gb_s=1000.0, repeats=2)
    assert all(r["of_link_peak"] == pytest.approx(r["gb_s"] / 1000.0) for r in rows)
    no_peak = measure_h2d(torch.device("cpu"), SMOKE, repeats=2)
    assert all(r["of_link_peak"] is None for r in no_peak)


def test_link_info_without_cuda_says_why() -> None:
    assert link_info(torch.device("cpu")) == {"skipped": "no CUDA device"}


def test_fed_run_reports_no_gpu_idle_off_cuda_and_applies_prepare() -> None:
    seen: list[tuple[int, ...]] = []
    batches = [(torch.zeros(2, 3, 4, 4), torch.tensor([1001, 5])) for _ in range(4)]

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        seen.append(tuple(labels.tolist()))

    fed = run_fed(batches, step, torch.device("cpu"), steps=2, warmup=1)
    assert fed["gpu_idle_fraction"] is None and fed["img_s"] > 0 and 0 <= fed["wait_fraction"] <= 1
    assert seen == [(1, 5)] * 3  # labels mod 1000, warm-up included


def test_end_to_end_records_a_failing_feed_and_runs_the_others(tmp_path: Path) -> None:
    def broken(num_workers: int, samples: int) -> object:
        raise OSError("raw file vanished")

    def fine(num_workers: int, samples: int) -> object:
        return [(torch.zeros(2, 3, 8, 8), torch.tensor([0, 1]))] * 8

    saved: list[int] = []
    out = measure_end_to_end(
        torch.device("cpu"), SMOKE, lambda images, labels: None,
        [Feed("broken", broken), Feed("fine", fine)], [1],
        on_row=lambda results: saved.append(len(results["fed"])))
    broken_row, fine_row = out["fed"]
    assert broken_row == {"feed": "broken", "num_workers": 1, "error": "OSError: raw file vanished"}
    assert fine_row["img_s"] > 0 and fine_row["ratio_to_ceiling"] > 0 and saved == [1, 2]
    late = measure_end_to_end(torch.device("cpu"), SMOKE, lambda images, labels: None, [Feed("fine", fine)], [1],
                              deadline=0.0)
    assert late["fed"] == [{"feed": "fine", "num_workers": 1, "skipped": "the time budget was spent"}]
    own = measure_end_to_end(torch.device("cpu"), SMOKE, lambda images, labels: None,
                             [Feed("fine", fine, workers=(2, 3)), Feed("run's", fine)], [1], deadline=0.0)
    assert [(r["feed"], r["num_workers"]) for r in own["fed"]] == [("fine", 2), ("fine", 3), ("run's", 1)]


def test_stock_feed_yields_normalised_float_batches_from_raw_files(sharded: tuple[Path, Path]) -> None:
    raw, _ = sharded
    feed = stock_feed("stock", raw, SMOKE, torch.device("cpu"))
    images, labels = next(iter(feed.make(0, 8)))
    images, labels = feed.prepare(images, labels)  # type: ignore[misc]
    assert images.dtype == torch.bfloat16 and images.shape == (4, 3, 32, 32)
    assert images.is_contiguous(memory_format=torch.channels_last) and labels.dtype == torch.int64
    assert float(images.float().min()) < 0 < float(images.float().max())  # normalised, not 0..1


def test_decode_on_the_cpu_measures_the_cpu_path_and_nvimgcodecs_cpu_backend_side_by_side(
        sharded: tuple[Path, Path]) -> None:
    _, shards = sharded
    jpegs = jpegs_in(shards, 6)
    assert len(jpegs) == 6 and all(j[:2] == b"\xff\xd8" for j in jpegs)
    out = measure_decode(torch.device("cpu"), jpegs, threads=2, side=32)
    assert out["cpu_full_img_s"] > 0 and out["cpu_loader_crop_img_s"] > 0 and out["gpu_skipped"] == "no CUDA device"
    # decode="device" on the CPU: nvImageCodec's CPU backend, region and whole-image decode, as one table's rows.
    rows = {(r["backend"], r["regions"]): r for r in out["device_variants"]}
    assert set(rows) == {("cpu", True), ("cpu", False)}
    for row in rows.values():
        assert row["decoder"].startswith("nvImageCodec 0.") and row["decoder"].endswith(", CPU")
        assert row["img_s"] > 0 and row["vs_cpu_crop"] == row["img_s"] / out["cpu_loader_crop_img_s"]
        assert row["decode_only_img_s"] > 0
        assert 0 <= row["mad_mean"] <= row["mad_worst"] <= 1.5 and row["host_retried"] == 0
    assert rows["cpu", True]["mad_mean"] == rows["cpu", False]["mad_mean"]  # a region's pixels are the whole's
    default = rows["cpu", True]  # what decode="device" runs
    assert out["device_crop_img_s"] == default["img_s"] and out["device_decoder"] == default["decoder"]
    assert out["device_vs_cpu_crop"] == out["device_crop_img_s"] / out["cpu_loader_crop_img_s"]
    table = render_decode(out, "decode")
    assert "nvImageCodec" in table and "region + crop" in table and "whole image + crop" in table
    none = measure_decode(torch.device("cpu"), [], threads=2, side=32)
    assert none == {"skipped": "no JPEG images to decode"}
