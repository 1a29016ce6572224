"""tools.suites.device.device_suite: argument handling, one JSON document saved after every step, failures
and the time budget recorded per step, and (slow) the whole --smoke run on the CPU."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tools.suites.device import device_suite
from tools.suites.device.check_steps import junit_summary
from tools.suites.device.scaling_steps import add_efficiency, split_tree

REPO = Path(__file__).resolve().parents[4]


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def test_one_step_writes_the_part_document_with_env_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert device_suite.main(["--smoke", "--part", "1", "--steps", "h2d", "--out", str(tmp_path)]) == 0
    doc = load(tmp_path / "part1.json")
    assert doc["version"] == device_suite.SUITE_VERSION and doc["tool"] == "device_suite" and doc["part"] == "1"
    assert list(doc["steps"]) == ["env", "h2d"]  # env always, in order
    env = doc["steps"]["env"]["result"]
    assert env["torch"] == torch.__version__
    assert env["device"] == (torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
    h2d = doc["steps"]["h2d"]
    assert h2d["status"] == "ok" and h2d["seconds"] >= 0
    assert {r["dtype"] for r in h2d["result"]["rows"]} == {"uint8", "float32"}
    assert all(r["gb_s"] > 0 for r in h2d["result"]["rows"])
    printed = capsys.readouterr().out
    assert "== h2d: ok" in printed and "part1.json" in printed
    assert not (tmp_path / "part2.json").exists()


def test_each_step_finds_the_earlier_steps_already_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def peek(suite: device_suite.Suite) -> dict[str, Any]:
        seen.update(load(suite.json_path)["steps"])
        return {}

    monkeypatch.setitem(device_suite.STEPS, "augment", peek)
    assert device_suite.main(["--smoke", "--part", "1", "--steps", "h2d,augment", "--out", str(tmp_path)]) == 0
    assert seen["env"]["status"] == "ok" and seen["h2d"]["status"] == "ok"  # on disk before the next step ran


def test_a_failing_step_is_recorded_and_the_next_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    def broken(suite: device_suite.Suite) -> dict[str, Any]:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setitem(device_suite.STEPS, "h2d", broken)
    monkeypatch.setitem(device_suite.STEPS, "augment", lambda suite: {"fine": True})
    assert device_suite.main(["--smoke", "--part", "1", "--steps", "h2d,augment", "--out", str(tmp_path)]) == 1
    steps = load(tmp_path / "part1.json")["steps"]
    assert steps["h2d"]["status"] == "error" and "illegal memory access" in steps["h2d"]["error"]
    assert "RuntimeError" in steps["h2d"]["traceback"]
    assert steps["augment"] == {"status": "ok", "result": {"fine": True}, "seconds": steps["augment"]["seconds"]}
    assert "== h2d: error" in capsys.readouterr().out


def test_steps_past_the_budget_are_skipped_with_the_reason(tmp_path: Path) -> None:
    assert device_suite.main(["--smoke", "--part", "1", "--steps", "h2d", "--budget-s", "1e-9",
                              "--out", str(tmp_path)]) == 1
    steps = load(tmp_path / "part1.json")["steps"]
    assert steps["env"]["status"] == "ok"  # where the numbers came from is always recorded
    assert steps["h2d"] == {"status": "skipped", "reason": "the time budget was spent",
                            "seconds": steps["h2d"]["seconds"]}


def test_part_2_steps_without_their_data_fail_naming_it(tmp_path: Path) -> None:
    assert device_suite.main(["--smoke", "--part", "2", "--steps", "scaling_loader", "--out", str(tmp_path)]) == 1
    step = load(tmp_path / "part2.json")["steps"]["scaling_loader"]
    assert step["status"] == "error" and "needs the data step's shards" in step["error"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--smoke", "--steps", "h2d,warp"], "unknown step warp"),
    (["--smoke", "--budget-s", "0"], "--budget-s must be positive"),
])
def test_bad_arguments_exit_2_before_running_anything(argv: list[str], message: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert device_suite.main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_bad_part_and_missing_out_are_usage_errors() -> None:
    with pytest.raises(SystemExit) as exc:
        device_suite.main(["--smoke", "--part", "3", "--out", "x"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        device_suite.main(["--smoke"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_full_run_without_cuda_exits_2_with_a_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert device_suite.main(["--part", "1", "--out", str(tmp_path)]) == 2
    assert "use --smoke" in capsys.readouterr().err


def test_junit_summary_counts_and_names_failures(tmp_path: Path) -> None:
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest" tests="3" failures="1" errors="0" skipped="1">'
        '<testcase classname="tests.a" name="test_ok"/>'
        '<testcase classname="tests.a" name="test_bad"><failure message="x"/></testcase>'
        '<testcase classname="tests.b" name="test_skip"><skipped/></testcase>'
        "</testsuite></testsuites>", encoding="utf-8")
    assert junit_summary(xml) == {"junit": "j.xml", "tests": 3, "failures": 1, "errors": 0, "skipped": 1,
                                  "failed": ["tests.a::test_bad"]}
    assert junit_summary(tmp_path / "absent.xml") == {"junit": None}


def test_efficiency_is_relative_to_the_one_worker_row() -> None:
    rows: list[dict[str, Any]] = [
        {"workers": 1, "images_per_s": 100.0, "cpu_s": 10.0},
        {"workers": 4, "images_per_s": 300.0, "cpu_s": 12.5},
        {"workers": 8, "skipped": "budget"},
    ]
    add_efficiency(rows, key="images_per_s", workers_key="workers")
    assert rows[1]["speedup"] == 3.0 and rows[1]["scaling_efficiency"] == 0.75 and rows[1]["cpu_efficiency"] == 0.8
    assert rows[0]["scaling_efficiency"] == 1.0 and "speedup" not in rows[2]


def test_split_tree_holds_every_file_once_in_its_class_folder(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    for k in range(7):
        (raw / f"class_{k % 2}").mkdir(parents=True, exist_ok=True)
        (raw / f"class_{k % 2}" / f"img_{k}.jpg").write_bytes(bytes([k]))
    parts = split_tree(raw, tmp_path / "split", 3)
    found = sorted(str(p.relative_to(part)) for part in parts for p in part.rglob("*.jpg"))
    assert found == sorted(str(p.relative_to(raw)) for p in raw.rglob("*.jpg"))
    assert [len(list(part.rglob("*.jpg"))) for part in parts] == [3, 2, 2]


@pytest.mark.slow
def test_smoke_runs_every_step_in_one_call_in_order_of_need(tmp_path: Path) -> None:
    assert device_suite.main(["--smoke", "--out", str(tmp_path)]) == 0
    document = load(tmp_path / "partone.json")
    steps = document["steps"]
    # Correctness first, then the figures a short lease needs most (issue 23's order).
    assert list(steps) == list(device_suite.PARTS["one"]) == [
        "env", "pytest", "h2d", "augment", "data", "end_to_end", "decode", "end_to_end_decode", "scaling_loader",
        "scaling_shard", "shard_writers"]
    assert set(device_suite.PARTS["one"]) == set(device_suite.PARTS["1"]) | set(device_suite.PARTS["2"])
    for step in steps.values():
        assert step["status"] == "ok", step
    pytest_step = steps["pytest"]["result"]
    assert pytest_step["exit_code"] == 0 and pytest_step["failed"] == [] and pytest_step["tests"] > 0
    decode = steps["decode"]["result"]
    assert decode["raw"]["cpu_full_img_s"] > 0 and decode["resized_256"]["cpu_loader_crop_img_s"] > 0
    # The loader's decode="device" path, measured on whatever device there is, with its distance from the CPU path.
    assert decode["raw"]["device_crop_img_s"] > 0 and decode["raw"]["device_vs_cpu_crop"] > 0
    assert decode["raw"]["device_mad_worst"] <= 2.0
    # Every backend of the device, each JPEG decoded in its region and whole, side by side.
    variants = {(r["backend"], r["regions"]) for r in decode["raw"]["device_variants"]}
    backends = ("hardware", "gpu", "hybrid") if torch.cuda.is_available() else ("cpu",)
    assert variants == {(b, regions) for b in backends for regions in (True, False)}
    by_model = steps["end_to_end_decode"]["result"]["models"]
    assert set(by_model) == {"resnet50", "resnet18"}
    for results in by_model.values():
        assert results["ceiling_img_s"] > 0 and all(r["img_s"] > 0 and "error" not in r for r in results["fed"])
        assert [(r["feed"], r.get("decode")) for r in results["fed"]] == [
            ("loaders, raw shards, decode=device", "device"), ("loaders, raw shards, decode=cpu, processes", "cpu"),
            ("torch, raw files, float32", None)]
    if not torch.cuda.is_available():  # every CUDA-only figure says why it is missing
        assert decode["raw"]["gpu_skipped"] == "no CUDA device"
        assert steps["h2d"]["result"]["not_measured"]["pinned rows"] == "pinned host memory needs CUDA"
        assert "gpu_idle_fraction" in steps["end_to_end"]["result"]["not_measured"]
        assert "CPU backend" in steps["end_to_end_decode"]["result"]["not_measured"]["decode_device"]
    e2e = steps["end_to_end"]["result"]
    assert {r["feed"] for r in e2e["fed"]} == {"loaders, shards pre-resized 256", "loaders, pre-resized 256, processes",
                                               "loaders, shards as raw",
                                               "torch, raw files, float32"}
    assert all(r["img_s"] > 0 and "error" not in r for r in e2e["fed"]) and e2e["ceiling_img_s"] > 0
    shard_rows = steps["scaling_shard"]["result"]["rows"]
    assert {r["mode"] for r in shard_rows} == {"threads", "processes"}
    images = steps["data"]["result"]["images"]
    assert 0 < images <= device_suite.SMOKE.raw_images  # colour JPEGs only
    assert all(r["images_per_s"] > 0 and r["kept"] == images for r in shard_rows)
    writer_rows = steps["shard_writers"]["result"]["rows"]
    assert {(r["case"], r["workers"]) for r in writer_rows} == {
        (c, n) for c in ("images", "table", "tokens-bpe", "tokens-bytes") for n in device_suite.SMOKE.writer_workers}
    assert all(r["inputs_per_s"] > 0 and "speedup" in r for r in writer_rows)
    assert [r["split"] for r in writer_rows if r["case"] == "table"] == ["1 x 1", "1 x 1"]  # one range: one writer
    loader_rows = steps["scaling_loader"]["result"]["rows"]
    assert {(r["worker_type"], r["workers"]) for r in loader_rows} == {
        (t, n) for t in ("thread", "process") for n in device_suite.SMOKE.scale_workers}
    # What comes back from the device machine: at most 8 files, none deeper than 2 folders.
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) <= 8 and {p.name for p in files} >= {"partone.json", "pytest_gpu.xml", "pytest_gpu.log"}


def test_the_full_plan_runs_the_gpu_tests_and_end_to_end_at_16_workers() -> None:
    assert device_suite.FULL_ONE.e2e_workers == (16,) and device_suite.FULL_ONE.scale_workers == (1, 4, 16)
    assert all((REPO / path).is_file() for path in device_suite.FULL.pytest_targets)
    marked = {str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
              if "mark.gpu" in p.read_text(encoding="utf-8") and p.name != "test_device_suite.py"}
    assert marked <= set(device_suite.FULL.pytest_targets)  # no gpu-marked test file left out


def test_a_hung_pytest_run_is_stopped_at_its_timeout_and_recorded(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    hang = tmp_path / "test_hang.py"
    hang.write_text("import time\nimport pytest\n\n\n@pytest.mark.gpu\ndef test_hang():\n    time.sleep(60)\n",
                    encoding="utf-8")
    plan = dataclasses.replace(device_suite.SMOKE, pytest_targets=(str(hang),), pytest_timeout_s=0.1)
    monkeypatch.setattr(device_suite, "SMOKE", plan)
    assert device_suite.main(["--smoke", "--part", "1", "--steps", "pytest", "--out", str(tmp_path / "out")]) == 0
    result = load(tmp_path / "out" / "part1.json")["steps"]["pytest"]["result"]
    # Stopped, not waited out: a run that slept its 60 s would have an exit code (its test passed).
    assert result["exit_code"] is None and result["timed_out_after_s"] == 0.1 and result["passed_all"] is False
    assert result["seconds"] >= 0


def test_render_prints_the_tables_of_a_finished_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert device_suite.main(["--smoke", "--part", "1", "--steps", "h2d", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert device_suite.main(["--render", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# part1.json: ") and f"torch {torch.__version__}" in printed
    assert "== h2d: ok" in printed and "GB/s" in printed


def test_render_without_results_or_with_a_broken_file_exits_2(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert device_suite.main(["--render", str(tmp_path)]) == 2
    assert "no part*.json files" in capsys.readouterr().err
    (tmp_path / "part2.json").write_text("{not json", encoding="utf-8")
    assert device_suite.main(["--render", str(tmp_path)]) == 2
    assert "part2.json: not a device_suite document" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        device_suite.main(["--render", str(tmp_path), "--out", str(tmp_path)])
