"""The ``dataprep`` command line as a user meets it: ``--version``, ``-v`` before or after the sub-command, every
option's default in its help, ``--min-side 0``, and ``--workers`` defaulting to the one CPU count."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from PIL import Image

from dataprep import cpus
from dataprep.cli import build_parser, config_from_args, main
from dataprep.cli.help import DefaultsFormatter
from dataprep.formats.manifest import read_manifest


def test_version_is_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"dataprep (shardfeed) {metadata.version('shardfeed')}"


@pytest.mark.parametrize("command", [["shard", "raw", "out"], ["verify", "out"], ["info", "out"], ["index", "d"]])
def test_verbose_is_accepted_before_and_after_the_sub_command(command: list[str]) -> None:
    parser = build_parser()
    assert parser.parse_args([*command]).verbose is False
    assert parser.parse_args(["-v", *command]).verbose is True
    assert parser.parse_args([*command, "-v"]).verbose is True
    assert parser.parse_args([command[0], "--verbose", *command[1:]]).verbose is True


def _sub_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"dataprep": parser, **sub.choices}


def _help_of(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser.formatter_class(parser.prog)
    assert isinstance(formatter, DefaultsFormatter)
    return formatter._expand_help(action)


def test_every_option_has_help_that_states_its_default() -> None:
    missing = []
    for name, parser in _sub_parsers().items():
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            text = _help_of(parser, action) if action.help else ""
            is_flag = isinstance(action, argparse._StoreTrueAction)  # off unless given
            if not text or (action.option_strings and not is_flag and "default" not in text):
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}: {text!r}")
    assert missing == []


def test_shard_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["shard", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "JPEG quality of re-encoded images (default: 95)" in text
    assert "0: no minimum (default: 32)" in text
    assert f"cgroup CPU quota: {cpus.cpus_available()} here)" in text
    assert "or a store URL every node reaches" in text  # --engine ray writes to s3:// too
    assert "(default: 256MiB" in text and "Parquet row group bound (default: 64MiB)" in text


def test_workers_default_to_the_cpu_count_with_the_cgroup_quota(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """A container's quota of 1 CPU on a machine of more: one writer, not one per core of the mask."""
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    (tmp_path / "self").write_text("0::/\n")
    monkeypatch.setattr(cpus, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(cpus, "PROC_SELF_CGROUP", tmp_path / "self")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert build_parser().parse_args(["shard", "raw", "out"]).workers == 1
    assert build_parser().parse_args(["shard", "raw", "out", "--workers", "3"]).workers == 3


def _two_sizes(root: Path) -> Path:
    for name, side in (("big", 64), ("small", 8)):
        (root / "cls").mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (side, side), (200, 30, 90)).save(root / "cls" / f"{name}.jpg", quality=90)
    return root


@pytest.mark.parametrize(("option", "kept"), [([], 1), (["--min-side", "0"], 2), (["--min-side", "9"], 1)])
def test_min_side_zero_means_no_minimum(tmp_path: Path, option: list[str], kept: int) -> None:
    raw, out = _two_sizes(tmp_path / "raw"), tmp_path / "out"
    assert main(["shard", os.fspath(raw), os.fspath(out), "--workers", "1", "--no-progress", *option]) == 0
    assert read_manifest(out).totals.samples_kept == kept


def test_a_negative_min_side_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["shard", "raw", "out", "--min-side", "-1"])
    assert exit_info.value.code == 2 and "must be an integer >= 0 (got -1)" in capsys.readouterr().err
    assert config_from_args(build_parser().parse_args(["shard", "raw", "out", "--min-side", "0"])).image.min_side == 0


def test_a_reader_that_closed_the_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """``dataprep info OUT | head -1``: the reader is gone before the table is written; status 0, nothing on stderr
    (a pipeline under ``set -o pipefail`` goes on)."""
    out = tmp_path / "out"
    assert main(["shard", os.fspath(_two_sizes(tmp_path / "raw")), os.fspath(out), "--workers", "1",
                 "--no-progress"]) == 0
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "dataprep.cli", "info", os.fspath(out)], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (0, "")
