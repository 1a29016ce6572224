"""8. ``verify`` never says OK on wrong output, ``index`` refuses a shard output, bad options are named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.dataprep.helpers import (MANIFEST, REJECTS, assert_accounted, finished_out, interrupted_run, kill_tree,
                                    read_output, run_in, snapshot, verify_ok, write_text)


def _flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


TAMPERING = {
    "shard-byte": lambda out: _flip_byte(sorted(out.glob("*.tar"))[1], 1000),
    "shard-deleted": lambda out: sorted(out.glob("*.tar"))[0].unlink(),
    "shard-truncated": lambda out: os.truncate(sorted(out.glob("*.tar"))[0], 1024),
    "index-byte": lambda out: _flip_byte(sorted(out.glob("*.idx"))[0], 80),
    "index-deleted": lambda out: sorted(out.glob("*.idx"))[0].unlink(),
    "reject-line-removed": lambda out: (out / REJECTS).write_text(
        "".join((out / REJECTS).read_text().splitlines(keepends=True)[1:])),
    "rejects-deleted": lambda out: (out / REJECTS).unlink(),
    "manifest-count": lambda out: (out / MANIFEST).write_text(
        (out / MANIFEST).read_text().replace('"num_samples": 2', '"num_samples": 3', 1)),
    "rejects-nul-padded": lambda out: (out / REJECTS).write_bytes((out / REJECTS).read_bytes() + b"\x00" * 300),
    "reject-line-doubled": lambda out: (out / REJECTS).write_text(
        (out / REJECTS).read_text() + (out / REJECTS).read_text().splitlines(keepends=True)[0]),
    "stray-shard-copy": lambda out: (out / "shard-00000-000099.tar").write_bytes(
        sorted(out.glob("*.tar"))[0].read_bytes()),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERING))
def test_verify_catches_tampering(cli, tmp_path: Path, tamper: str) -> None:
    out = finished_out(cli, tmp_path)
    TAMPERING[tamper](out)
    res = cli("verify", out)
    assert res.rc == 1, res.text
    assert "FAILED" in res.out or res.err.strip(), res.text


@pytest.mark.slow
def test_index_refuses_an_interrupted_shard_run(cli, tmp_path: Path) -> None:
    """`dataprep index` over a killed `dataprep shard` OUT must not adopt its partial shards as a complete
    dataset (verify would then say OK on a fraction of the samples, and the shard run could not resume)."""
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = interrupted_run(tmp_path, args)
    res = run_in(cli, ("index", "out"), run)
    assert res.rc != 0, f"index adopted an unfinished shard run: {res.text}"
    assert "dataprep shard" in res.err or "rerun" in res.err, res.err
    assert not verify_ok(cli, run / "out")
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_accounted(read_output(run / "out"), inputs)


def test_index_refuses_a_finished_shard_output(cli, tmp_path: Path) -> None:
    out = finished_out(cli, tmp_path)
    before = snapshot(out)
    res = cli("index", out)
    assert res.rc != 0 and "manifest" in res.err, res.text
    assert snapshot(out) == before


@pytest.mark.slow
def test_verify_and_info_on_an_interrupted_out(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = interrupted_run(tmp_path, args)
    for command in ("verify", "info"):
        res = cli(command, run / "out")
        assert res.rc != 0, res.text
        assert "did not finish" in res.err or "rerun" in res.err, res.err


@pytest.mark.parametrize(("option", "value"), [
    ("--shard-size", "0"), ("--shard-size", "12 parsecs"), ("--samples-per-shard", "0"), ("--workers", "0"),
    ("--max-reject-fraction", "1.5"), ("--max-reject-fraction", "-0.1"), ("--quality", "0"), ("--quality", "101"),
    ("--resize-short", "-5"), ("--row-group-size", "0"), ("--range-size", "0"), ("--schema", "{not json"),
    ("--schema", "@/nonexistent/schema.json"), ("--schema", '{"id": "complex128"}'), ("--prefix", "../evil"),
    ("--prefix", "a/b"), ("--prefix", ""),
])
def test_bad_option_values_are_named(cli, tmp_path: Path, option: str, value: str) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "t.csv", "id\n1\n")
    res = cli("shard", raw, out, "--workers", "1", f"{option}={value}")
    assert res.rc == 2, res.text
    assert option in res.err or option.lstrip("-").replace("-", "_") in res.err, res.err
    assert not (out / MANIFEST).exists()
    assert not (tmp_path / "evil").exists() and not any(tmp_path.glob("*evil*"))
