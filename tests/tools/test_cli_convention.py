"""Every tools program shares one command-line convention for its report (issue 15):
``--json`` alone prints the JSON report to stdout instead of the table; ``--json PATH``
writes it to PATH and keeps the table. Programs are found in the tree, so a new one is
covered (or must say here why it has no report)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.review.imports import is_program
from tools.review.source import load_tree

ROOT = Path(__file__).resolve().parents[2]
# Programs without a JSON report, and why.
NO_REPORT = {
    "tools.profile.malloc": "a launcher: it replaces itself with the command it runs",
    "tools.suites.device.device_suite": "writes one JSON document per part under --out, after every step",
    "tools.bench.remote_peers": "one step of remote_bench in the peers' interpreter: prints one JSON line for it",
    "tools.bench.plots": "draws the benchmarks page's PNGs from docs/img/figures.json: it measures nothing",
}
REPORTING = ["tools.bench.autotune_bench",
             "tools.bench.codec_bench", "tools.bench.decode_bench", "tools.bench.open_bench", "tools.bench.pack_bench",
             "tools.bench.peer_bench", "tools.bench.plan_bench",
             "tools.bench.region_bench", "tools.bench.remote_bench", "tools.bench.shard_bench",
             "tools.bench.token_bench", "tools.bench.token_threads", "tools.bench.tree_ab", "tools.bench.writers_bench",
             "tools.gpu.gpu_bench", "tools.profile.cpu", "tools.profile.disk", "tools.profile.loader",
             "tools.review.__main__", "tools.suites.torch.torch_suite"]


def test_every_program_is_listed_here() -> None:
    found = {m.name for m in load_tree(ROOT, ("tools",)) if is_program(m)}
    assert found == set(REPORTING) | set(NO_REPORT)


def _help(module: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(module).main(["--help"])
    assert stopped.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("module", REPORTING)
def test_json_takes_an_optional_path(module: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--json [PATH]" in _help(module, capsys)


@pytest.mark.parametrize("module", sorted(NO_REPORT))
def test_programs_without_a_report_still_answer_help(module: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--json" not in _help(module, capsys)


def test_bare_json_prints_only_json_and_a_path_keeps_the_table(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "tools.bench.open_bench", "--samples", "200", "--shards", "2", "--batch-size", "8"]
    bare = subprocess.run([*command, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bare.returncode == 0, bare.stderr
    assert json.loads(bare.stdout)["tool"] == "open_bench"
    to_file = subprocess.run([*command, "--json", str(tmp_path / "r.json")], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    assert to_file.returncode == 0, to_file.stderr
    assert "first_batch_s" in to_file.stdout  # the table
    assert json.loads((tmp_path / "r.json").read_text())["results"]["samples"] == 200
