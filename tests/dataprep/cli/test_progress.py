"""The progress line on stderr: walking, planning and mirroring RAW, then writing, with counts, rates and an ETA;
drawn on a terminal or with ``-v``, never into a captured (non-terminal) stderr otherwise."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from dataprep.cli import main
from dataprep.engines.progress import ProgressLine
from dataprep.phases import counted, eta_text
from dataprep.synthetic import SyntheticReport
from tests.dataprep.remote.bucket_files import upload
from tests.remote.fixtures import S3Server


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drawn_lines(text: str) -> list[str]:
    return [line.strip() for line in text.replace("\n", "\r").split("\r") if line.strip()]


@pytest.mark.parametrize(("done", "total", "elapsed_s", "text"), [
    (50, 100, 30.0, "ETA 0:30"), (1, 100, 60.0, "ETA 1:39:00"), (10, 40, 20.0, "ETA 1:00"),
    (0, 100, 5.0, ""), (100, 100, 5.0, ""), (5, None, 5.0, "")])
def test_eta_is_the_time_left_at_the_rate_so_far(done: int, total: int | None, elapsed_s: float, text: str) -> None:
    assert eta_text(done, total, elapsed_s) == text


def test_a_phase_draws_its_counts_rate_and_eta_where_its_total_is_known() -> None:
    stream = _Tty()
    progress = ProgressLine(None, stream=stream, interval_s=0.0)
    progress.begin("walking RAW", None, "entries")
    assert list(counted(range(7), progress)) == list(range(7))
    progress.end()
    progress.begin("mirroring RAW", 4, "files")
    progress.advance(1, 2_000_000)
    lines = _drawn_lines(stream.getvalue())
    walked = [line for line in lines if line.startswith("walking RAW: ")]
    assert walked[-1].startswith("walking RAW: 7 entries") and "entries/s" in walked[-1], lines
    assert "ETA" not in " ".join(walked)  # no total, no ETA
    assert lines[-1].startswith("mirroring RAW: 1/4 files  2.0 MB") and "ETA " in lines[-1], lines
    progress.end()
    progress.update(25, 1, 1000, force=True)
    progress.total = 100
    progress.update(25, 1, 1000, force=True)
    assert "ETA" not in _drawn_lines(stream.getvalue())[-2] and "25/100 inputs" in _drawn_lines(stream.getvalue())[-1]
    assert "ETA " in _drawn_lines(stream.getvalue())[-1]
    progress.close()
    assert stream.getvalue().count("\n") == 1  # one line, redrawn in place


def test_verbose_after_the_sub_command_draws_the_phases_on_stderr(
        synthetic: SyntheticReport, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = os.fspath(synthetic.root / "images")
    assert main(["shard", raw, os.fspath(tmp_path / "quiet"), "--workers", "1"]) == 0
    assert capsys.readouterr().err == ""  # not a terminal: nothing unless asked
    assert main(["shard", raw, os.fspath(tmp_path / "out"), "--workers", "1", "-v"]) == 0
    lines = _drawn_lines(capsys.readouterr().err)
    walked = [line for line in lines if line.startswith("walking RAW: ")][-1]
    entries = int(walked.split()[2].replace(",", ""))
    assert entries > 0
    assert any(line.startswith(f"planning: {entries:,}/{entries:,} entries") for line in lines), lines
    inputs = [line for line in lines if " inputs " in line and "samples/s" in line]
    assert inputs and "rejects" in inputs[-1], lines
    # A rerun over the finished OUT walks RAW (is it unchanged?) and ends that line before its summary.
    assert main(["-v", "shard", raw, os.fspath(tmp_path / "out"), "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert "already complete" in captured.out
    assert captured.err.startswith("\rwalking RAW: ") and captured.err.endswith("\n") and captured.err.count("\n") == 1


def test_a_remote_raw_is_listed_and_mirrored_with_progress(
        cli, synthetic: SyntheticReport, s3_env: str, s3_server: S3Server, bucket: str, tmp_path: Path) -> None:
    tables = synthetic.root / "tables"
    upload(s3_server.endpoint, bucket, "raw", tables)
    files = sum(1 for path in tables.rglob("*") if path.is_file())
    res = cli("shard", f"s3://{bucket}/raw", tmp_path / "out", "-v", "--workers", "1", "--staging", tmp_path / "st")
    assert res.rc == 0, res.text
    lines = _drawn_lines(res.err)
    assert any(line.startswith(f"listing RAW: {files} objects") for line in lines), lines
    assert any(line.startswith(f"mirroring RAW: {files}/{files} files") and "MB" in line for line in lines), lines
