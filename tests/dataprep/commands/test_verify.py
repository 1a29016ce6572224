from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from dataprep.errors import FormatError
from dataprep.formats.tar.index import read_index, write_index
from dataprep.formats.manifest import FORMAT_PARQUET, FORMAT_WDS, Manifest, ShardInfo, Totals, write_manifest
from dataprep.formats.samples import CleanRecord
from dataprep.commands.verify import VerifyReport, count_lines, verify
from dataprep.formats.parquet.writer import ParquetShardWriter
from dataprep.formats.tar.writer import TarShardWriter


def make_output(out: Path, *, rejected: int = 2) -> Manifest:
    """A complete tar output directory: 12 samples in 3 shards, ``rejected`` rejects."""
    shards: list[ShardInfo] = []
    with TarShardWriter(out, max_samples_per_shard=5) as writer:
        for i in range(12):
            shards += writer.write(CleanRecord(f"s{i:03d}", f"raw/{i}.jpg",
                                               {"jpg": bytes([i]) * (700 + i), "cls": str(i % 2).encode()}))
        shards += writer.close()
    lines = [json.dumps({"source": f"bad{i}", "reason": "truncated", "detail": ""}) + "\n" for i in range(rejected)]
    (out / "rejects.jsonl").write_text("".join(lines))
    totals = Totals(12 + rejected, 12, rejected, {"truncated": rejected} if rejected else {})
    manifest = Manifest(FORMAT_WDS, "image-folder", tuple(shards), totals)
    write_manifest(out, manifest)
    return manifest


def test_clean_directory_passes_and_reports_counts(tmp_path: Path) -> None:
    manifest = make_output(tmp_path)
    seen: list[tuple[str, int]] = []
    report = verify(tmp_path, on_shard=lambda name, nbytes: seen.append((name, nbytes)))
    assert report == VerifyReport(3, 12, sum(s.bytes for s in manifest.shards), ())
    assert report.ok
    assert seen == [(s.name, s.bytes) for s in manifest.shards]


def test_flipped_byte_in_a_shard_is_a_problem_naming_it(tmp_path: Path) -> None:
    manifest = make_output(tmp_path)
    victim = tmp_path / manifest.shards[1].name
    data = bytearray(victim.read_bytes())
    data[2000] ^= 0xFF  # inside sample data: headers still parse
    victim.write_bytes(bytes(data))
    report = verify(tmp_path)
    assert not report.ok
    assert len(report.problems) == 1
    assert report.problems[0].startswith("shard-000001.tar: sha256")


def test_truncated_index_is_a_problem(tmp_path: Path) -> None:
    manifest = make_output(tmp_path)
    sidecar = tmp_path / manifest.shards[0].index  # type: ignore[operator]
    sidecar.write_bytes(sidecar.read_bytes()[:-10])
    report = verify(tmp_path)
    assert not report.ok
    assert any(p.startswith("shard-000000.tar: index sidecar") and "truncated" in p for p in report.problems)
    assert verify(tmp_path, check_index=False).ok


def test_edited_index_is_a_problem_naming_key_and_offset(tmp_path: Path) -> None:
    manifest = make_output(tmp_path)
    sidecar = tmp_path / manifest.shards[2].index  # type: ignore[operator]
    index = read_index(sidecar)
    field_offset = index.field_offset.copy()
    field_offset[1, 0] += 512
    write_index(sidecar, dataclasses.replace(index, field_offset=field_offset))
    [problem] = verify(tmp_path).problems
    assert problem.startswith("shard-000002.tar: index entry 1 (key 's011'")
    assert f"offset {int(index.sample_offset[1])}" in problem


def test_index_with_wrong_shard_bytes_is_a_problem(tmp_path: Path) -> None:
    manifest = make_output(tmp_path)
    sidecar = tmp_path / manifest.shards[0].index  # type: ignore[operator]
    index = read_index(sidecar)
    write_index(sidecar, dataclasses.replace(index, shard_bytes=index.shard_bytes + 1))
    [problem] = verify(tmp_path).problems
    assert "shard-000000.tar: index records" in problem


def test_missing_shard_is_a_problem(tmp_path: Path) -> None:
    manifest = make_output(tmp_path)
    (tmp_path / manifest.shards[1].name).unlink()
    report = verify(tmp_path)
    assert report.problems == ("shard-000001.tar: shard missing from " + str(tmp_path),)
    assert report.shards_checked == 2


def test_truncated_shard_reports_size_hash_and_index(tmp_path: Path) -> None:
    manifest = make_output(tmp_path)
    victim = tmp_path / manifest.shards[0].name
    victim.write_bytes(victim.read_bytes()[:-3000])
    problems = verify(tmp_path).problems
    assert all(p.startswith("shard-000000.tar:") for p in problems)
    assert any("bytes on disk" in p for p in problems)
    assert any("sha256" in p for p in problems)


