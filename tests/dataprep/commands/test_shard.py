"""``dataprep shard``, the command, end to end: reruns, usage errors, budgets, defaults; ``verify`` and ``info``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dataprep.cli import main
from dataprep.formats.manifest import read_manifest
from tests.dataprep.helpers import REPO, read_rejects, shard_cli


def test_rerun_is_a_no_op_and_other_command_is_refused(image_tree, tmp_path, capsys):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--workers", "1") == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert shard_cli(image_tree, out, "--workers", "1") == 0
    assert "already complete" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert shard_cli(image_tree, out, "--workers", "1", "--seed", "7") == 2
    assert "--overwrite" in capsys.readouterr().err
    assert shard_cli(image_tree, out, "--workers", "1", "--seed", "7", "--overwrite") == 0
    assert read_manifest(out).options["seed"] == 7


def test_usage_errors_exit_2(tmp_path, capsys):
    assert shard_cli(tmp_path / "missing", tmp_path / "out") == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        shard_cli(tmp_path, tmp_path / "out", "--shard-size", "lots")
    assert exc.value.code == 2
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.jpg").write_bytes(b"")
    assert shard_cli(tmp_path / "raw", tmp_path / "raw" / "out") == 2


def test_reject_budget_fails_without_manifest_and_a_rerun_with_more_budget_finishes(image_tree, tmp_path, capsys):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--workers", "1", "--max-reject-fraction", "0.01") == 1
    assert "max-reject-fraction" in capsys.readouterr().err
    assert not (out / "manifest.json").exists()
    stopped = (out / "rejects.jsonl").read_bytes()
    assert shard_cli(image_tree, out, "--workers", "1", "--max-reject-fraction", "0.9") == 0
    assert b"\0" not in (out / "rejects.jsonl").read_bytes()
    assert (out / "rejects.jsonl").read_bytes() == stopped
    assert len(read_rejects(out)) == read_manifest(out).totals.rejected
    assert main(["verify", os.fspath(out)]) == 0


def test_verify_and_info_cli(image_tree, tmp_path, capsys):
    out = tmp_path / "out"
    assert shard_cli(image_tree, out, "--workers", "1", "--shard-size", "1MB") == 0
    assert main(["verify", os.fspath(out)]) == 0
    assert main(["info", os.fspath(out), "--json"]) == 0
    capsys.readouterr()
    shard = out / read_manifest(out).shards[1].name
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert main(["verify", os.fspath(out)]) == 1
    assert shard.name in capsys.readouterr().out


def test_a_run_that_keeps_nothing_fails_unless_allowed(tmp_path, capsys):
    raw = tmp_path / "raw"
    (raw / "cat").mkdir(parents=True)
    (raw / "cat" / "a.jpg").write_bytes(b"")
    (raw / "cat" / "b.jpg").write_bytes(b"\xff\xd8 broken")
    out = tmp_path / "out"
    assert shard_cli(raw, out, "--workers", "1") == 1
    err = capsys.readouterr().err
    assert "no sample was kept" in err and "empty_file 1" in err and "--allow-empty" in err
    assert not (out / "manifest.json").exists()
    assert shard_cli(raw, out, "--workers", "1", "--allow-empty") == 0  # resumes at the end, nothing redone
    assert read_manifest(out).totals.rejected == 2


def test_default_shard_size_is_one_unit_everywhere(tmp_path):
    from dataprep.cli import build_parser, config_from_args
    from dataprep.commands.config import ShardConfig
    from dataprep.formats.writer import DEFAULT_MAX_SHARD_BYTES

    args = build_parser().parse_args(["shard", os.fspath(tmp_path), os.fspath(tmp_path / "out")])
    from_cli = config_from_args(args).max_shard_bytes
    assert from_cli == DEFAULT_MAX_SHARD_BYTES == ShardConfig(tmp_path, tmp_path).max_shard_bytes
    assert from_cli == 256 * 2**20
    assert "(default: 256MiB" in build_parser()._subparsers._group_actions[0].choices["shard"].format_help()


_LOCAL_RUN_IMPORTS = """
import sys
from dataprep.cli import main
assert main(["shard", *sys.argv[1:]]) == 0
heavy = ("dataprep.remote", "dataprep.engines.ray", "dataprep.engines.range", "ray", "obstore")
loaded = sorted(m for m in sys.modules if m.startswith(heavy))
print("LOADED:" + " ".join(loaded))
"""


def test_a_local_run_imports_neither_the_ray_engine_nor_the_remote_client(tmp_path):
    """The cost of a local run's imports (issue 26): Ray's engine and the object-store client load only when asked."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jsonl").write_text('{"x": 1}\n{"x": 2}\n')
    done = subprocess.run([sys.executable, "-c", _LOCAL_RUN_IMPORTS, os.fspath(raw), os.fspath(tmp_path / "out"),
                           "--workers", "1", "--no-progress"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "LOADED:", done.stdout
