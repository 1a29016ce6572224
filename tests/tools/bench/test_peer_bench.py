"""tools.bench.peer_bench: our loader vs the stock DataLoader on the same JPEG bytes, interleaved rounds
(issues 15, 20)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from tools.bench import peer_bench
from tools.common.synthetic import make_raw_images, make_uniform_images, shard
from tools.bench.peer_bench import MIXED, RAW, REFERENCE, ROWS, UNIFORM, BenchConfig, PilCrop, round_orders, run_bench

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def raw_and_shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(raw tree of the colour JPEGs among 40 synthetic images, its shards not resized); read-only."""
    root = tmp_path_factory.mktemp("peer-bench")
    raw = make_raw_images(root / "raw", 40)
    return raw, shard(raw, root / "shards")


@pytest.fixture(scope="module")
def smoke_report(raw_and_shards: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The JSON report of one ``--smoke`` run (1 round, every row) on the module's raw tree: its one photo set's."""
    raw, _ = raw_and_shards
    path = tmp_path_factory.mktemp("peer-bench-out") / "report.json"
    assert peer_bench.main(["--smoke", "--raw", str(raw), "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    assert list(doc["results"]["photos"]) == [RAW]
    return {**doc, "results": doc["results"]["photos"][RAW]}


def test_every_row_runs_and_reports(smoke_report: dict[str, Any]) -> None:
    results = smoke_report["results"]
    assert smoke_report["tool"] == "peer_bench" and smoke_report["version"] == 1
    assert [r["row"] for r in results["rows"]] == list(ROWS)
    for row in results["rows"]:
        assert row["images_per_s"] > 0, row["row"]
        assert row["cpu_ms_per_image"] > 0, row["row"]
        assert row["ceiling_pct"] > 0, row["row"]
        assert sum(e["samples"] for e in row["epochs"]) == results["data"]["images"], row["row"]
    assert results["ceiling"]["images_per_s"] > 0 and results["ceiling"]["cores"] >= 1


def test_the_reference_row_has_ratio_one(smoke_report: dict[str, Any]) -> None:
    rows = {r["row"]: r for r in smoke_report["results"]["rows"]}
    assert rows[REFERENCE]["ratio"] == 1.0
    other = rows["ours-fused"]
    assert other["ratio"] == pytest.approx(other["images_per_s"] / rows[REFERENCE]["images_per_s"])
    assert rows[REFERENCE]["round_ratio"] == 1.0


def test_the_per_round_ratio_pairs_each_round(raw_and_shards: tuple[Path, Path]) -> None:
    _, shards = raw_and_shards
    report = run_bench(shards, BenchConfig(rows=("ours-fused", REFERENCE), workers=1, batch_size=8, rounds=3,
                                           batches=2, ceiling_images=2))
    ours, stock = report.results
    paired = sorted(a.images_per_s / b.images_per_s for a, b in zip(ours.epochs, stock.epochs))
    assert ours.round_ratio == pytest.approx(paired[1])  # the median of 3 rounds' own ratios
    assert stock.round_ratio == 1.0


def test_the_table_shows_ratio_one_for_the_reference(raw_and_shards: tuple[Path, Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    raw, _ = raw_and_shards
    assert peer_bench.main(["--smoke", "--raw", str(raw), "--rows", f"ours-fused,{REFERENCE}", "--batches", "1",
                            "--ceiling-images", "2"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith(REFERENCE))
    assert " 1.00 " in line, out
    assert "ceiling:" in out and "CPU ms/img" in out


def test_without_the_reference_row_the_ratio_is_none(raw_and_shards: tuple[Path, Path]) -> None:
    _, shards = raw_and_shards
    report = run_bench(shards, BenchConfig(rows=("ours-fused",), workers=1, batch_size=8, rounds=1, batches=1,
                                           ceiling_images=2))
    assert report.results[0].ratio is None


def test_plot_writes_a_png(raw_and_shards: tuple[Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    raw, _ = raw_and_shards
    assert peer_bench.main(["--smoke", "--raw", str(raw), "--rows", "ours-fused", "--batches", "1", "--ceiling-images",
                            "2", "--plot", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_round_orders_rotate() -> None:
    assert round_orders(("a", "b", "c"), 4) == [("a", "b", "c"), ("b", "c", "a"), ("c", "a", "b"), ("a", "b", "c")]


def test_the_rows_run_in_the_rotated_order(raw_and_shards: tuple[Path, Path]) -> None:
    _, shards = raw_and_shards
    seen: list[str] = []
    config = BenchConfig(rows=("ours-fused", "stock-uint8", "ours-pil"), workers=1, batch_size=8, rounds=3, batches=1,
                         ceiling_images=2)
    report = run_bench(shards, config, log=seen.append)
    ran = [line.split(": ")[0].split(" ")[-1] for line in seen]
    assert ran == ["ours-fused", "stock-uint8", "ours-pil", "stock-uint8", "ours-pil", "ours-fused",
                   "ours-pil", "ours-fused", "stock-uint8"]
    assert [len(r.epochs) for r in report.results] == [3, 3, 3]
    assert [e.round_index for e in report.results[0].epochs] == [0, 1, 2]


@pytest.mark.parametrize(("args", "message"), [
    (["--rows", "stock-uint8,bogus"], "'bogus'"),
    (["--rows", "ours-fused,ours-fused"], "twice"),
    (["--rows", ","], "at least one"),
    (["--workers", "-1"], "'workers'"),
    (["--rounds", "0"], "'rounds'"),
    (["--batches", "0"], "'batches'"),
    (["--batch-size", "0"], "'batch_size'"),
    (["--images", "0"], "'images'"),
    (["--raw", "/nonexistent/peer-bench"], "/nonexistent/peer-bench"),
    (["--photos", "mixed,bogus"], "'photos' must name some of mixed, 500x375"),
    (["--photos", "mixed,mixed"], "each once"),
])
def test_bad_arguments_exit_2_with_a_message(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert peer_bench.main(["--smoke", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("peer_bench: ") and message in err, err


def test_a_malformed_number_exits_2() -> None:
    with pytest.raises(SystemExit) as exc:
        peer_bench.main(["--workers", "two"])
    assert exc.value.code == 2


def _jpeg() -> bytes:
    pixels = np.random.default_rng(0).integers(0, 256, (300, 400, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG")
    return buffer.getvalue()


def test_the_pil_transform_outputs_uint8_chw_and_normalised_float32_of_the_same_crop() -> None:
    sample = {"__key__": "k", "__index__": 0, "jpg": _jpeg()}
    as_uint8 = PilCrop("jpg")(sample, np.random.default_rng(7))
    as_float = PilCrop("jpg", normalise=True)(sample, np.random.default_rng(7))
    assert "jpg" not in as_uint8 and as_uint8["__key__"] == "k" and "jpg" in sample  # input left alone
    assert as_uint8["image"].dtype == torch.uint8 and as_uint8["image"].shape == (3, 224, 224)
    assert as_float["image"].dtype == torch.float32 and as_float["image"].shape == (3, 224, 224)
    mean = torch.tensor(peer_bench.IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(peer_bench.IMAGENET_STD).view(3, 1, 1)
    torch.testing.assert_close(as_float["image"], (as_uint8["image"].float() / 255 - mean) / std)


@pytest.mark.slow
def test_end_to_end_bare_json_on_synthetic_images() -> None:
    """The command as a user runs it: makes its own JPEGs, prints only JSON with a bare --json."""
    done = subprocess.run([sys.executable, "-m", "tools.bench.peer_bench", "--smoke", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert list(doc["results"]["photos"]) == [MIXED, UNIFORM]  # both photo sets by default, side by side
    for photos in doc["results"]["photos"].values():
        assert photos["data"]["images"] == peer_bench.SMOKE["images"]
        assert {r["row"] for r in photos["rows"]} == set(ROWS)


def test_the_500x375_photos_are_all_about_500x375_and_deterministic(tmp_path: Path) -> None:
    first = make_uniform_images(tmp_path / "a", 6)
    again = make_uniform_images(tmp_path / "b", 6)
    files = sorted(first.rglob("*.jpg"))
    assert len(files) == 6 and [f.read_bytes() for f in files] == [f.read_bytes() for f in sorted(again.rglob("*.jpg"))]
    for path in files:
        with Image.open(path) as img:
            assert 470 <= max(img.size) <= 500 and 0.69 <= min(img.size) / max(img.size) <= 0.81, img.size
            assert img.format == "JPEG" and img.mode == "RGB"


def test_both_photo_sets_side_by_side_in_one_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    assert peer_bench.main(["--smoke", "--images", "16", "--rows", f"{REFERENCE},ours-fused", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "photos mixed: 16 JPEGs" in out and "photos 500x375: 16 JPEGs" in out
    assert "side by side" in out and f"x {REFERENCE}, 500x375" in out
    photos = json.loads(path.read_text())["results"]["photos"]
    assert list(photos) == [MIXED, UNIFORM]
    assert photos[UNIFORM]["photos_what"].startswith("every photo ~500x375")
    assert all(r["images_per_s"] > 0 for set_ in photos.values() for r in set_["rows"])


def test_the_users_pil_transform_runs_in_our_worker_processes_when_asked(raw_and_shards: tuple[Path, Path]) -> None:
    _, shards = raw_and_shards
    report = run_bench(shards, BenchConfig(rows=(REFERENCE, "ours-pil-process"), workers=2, batch_size=8, rounds=1,
                                           ceiling_images=2))
    stock, ours = report.results
    assert (stock.worker_type, ours.worker_type) == ("process", "process")
    assert ours.epochs[0].samples == stock.epochs[0].samples == report.photos.data["images"]
    assert ours.ratio is not None and ours.ratio > 0
    # The same per-sample work in worker processes: their CPU time is counted (they end with the epoch).
    assert ours.cpu_ms_per_image > 0.75 * stock.cpu_ms_per_image, (ours.cpu_ms_per_image, stock.cpu_ms_per_image)
