"""Every tools program shares one command-line convention for its report (issue 15):
``--json`` alone prints the JSON report to stdout instead of the table; ``--json PATH``
writes it to PATH and keeps the table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ["cpu", "decode_bench", "disk", "loader", "open_bench", "peer_bench", "region_bench", "shard_bench"]


def _help(tool: str) -> str:
    done = subprocess.run([sys.executable, "-m", f"tools.{tool}", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


@pytest.mark.parametrize("tool", TOOLS)
def test_json_takes_an_optional_path(tool: str) -> None:
    assert "--json [PATH]" in _help(tool)


def test_bare_json_prints_only_json_and_a_path_keeps_the_table(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "tools.open_bench", "--samples", "200", "--shards", "2", "--batch-size", "8"]
    bare = subprocess.run([*command, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bare.returncode == 0, bare.stderr
    assert json.loads(bare.stdout)["tool"] == "open_bench"
    to_file = subprocess.run([*command, "--json", str(tmp_path / "r.json")], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    assert to_file.returncode == 0, to_file.stderr
    assert "first_batch_s" in to_file.stdout  # the table
    assert json.loads((tmp_path / "r.json").read_text())["results"]["samples"] == 200
