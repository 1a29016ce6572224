"""examples/load_parquet.py end to end: a JSON-lines table sharded to Parquet (its bad row a reject), every kept
row read each epoch, the tiny model fit to the table's scores; a second run finds the shards complete."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.examples.helpers import load_example

SCORES = {"train": 0.25, "val": 0.75}


def _table(path: Path) -> Path:
    """60 rows, 40 train (score 0.25) and 20 val (0.75), and one row whose score is not a number."""
    rows = [{"id": i, "score": SCORES["val" if i % 3 == 0 else "train"], "split": "val" if i % 3 == 0 else "train"}
            for i in range(60)]
    rows.insert(17, {"id": 999, "score": "abc", "split": "train"})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The example's ``main(ARGS)`` in this process (its imports are this process's: no second torch start)."""
    capsys.readouterr()
    assert load_example("load_parquet").main(list(args)) == 0
    return capsys.readouterr().out


def test_shards_a_table_and_fits_the_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table, out = _table(tmp_path / "table" / "rows.jsonl"), tmp_path / "parquet"
    stdout = _run(capsys, str(table), str(out), "--epochs", "3", "--batch-size", "8")
    assert re.search(r"samples kept\s+60\b", stdout) and re.search(r"wrong_type\s+1\b", stdout), stdout
    assert "60 rows in" in stdout and "columns ['id', 'score', 'split']" in stdout
    assert re.findall(r"epoch (\d): (\d+) rows", stdout) == [("0", "60"), ("1", "60"), ("2", "60")], stdout
    learned = re.search(r"score by split: \{'train': ([\d.]+), 'val': ([\d.]+)\}", stdout)
    assert learned is not None, stdout
    assert abs(float(learned.group(1)) - SCORES["train"]) < 0.02
    assert abs(float(learned.group(2)) - SCORES["val"]) < 0.02
    assert sorted(p.suffix for p in out.iterdir() if p.suffix == ".parquet")

    again = _run(capsys, str(table), str(out), "--epochs", "1")
    assert "already complete (nothing to do)" in again and "epoch 0: 60 rows" in again, again
