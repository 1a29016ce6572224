"""tools.bench.pack_bench: its corpus is a real Megatron index, and one small run reports every figure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dataprep.formats.tokens.index import encode_token_index, read_token_index, token_dtype
from tools.bench.pack_bench import main
from tools.common.token_corpus import VOCAB, _lengths, make_corpus


def test_corpus_index_is_the_one_dataprep_writes(tmp_path: Path) -> None:
    make_corpus(tmp_path, 1000, 123_457, 3, seed=1)
    lengths = _lengths(1000, 123_457, 1)
    assert int(lengths.sum()) == 123_457 and int(lengths.min()) >= 1
    bounds = np.linspace(0, 1000, 4).astype(np.int64)
    for s in range(3):
        part = lengths[bounds[s]:bounds[s + 1]]
        assert (tmp_path / f"shard-{s:06d}.idx").read_bytes() == encode_token_index(token_dtype(VOCAB), part)
        assert (tmp_path / f"shard-{s:06d}.bin").stat().st_size == 2 * int(part.sum())
    assert read_token_index(tmp_path / "shard-000001.idx").num_sequences == bounds[2] - bounds[1]


def test_one_small_run_reports_every_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    argv = ["--docs", "2000", "--tokens", "400000", "--shards", "2", "--seq-len", "64", "--batch-size", "4",
            "--batches", "5", "--rounds", "2", "--dir", str(tmp_path), "--json", str(out)]
    assert main(argv) == 0
    results = json.loads(out.read_text())["results"]
    assert results["first_batch_cold"]["total_s"] > 0 and results["first_batch_warm"]["first_batch_s"] > 0
    assert results["memory"]["bytes_per_document"] >= 4.0  # the lengths; fixed costs dominate at 2,000 documents
    for key in ("ours_tokens_per_s", "nanogpt_tokens_per_s", "nanogpt_random_map_tokens_per_s"):
        assert results["steady"][key] > 0
    text = capsys.readouterr().out
    assert "TokenDataset + collate" in text and "nanoGPT get_batch (np.memmap)" in text
    assert main(["--docs", "10", "--tokens", "5"]) == 2
    assert "must be >= --docs" in capsys.readouterr().err
