"""2. Reruns with other options (refused or the new output, never a mix), and the reject budget."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.dataprep.helpers import (MANIFEST, assert_accounted, assert_same_output, image_tree, interrupted_run,
                                    kill_tree, kill_when, output_bytes, read_output, read_rejects, run_in,
                                    shards_at_least, verify_ok, write_text)

OPTION_CHANGES = [
    pytest.param(("--samples-per-shard", "1"), "samples-per-shard", id="samples-per-shard"),
    pytest.param(("--shard-size", "3KiB"), "shard-size", id="shard-size"),
    pytest.param(("--resize-short", "32"), "resize-short", id="resize-short"),
    pytest.param(("--format", "parquet"), "format", id="format"),
    pytest.param(("--seed", "7"), "seed", id="seed"),
    pytest.param(("--no-shuffle",), "no-shuffle", id="no-shuffle"),
]


@pytest.mark.parametrize(("change", "flag"), OPTION_CHANGES)
def test_rerun_finished_out_with_another_option(cli, tmp_path: Path, change: tuple[str, ...], flag: str) -> None:
    raw = tmp_path / "raw"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=1, size=(64, 48))
    base = ("--workers", "1", "--samples-per-shard", "2")
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    assert cli("shard", raw, out, *base).rc == 0
    first = output_bytes(out)
    res = cli("shard", raw, out, *base, *change)
    if res.rc == 0:  # accepted: must be the output of the new options, not a mix
        assert cli("shard", raw, fresh, *base, *change).rc == 0
        assert_same_output(out, fresh, drop_manifest_keys=("command",))
        assert_accounted(read_output(out), inputs)
    else:
        assert res.rc == 2, res.text
        assert "--overwrite" in res.err, res.err
        assert output_bytes(out) == first, "a refused rerun changed the finished output"
        assert verify_ok(cli, out)
    res = cli("shard", raw, out, *base, *change, "--overwrite")
    assert res.rc == 0, res.text
    assert cli("shard", raw, fresh, *base, *change, "--overwrite").rc == 0
    assert_same_output(out, fresh, drop_manifest_keys=("command",))


@pytest.mark.parametrize(("change", "flag"), OPTION_CHANGES)
def test_refusal_names_the_option_as_the_user_typed_it(cli, tmp_path: Path, change: tuple[str, ...], flag: str) -> None:
    """The rerun is refused, and the message names the CLI flag that differs (not an internal field name) and
    the way out."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 2})
    base = ("--workers", "1", "--samples-per-shard", "2")
    assert cli("shard", raw, out, *base).rc == 0
    res = cli("shard", raw, out, *base, *change)
    # Accepting it would be the regression: a finished OUT made with other options is refused, never redone.
    assert res.rc == 2, f"a rerun with {' '.join(change)} over a finished OUT was not refused: {res.text}"
    assert f"--{flag}" in res.err and "--overwrite" in res.err, res.err


@pytest.mark.slow
@pytest.mark.parametrize(("change", "flag"), OPTION_CHANGES[:4])
def test_rerun_interrupted_out_with_another_option(cli, tmp_path: Path, change: tuple[str, ...], flag: str) -> None:
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = interrupted_run(tmp_path, args)
    before = output_bytes(run / "out")
    res = run_in(cli, (*args, *change), run)
    if res.rc == 0:  # accepted: exactly the output of the new options
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        assert run_in(cli, (*args, *change), fresh).rc == 0
        assert_same_output(run / "out", fresh / "out")
        return
    assert res.rc == 2 and "--overwrite" in res.err, res.text
    assert output_bytes(run / "out") == before, "a refused rerun changed the interrupted output"
    # the original command still resumes to the uninterrupted result
    assert run_in(cli, args, run).rc == 0
    ref = tmp_path / "ref"
    ref.mkdir()
    assert run_in(cli, args, ref).rc == 0
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)


def test_rerun_same_command_is_a_noop(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 2}, broken=1)
    args = ("shard", raw, out, "--workers", "1")
    assert cli(*args).rc == 0
    first = output_bytes(out)
    assert cli(*args).rc == 0
    assert output_bytes(out) == first