def test_totals_and_rejects_file_are_checked(tmp_path: Path) -> None:
    manifest = make_output(tmp_path)
    write_manifest(tmp_path, dataclasses.replace(manifest, totals=Totals(20, 13, 2, {"truncated": 2})))
    problems = verify(tmp_path).problems
    assert any("inputs_seen 20 != samples_kept 13 + rejected 2" in p for p in problems)
    assert any("samples_kept 13 != 12 samples in the shards" in p for p in problems)
    write_manifest(tmp_path, manifest)
    with open(tmp_path / "rejects.jsonl", "a") as f:
        f.write('{"source": "extra"}')  # no trailing newline: still a line
    assert verify(tmp_path).problems == ("rejects.jsonl: 3 lines, totals.rejected is 2",)


def test_missing_manifest_raises(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="no manifest"):
        verify(tmp_path)


def test_name_escaping_the_directory_is_a_problem(tmp_path: Path) -> None:
    manifest = make_output(tmp_path)
    bad = dataclasses.replace(manifest.shards[0], name="../elsewhere.tar")
    write_manifest(tmp_path, dataclasses.replace(manifest, shards=(bad, *manifest.shards[1:])))
    assert "../elsewhere.tar: shard name is not a plain file name" in verify(tmp_path).problems[0]


def test_parquet_row_count_is_checked(tmp_path: Path) -> None:
    schema = pa.schema([("cls", pa.int64())])
    with ParquetShardWriter(tmp_path, schema=schema, max_samples_per_shard=4) as writer:
        shards = [s for i in range(6) for s in writer.write(CleanRecord(f"r{i}", "t.csv", {"cls": i}))] + writer.close()
    manifest = Manifest(FORMAT_PARQUET, "table", tuple(shards), Totals(6, 6, 0), rejects=None)
    write_manifest(tmp_path, manifest)
    assert verify(tmp_path).ok
    wrong = dataclasses.replace(shards[1], num_samples=3)
    write_manifest(tmp_path, dataclasses.replace(manifest, shards=(shards[0], wrong), totals=Totals(7, 7, 0)))
    assert verify(tmp_path).problems == ("shard-000001.parquet: 2 rows in the file, manifest records 3",)


@pytest.mark.parametrize(("text", "lines"), [(b"", 0), (b"a\n", 1), (b"a\nb", 2), (b"\n\n", 2)])
def test_count_lines(tmp_path: Path, text: bytes, lines: int) -> None:
    (tmp_path / "f").write_bytes(text)
    assert count_lines(tmp_path / "f") == lines


def test_verify_writes_nothing(tmp_path: Path) -> None:
    make_output(tmp_path, rejected=0)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert verify(tmp_path).ok
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_missing_or_edited_rejects_file_is_a_problem(tmp_path: Path) -> None:
    """The rejects file is part of the output: deleted, or with a reason edited, verify says so."""
    make_output(tmp_path, rejected=3)
    rejects = tmp_path / "rejects.jsonl"
    text = rejects.read_text()
    rejects.write_text(text.replace('"truncated"', '"corrupt"', 1))
    assert verify(tmp_path).problems == ("rejects.jsonl: rejects by reason differ from the manifest "
                                         "(corrupt: 1 in the file, 0 in the manifest, truncated: 2 in the file, "
                                         "3 in the manifest)",)
    rejects.write_text("\n".join(["not json", *text.splitlines()[1:]]) + "\n")
    assert verify(tmp_path).problems == ("rejects.jsonl: line 1 is not a reject record (JSON with a 'reason'): b'not "
                                         "json\\n'",)
    rejects.unlink()
    problems = verify(tmp_path).problems
    assert len(problems) == 1 and "rejects.jsonl: missing" in problems[0] and "3 rejects" in problems[0]


def test_a_shard_file_the_manifest_does_not_name_is_a_problem(tmp_path: Path) -> None:
    """A stray copy of a shard in OUT would be read by a loader that lists the folder: verify names it."""
    make_output(tmp_path)
    first = sorted(tmp_path.glob("*.tar"))[0]
    (tmp_path / "notes.txt").write_text("the user's own file: not a shard, not a problem")
    assert verify(tmp_path).ok
    (tmp_path / "shard-000099.tar").write_bytes(first.read_bytes())
    problems = verify(tmp_path).problems
    assert len(problems) == 1
    assert problems[0].startswith("shard-000099.tar: a shard file") and "does not name" in problems[0]


def test_a_sidecar_changed_where_its_reader_does_not_look_fails_its_sha256(tmp_path: Path) -> None:
    manifest = make_output(tmp_path)
    info = manifest.shards[1]
    assert info.index is not None and info.index_sha256 is not None
    sidecar = tmp_path / info.index
    data = bytearray(sidecar.read_bytes())
    header_end = 12 + struct.unpack("<I", data[8:12])[0]
    assert header_end % 8, "the test needs the zero padding after the JSON header"
    data[header_end] ^= 0x01  # a padding byte: the sidecar still parses and agrees with its tar
    sidecar.write_bytes(bytes(data))
    assert read_index(sidecar).num_samples == info.num_samples
    [problem] = verify(tmp_path).problems
    assert problem.startswith(f"{info.index}: sha256 ") and info.index_sha256 in problem and info.name in problem
