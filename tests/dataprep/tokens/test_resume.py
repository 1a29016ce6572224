"""Token runs killed with SIGKILL and resumed (byte-identical), ``--overwrite``, and a resume with another tokenizer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.dataprep.helpers import (KILL_POINTS, LATE_KILL_POINTS, MANIFEST, STATE_DIR, assert_same_output,
                                    interrupted_run, kill_when, run_in, verify_ok)
from tests.dataprep.token_samples import TokenCorpus, megatron_documents

pytest.importorskip("megatron.core.datasets.indexed_dataset")

RUN = ("--samples-per-shard", "7", "--workers", "2", "--no-progress")
RANGES = {"one-range": (), "many-ranges": ("--range-size", "96KiB")}


def token_args(corpus: TokenCorpus, layout: str, *extra: object) -> tuple[object, ...]:
    return ("shard", corpus.folder(layout), "out", "--tokenizer", corpus.tokenizer, *RUN, *extra)


def reference(cli, tmp_path: Path, args: tuple[object, ...]) -> Path:
    """``tmp_path/ref/out``: the uninterrupted run of ``args``."""
    ref = tmp_path / "ref"
    ref.mkdir()
    res = run_in(cli, args, ref)
    assert res.rc == 0, res.text
    return ref / "out"


@pytest.mark.slow
@pytest.mark.parametrize("ranges", sorted(RANGES))
@pytest.mark.parametrize("layout", ["text", "jsonl"])
@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_kill9_then_resume_is_byte_identical(cli, tmp_path: Path, corpus: TokenCorpus, layout: str, point: str,
                                             ranges: str) -> None:
    args = token_args(corpus, layout, *RANGES[ranges])
    ref = reference(cli, tmp_path, args)
    run = tmp_path / "run"
    run.mkdir()
    killed = kill_when(args, run, KILL_POINTS[point](run / "out"))
    if point not in LATE_KILL_POINTS:
        assert killed and not (run / "out" / MANIFEST).exists(), f"the run ended before the kill at {point}"
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref)
    assert megatron_documents(run / "out") == megatron_documents(ref)
    assert verify_ok(cli, run / "out")


@pytest.mark.slow
def test_a_bin_without_its_idx_counts_as_not_written(cli, tmp_path: Path, corpus: TokenCorpus) -> None:
    """What a kill between the two renames of a shard leaves (its .bin final, its .idx still temporary) is
    written again on resume, never taken for a shard."""
    args = token_args(corpus, "text")
    ref = reference(cli, tmp_path, args)
    run = interrupted_run(tmp_path, args)
    out = run / "out"
    checkpoint = json.loads((out / STATE_DIR / "checkpoint.json").read_text())
    stem = f"shard-{checkpoint['range']:05d}-{checkpoint['next_shard']:06d}"
    (out / f"{stem}.idx").unlink(missing_ok=True)
    (out / f"{stem}.bin").write_bytes(b"\x01\x00" * 100)  # not the bytes the shard will hold
    (out / f".{stem}.idx.tmp").write_bytes(b"MMIDIDX\x00\x00")
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(out, ref)
    assert verify_ok(cli, out)


@pytest.mark.slow
def test_overwrite_removes_what_a_token_run_left_and_nothing_else(cli, tmp_path: Path, corpus: TokenCorpus) -> None:
    args = token_args(corpus, "jsonl")
    run = interrupted_run(tmp_path, args)
    out = run / "out"
    for name in (".shard-00000-000099.bin.tmp", ".shard-00000-000099.idx.tmp", "shard-00000-000098.bin"):
        (out / name).write_bytes(b"left by a killed run")
    res = run_in(cli, (*args, "--overwrite", "--min-tokens", "20"), run)
    assert res.rc == 0, res.text
    assert not [p.name for p in out.iterdir() if p.name.startswith(".") or "000098" in p.name]
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["options"]["tokens"]["min_tokens"] == 20 and verify_ok(cli, out)
    (out / "notes.bin").write_bytes(b"the user's")
    res = run_in(cli, (*args, "--overwrite"), run)
    assert res.rc == 2 and "notes.bin" in res.err, res.text
    assert (out / "notes.bin").read_bytes() == b"the user's" and (out / MANIFEST).exists()


@pytest.mark.slow
def test_a_resume_with_another_tokenizer_file_is_refused_naming_it(cli, tmp_path: Path,
                                                                   corpus: TokenCorpus) -> None:
    tokenizer = tmp_path / "tokenizer.json"
    shutil.copy(corpus.tokenizer, tokenizer)
    args = ("shard", corpus.folder("text"), "out", "--tokenizer", tokenizer, *RUN)
    ref = reference(cli, tmp_path, args)
    run = interrupted_run(tmp_path, args)
    original = tokenizer.read_bytes()
    tokenizer.write_text(json.dumps(json.loads(original), indent=1))  # the same tokenizer, other bytes
    res = run_in(cli, args, run)
    assert res.rc == 2, res.text
    assert f"--tokenizer {tokenizer} (sha256" in res.err and "--overwrite" in res.err, res.err
    res = run_in(cli, (*args[:3], "--tokenizer", "bytes", *RUN), run)
    assert res.rc == 2 and "--tokenizer bytes" in res.err, res.err
    tokenizer.write_bytes(original)
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref)


def test_a_finished_run_with_another_eos_or_min_tokens_is_other_options(cli, tmp_path: Path,
                                                                        corpus: TokenCorpus) -> None:
    args = token_args(corpus, "lines", "--text-unit", "line")
    ref = reference(cli, tmp_path, args)
    res = run_in(cli, args, tmp_path / "ref")
    assert res.rc == 0 and "already complete" in res.out, res.text
    res = run_in(cli, (*args, "--eos", "<|endoftext|>"), tmp_path / "ref")  # the default, named: the same run
    assert res.rc == 0 and "already complete" in res.out, res.text
    res = run_in(cli, (*args, "--min-tokens", "3"), tmp_path / "ref")
    assert res.rc == 2 and "--min-tokens 1 before, --min-tokens 3 now" in res.err, res.text
    assert verify_ok(cli, ref)