def test_rerun_with_other_spellings_of_the_same_paths_is_a_noop(cli, tmp_path: Path) -> None:
    """Tab completion adds a slash, a script uses ./ or an absolute path or a link: the same RAW and OUT."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 2})
    os.symlink(raw, tmp_path / "raw_link")
    (tmp_path / "sub").mkdir()
    assert run_in(cli, ("shard", "raw", "out", "--workers", "1"), tmp_path).rc == 0
    first = output_bytes(out, drop_manifest_keys=("command",))
    for cwd, raw_arg, out_arg in ((tmp_path, "raw/", "out/"), (tmp_path, "./raw", "./out"), (tmp_path, str(raw), "out"),
                                  (tmp_path, "raw_link", "out"), (tmp_path / "sub", "../raw", "../out")):
        res = run_in(cli, ("shard", raw_arg, out_arg, "--workers", "1"), cwd)
        assert res.rc == 0 and "already complete" in res.out, (raw_arg, out_arg, res.text)
        assert output_bytes(out, drop_manifest_keys=("command",)) == first


def test_rerun_with_options_that_do_not_shape_output_is_a_noop(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 2}, broken=1)
    args = ("shard", raw, out, "--workers", "1", "--samples-per-shard", "2")
    assert cli(*args).rc == 0
    first = output_bytes(out, drop_manifest_keys=("command",))
    for extra in (("--json",), ("--no-progress",), ("--workers", "2"), ("--max-reject-fraction", "0.9"),
                  ("--allow-empty",)):
        res = cli(*args, *extra)
        assert res.rc == 0, (extra, res.text)
        assert output_bytes(out, drop_manifest_keys=("command",)) == first, extra
    res = cli(*args, "--json")
    assert json.loads(res.out)["totals"]["samples_kept"] == 4


def test_reject_budget_then_rerun_with_higher_fraction(cli, tmp_path: Path) -> None:
    """Stopped by --max-reject-fraction, rerun with a larger one: valid JSONL, each reject once."""
    raw = tmp_path / "raw"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=3)
    base = ("--workers", "1", "--samples-per-shard", "2")
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    res = cli("shard", raw, out, *base, "--max-reject-fraction", "0.1")
    assert res.rc == 1, res.text
    assert "reject" in res.err and "0.1" in res.err, res.err
    assert not (out / MANIFEST).exists(), "a run over its reject budget left a manifest"
    assert not verify_ok(cli, out)
    assert len(read_rejects(out)) == 3, "the failed run's rejects report is there to read"
    # the same command again still fails: it is not 'finished'
    res = cli("shard", raw, out, *base, "--max-reject-fraction", "0.1")
    assert res.rc == 1, res.text
    res = cli("shard", raw, out, *base, "--max-reject-fraction", "0.5")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, inputs)
    assert cli("shard", raw, fresh, *base, "--max-reject-fraction", "0.5").rc == 0
    assert_same_output(out, fresh, drop_manifest_keys=("command",))


@pytest.mark.slow
def test_reject_budget_run_killed_then_rerun_with_higher_fraction(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    inputs = kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "2", "--samples-per-shard", "3", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, (*args, "--max-reject-fraction", "0.5"), ref).rc == 0
    assert kill_when((*args, "--max-reject-fraction", "0.01"), run, shards_at_least(run / "out", 4))
    res = run_in(cli, (*args, "--max-reject-fraction", "0.01"), run)
    assert res.rc == 1 and "0.01" in res.err, res.text
    assert len(read_rejects(run / "out")) == 3
    res = run_in(cli, (*args, "--max-reject-fraction", "0.5"), run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out", drop_manifest_keys=("command",))
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.parametrize(("fraction", "rc"), [("0.25", 0), ("0.249", 1), ("0", 1), ("1", 0)])
def test_reject_budget_boundary(cli, tmp_path: Path, fraction: str, rc: int) -> None:
    """1 reject in 4 inputs: "more than F" fails; exactly F does not."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 1}, broken=1)
    res = cli("shard", raw, out, "--workers", "1", "--max-reject-fraction", fraction)
    assert res.rc == rc, res.text
    assert (out / MANIFEST).exists() == (rc == 0)
    assert len(read_rejects(out)) == 1


def test_stricter_reject_budget_on_a_finished_out_fails_like_a_fresh_run(cli, tmp_path: Path) -> None:
    """`dataprep shard raw out --max-reject-fraction 0.01 && train`: the exit status must not depend on whether
    OUT was already finished (a fresh run exits 1 here; "already complete" with exit 0 lets the script train)."""
    raw = tmp_path / "raw"
    image_tree(raw, {"cat": 2, "dog": 2}, broken=1)
    base = ("--workers", "1")
    assert cli("shard", raw, tmp_path / "fresh", *base, "--max-reject-fraction", "0.01").rc == 1
    out = tmp_path / "out"
    assert cli("shard", raw, out, *base).rc == 0
    first = output_bytes(out)
    res = cli("shard", raw, out, *base, "--max-reject-fraction", "0.01")
    assert res.rc == 1, f"exit {res.rc} over a budget a fresh run fails: {res.text}"
    assert "0.01" in res.err, res.err
    assert output_bytes(out) == first


def test_empty_output_rerun_without_allow_empty_fails_like_a_fresh_run(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    for i in range(3):
        write_text(raw / "cat" / f"{i}.jpg", b"garbage" * (i + 1))
    assert cli("shard", raw, out, "--workers", "1", "--allow-empty").rc == 0
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 1 and "--allow-empty" in res.err, f"exit {res.rc} with no sample kept: {res.text}"


def test_reject_budget_tables_then_rerun(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    rows = ["id,name"] + [f"{i},n{i}" if i % 2 else f"x{i},n{i}" for i in range(1, 11)]
    write_text(raw / "t.csv", "\n".join(rows) + "\n")
    base = ("--workers", "1", "--samples-per-shard", "2", "--schema", '{"id": "int64", "name": "string"}')
    out = tmp_path / "out"
    assert cli("shard", raw, out, *base, "--max-reject-fraction", "0.2").rc == 1
    res = cli("shard", raw, out, *base, "--max-reject-fraction", "0.6")
    assert res.rc == 0, res.text
    assert_accounted(read_output(out), [("t.csv", i) for i in range(1, 11)])
