"""tools.bench.token_bench: single core vs threads, processes and the library's threads on the same text; its output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench import token_bench
from tools.bench.token_bench import TARGET_EFFICIENCY, TokenBenchReport, format_report, measure
from tools.common.report import ToolError

pytest.importorskip("tokenizers")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def report() -> TokenBenchReport:
    return measure(mb=0.3, vocab=400, threads=2, batch_docs=32)


def test_every_row_tokenizes_the_same_text_into_the_same_tokens(report: TokenBenchReport) -> None:
    assert [row.name.split(":")[0] for row in report.rows] == ["single core", "threads", "processes", "library threads"]
    assert report.same_tokens and len({row.tokens for row in report.rows}) == 1
    assert report.documents > 32 and report.input_bytes >= 300_000
    assert (report.vocab_size, report.dtype, report.threads, report.batch_docs) == (400, "uint16", 2, 32)
    assert all(row.seconds > 0 for row in report.rows)
    assert 0 < report.gil_share < 1


def test_rates_and_efficiency_are_consistent(report: TokenBenchReport) -> None:
    single, threads = report.rows[0], report.rows[1]
    mb_s, tokens_s = report.rate(threads)
    assert mb_s == pytest.approx(report.input_bytes / 1e6 / threads.seconds)
    assert tokens_s == pytest.approx(threads.tokens / threads.seconds)
    assert report.threads_efficiency == pytest.approx(single.seconds / threads.seconds / 2)
    assert report.meets_target == (report.threads_efficiency >= TARGET_EFFICIENCY)
    assert all(row.cpu_s > 0 for row in report.rows)
    assert report.cpu_efficiency(threads) == pytest.approx(single.cpu_s / threads.cpu_s)


def test_the_table_shows_mb_and_tokens_side_by_side_and_the_verdict(report: TokenBenchReport) -> None:
    text = format_report(report)
    header = next(line for line in text.splitlines() if line.startswith("run"))
    assert header.index("MB/s") < header.index("tokens/s")
    assert "ideal: single core x 2" in text and "TokenEncoder(2)" in text
    assert ("meets" if report.meets_target else "BELOW") in text and f"{TARGET_EFFICIENCY:.0%} target" in text
    assert "same tokens in every row: yes" in text and "gil share" in text and "CPU eff." in text


def test_the_library_row_leaves_the_environment_as_it_was(report: TokenBenchReport) -> None:
    assert os.environ.get("RAYON_NUM_THREADS") is None
    assert os.environ.get("TOKENIZERS_PARALLELISM") in (None, "false")


def test_bare_json_prints_only_json(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "tools.bench.token_bench", "--mb", "0.1", "--vocab", "300", "--threads", "2",
               "--batch-docs", "16"]
    done = subprocess.run([*command, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["tool"] == "token_bench" and doc["results"]["same_tokens"] is True
    row = doc["results"]["rows"][1]
    assert {"name", "seconds", "tokens", "cpu_s", "mb_s", "tokens_s", "efficiency", "cpu_efficiency"} <= row.keys()
    helped = subprocess.run([sys.executable, "-m", "tools.bench.token_bench", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert "--json [PATH]" in " ".join(helped.stdout.split())


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mb": 0}, "'mb' must be a number"),
    ({"vocab": 100}, "'vocab' must be an int >= 300"),
    ({"threads": 0}, "'threads' must be a positive int"),
    ({"batch_docs": 0}, "'batch_docs' must be a positive int"),
])
def test_bad_arguments_are_tool_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ToolError, match=message):
        measure(**kwargs)  # type: ignore[arg-type]


def test_main_reports_a_bad_argument_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert token_bench.main(["--vocab", "10"]) == 2
    assert "token_bench: 'vocab' must be an int >= 300" in capsys.readouterr().err
