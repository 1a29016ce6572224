"""tools.profile.disk: passes over tiny tar shards and a raw tree, JSON fields, cache dropping, byte-exact reads."""

from __future__ import annotations

import io
import json
import os
import random
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from dataprep.errors import FormatError
from dataprep.formats.tar.index import index_path_for, index_tar, read_index, write_index
from dataprep.formats.manifest import Manifest, ShardInfo, Totals, sha256_file, write_manifest
from tools.common.pagecache import device_of, drop_cache, resident_fraction
from tools.common.report import Progress, ToolError, format_table
from tools.profile import disk
from tools.profile.disk_reads import DiskReport, iter_sample_reads, measure_disk, pick_samples

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="page cache control and /proc are Linux-only")


def make_dataset(root: Path, shards: int = 3, per_shard: int = 12) -> tuple[Path, Path]:
    """Tar shards with index sidecars and a manifest in root/shards; the same samples as files in root/raw."""
    shard_dir, raw_dir = root / "shards", root / "raw"
    shard_dir.mkdir()
    (raw_dir / "sub").mkdir(parents=True)
    data_rng = random.Random(0)
    infos = []
    for s in range(shards):
        path = shard_dir / f"shard-{s:06d}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(per_shard):
                key, jpg = f"s{s}_{i:03d}", data_rng.randbytes(data_rng.randint(100, 9000))
                (raw_dir / ("sub" if i % 2 else "") / f"{key}.jpg").write_bytes(jpg)
                for field, payload in (("jpg", jpg), ("cls", str(i % 3).encode())):
                    member = tarfile.TarInfo(f"{key}.{field}")
                    member.size = len(payload)
                    tar.addfile(member, io.BytesIO(payload))
        index = index_tar(path)
        write_index(index_path_for(path), index)
        infos.append(ShardInfo(path.name, index.num_samples, path.stat().st_size, sha256_file(path),
                               index_path_for(path).name, index.fields))
    total = shards * per_shard
    write_manifest(shard_dir, Manifest("wds", "image-folder", tuple(infos), Totals(total, total, 0)))
    return shard_dir, raw_dir


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[Path, Path]:
    return make_dataset(tmp_path)


@linux_only
def test_measures_every_pass_with_positive_figures(dataset: tuple[Path, Path]) -> None:
    shard_dir, raw_dir = dataset
    report = measure_disk(shard_dir, raw_dir=raw_dir, random_samples=10, block_size=4096)
    kinds = [(p.source, p.pattern, p.cache) for p in report.passes]
    assert kinds == [(src, pat, cache) for src in ("shards", "raw") for pat in ("sequential", "random")
                     for cache in ("cold", "warm")]
    assert (report.num_shards, report.num_samples, report.raw_files) == (3, 36, 36)
    assert report.shard_bytes == sum(p.stat().st_size for p in shard_dir.glob("*.tar"))
    for p in report.passes:
        assert p.seconds > 0 and p.read_mib_s > 0 and p.samples_per_s > 0
    seq = report.find("shards", "sequential", "cold")
    assert seq is not None and seq.bytes == report.shard_bytes and seq.samples == 36
    rnd = report.find("shards", "random", "warm")
    assert rnd is not None and rnd.samples == 10
    raw_seq = report.find("raw", "sequential", "warm")
    assert raw_seq is not None and raw_seq.bytes == report.raw_bytes
    assert set(report.ratios()) == {"sequential_cold", "sequential_warm", "random_cold", "random_warm"}


