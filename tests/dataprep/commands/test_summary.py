from __future__ import annotations

import io
import json
import os

from dataprep.cli import main
from dataprep.engines.progress import ProgressLine


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_only_on_a_terminal():
    tty, pipe = _Tty(), io.StringIO()
    for stream in (tty, pipe):
        progress = ProgressLine(100, stream=stream, interval_s=0.0)
        progress.update(50, 3, 5_000_000, force=True)
        progress.close()
    assert "50/100 inputs" in tty.getvalue() and "rejects 3" in tty.getvalue() and "MB/s" in tty.getvalue()
    assert pipe.getvalue() == ""


def test_shard_json_summary(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.txt").write_text("first document")
    (raw / "b.txt").write_text("   ")
    assert main(["shard", os.fspath(raw), os.fspath(tmp_path / "out"), "--json", "--workers", "1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["totals"] == {"inputs_seen": 2, "samples_kept": 1, "rejected": 1,
                                 "rejected_by_reason": {"empty_text": 1}}
    assert summary["format"] == "parquet" and summary["layout"] == "text" and summary["shards"] == 1
