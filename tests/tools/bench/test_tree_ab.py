"""tools.bench.tree_ab: the same work on two trees, interleaved, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench import tree_ab
from tools.common.synthetic import REPO_ROOT


def test_this_tree_against_itself_reports_every_row_from_both(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tools.bench.tree_ab", str(REPO_ROOT), "--images", "24", "--rounds",
                           "2", "--epochs", "1", "--dir", str(tmp_path), "--json"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["results"]["rows"]
    assert set(rows) == {"shard s", "loader thread img/s", "loader process img/s"}
    for row in rows.values():
        assert row["this"] > 0 and row["other"] > 0 and row["this_over_other"] > 0
    raw = json.loads(done.stdout)["results"]["raw"]
    assert all(len(v) == 2 for v in raw["shard_s"].values())  # every round ran both trees


def test_a_directory_that_is_not_a_checkout_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tree_ab.main([str(tmp_path)]) == 2
    assert f"{tmp_path}: not a checkout" in capsys.readouterr().err