@linux_only
def test_json_has_the_documented_fields(dataset: tuple[Path, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    shard_dir, raw_dir = dataset
    out = tmp_path / "disk.json"
    assert disk.main([str(shard_dir), "--raw", str(raw_dir), "--random-samples", "5", "--block-size", "64KiB",
                      "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "shards / raw" in printed and "MiB/s" in printed
    doc = json.loads(out.read_text())
    assert doc["version"] == 1 and doc["tool"] == "disk"
    assert ({"hostname", "cpu_model", "cores_available", "memory_bytes", "python", "torch", "pillow"}
            <= set(doc["machine"]))
    results = doc["results"]
    assert results["block_size"] == 65536 and results["random_samples"] == 5
    assert {"fs_type", "mount_point", "block_device", "rotational", "dev"} <= set(results["device"])
    assert ({"source", "pattern", "cache", "bytes", "seconds", "read_mib_s", "samples_per_s", "resident_before"}
            <= set(results["passes"][0]))
    assert len(results["passes"]) == 8 and results["ratios"] and results["notes"]


def test_json_to_stdout_is_only_json(dataset: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    shard_dir, _ = dataset
    assert disk.main([str(shard_dir), "--no-cold", "--random-samples", "3", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert ([(p["pattern"], p["cache"]) for p in doc["results"]["passes"]]
            == [("sequential", "warm"), ("random", "warm")])


def test_random_reads_return_the_indexed_bytes(dataset: tuple[Path, Path]) -> None:
    shard_dir, _ = dataset
    shards = [(p, read_index(index_path_for(p))) for p in sorted(shard_dir.glob("*.tar"))]
    picks = pick_samples([ix.num_samples for _, ix in shards], 1000, seed=3)
    assert len(picks) == 36  # capped at the dataset size, each sample once
    seen = set()
    for shard_i, sample_i, data in iter_sample_reads(shards, picks):
        path, index = shards[shard_i]
        blob = path.read_bytes()
        offset, size = int(index.sample_offset[sample_i]), int(index.sample_size[sample_i])
        assert data == blob[offset : offset + size]
        jpg_offset, jpg_size = index.sample_fields(sample_i)["jpg"]
        expected = next((shard_dir.parent / "raw").rglob(f"{index.key(sample_i)}.jpg")).read_bytes()
        assert data[jpg_offset - offset : jpg_offset - offset + jpg_size] == expected
        seen.add((shard_i, sample_i))
    assert len(seen) == 36


def test_pick_samples_is_deterministic_and_distinct() -> None:
    a, b = pick_samples([5, 0, 7], 8, seed=1), pick_samples([5, 0, 7], 8, seed=1)
    assert np.array_equal(a, b) and a.dtype == np.int64 and a.shape == (8, 2)
    assert len({tuple(r) for r in a.tolist()}) == 8
    assert all((s == 0 and i < 5) or (s == 2 and i < 7) for s, i in a.tolist())
    assert not np.array_equal(a, pick_samples([5, 0, 7], 8, seed=2))


def test_truncated_shard_is_reported_with_shard_key_and_offset(dataset: tuple[Path, Path]) -> None:
    shard_dir, _ = dataset
    path = shard_dir / "shard-000000.tar"
    index = read_index(index_path_for(path))
    last = index.num_samples - 1
    os.truncate(path, int(index.sample_offset[last]) + 10)
    offset = int(index.sample_offset[last])
    with pytest.raises(FormatError, match=rf"shard-000000.tar: sample 's0_{last:03d}' at byte offset {offset}"):
        list(iter_sample_reads([(path, index)], np.array([[0, last]])))
    with pytest.raises(FormatError, match="stale index"):
        measure_disk(shard_dir, cold=False)


@linux_only
def test_drop_cache_needs_no_root_and_empties_the_cache(dataset: tuple[Path, Path]) -> None:
    shard_dir, _ = dataset
    files = sorted(shard_dir.glob("*.tar"))
    for f in files:
        f.read_bytes()
    drop_cache(files)  # must not raise without root
    after_drop = resident_fraction(files)
    if after_drop is None:
        pytest.skip("mincore unavailable")
    for f in files:
        f.read_bytes()
    assert resident_fraction(files) == 1.0
    if device_of(shard_dir).fs_type not in ("tmpfs", "ramfs"):  # there the cache is the storage
        assert after_drop < 0.5


@linux_only
def test_device_of_names_mount_and_fs(tmp_path: Path) -> None:
    info = device_of(tmp_path)
    assert info.path == os.path.realpath(tmp_path)
    assert info.mount_point is not None and info.path.startswith(info.mount_point.rstrip("/"))
    assert info.fs_type != "unknown" and ":" in info.dev
    assert info.rotational in (True, False, None)
    assert device_of("/proc").fs_type == "proc" and device_of("/proc").block_device is None


def test_bad_arguments_and_missing_manifest(dataset: tuple[Path, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    shard_dir, _ = dataset
    with pytest.raises(ToolError, match="'block_size' must be a positive int \\(got 0 that is a int\\)"):
        measure_disk(shard_dir, block_size=0)
    with pytest.raises(ToolError, match="'random_samples' must be a non-negative int"):
        measure_disk(shard_dir, random_samples=-1)
    assert disk.main([str(tmp_path / "nothing")]) == 2
    assert "no manifest" in capsys.readouterr().err


def test_plot_without_matplotlib_fails_before_measuring(dataset: tuple[Path, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    shard_dir, _ = dataset
    png = tmp_path / "disk.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert disk.main([str(shard_dir), "--no-cold", "--plot", str(png)]) == 2
        captured = capsys.readouterr()
        assert "matplotlib" in captured.err and captured.out == ""
        return
    assert disk.main([str(shard_dir), "--no-cold", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_round_trips_through_json(dataset: tuple[Path, Path]) -> None:
    shard_dir, _ = dataset
    report = measure_disk(shard_dir, random_samples=0, cold=False)
    assert isinstance(report, DiskReport) and [p.pattern for p in report.passes] == ["sequential"]
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["passes"][0]["bytes"] == report.shard_bytes and doc["ratios"] == {}


# tools.common.report is exercised here too: it has no test module of its own.


def test_format_table_aligns_numbers_right_and_text_left() -> None:
    table = format_table(("source", "MiB/s"), [("shards", 1234.5), ("raw", None), ("x", 0.25)],
                         title="reads").splitlines()
    assert table[0] == "reads"
    assert table[1:] == ["source  MiB/s", "------  -----", "shards  1,234", "raw         -", "x        0.25"]


class FakeTerminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_progress_draws_only_on_a_terminal_and_erases_itself(tty: bool) -> None:
    stream = FakeTerminal(tty)
    with Progress("reading", total=10, stream=stream) as progress:
        progress.update(3)
    assert ("reading: 3/10" in stream.getvalue()) is tty
    assert stream.getvalue().endswith("\r\x1b[K") if tty else stream.getvalue() == ""
