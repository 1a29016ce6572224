from __future__ import annotations

import hashlib
import itertools
import random
import subprocess
import warnings
from pathlib import Path

import pytest

from dataprep.errors import UsageError
from dataprep.formats.durable import start_writeback
from dataprep.formats.tar.index import index_tar, read_index
from dataprep.formats.manifest import ShardInfo, sha256_file
from dataprep.formats.samples import CleanRecord
from dataprep.formats.writer import ShardWriter
from dataprep.formats.tar.writer import TarShardWriter

wds = pytest.importorskip("webdataset")


def make_records(n: int, *, seed: int = 0, max_size: int = 3000) -> list[CleanRecord]:
    rng = random.Random(seed)
    records = []
    for i in range(n):
        fields: dict[str, object] = {"jpg": rng.randbytes(rng.randrange(max_size)), "cls": str(i % 7).encode()}
        if i % 3 == 0:
            fields["json"] = b'{"i": %d}' % i
        records.append(CleanRecord(f"sample_{i:05d}", f"raw/{i}.jpg", fields))
    return records


def write_all(out: Path, records: list[CleanRecord], **kwargs: object) -> list[ShardInfo]:
    shards: list[ShardInfo] = []
    with TarShardWriter(out, **kwargs) as writer:  # type: ignore[arg-type]
        for rec in records:
            shards.extend(writer.write(rec))
        shards.extend(writer.close())
    return shards


def read_with_webdataset(paths: list[Path]) -> list[dict[str, object]]:
    with warnings.catch_warnings():
        # webdataset 1.0.2 leaves its tar streams for the garbage collector.
        warnings.simplefilter("ignore", ResourceWarning)
        dataset = wds.WebDataset([str(p) for p in paths], shardshuffle=False)
        return [{k: v for k, v in s.items() if k not in ("__url__", "__local_path__")} for s in dataset]


def as_samples(records: list[CleanRecord]) -> list[dict[str, object]]:
    return [{"__key__": r.key, **r.fields} for r in records]


def test_webdataset_reads_back_every_sample_bytes_equal(tmp_path: Path) -> None:
    records = make_records(40)
    shards = write_all(tmp_path, records, max_shard_bytes=20_000)
    assert len(shards) > 1
    assert [s.name for s in shards] == [f"shard-{i:06d}.tar" for i in range(len(shards))]
    assert read_with_webdataset([tmp_path / s.name for s in shards]) == as_samples(records)
    assert sum(s.num_samples for s in shards) == 40


def test_tar_command_lists_members_in_sorted_field_order(tmp_path: Path) -> None:
    records = make_records(4)
    [shard] = write_all(tmp_path, records, max_samples_per_shard=10)
    listing = subprocess.run(["tar", "-tf", str(tmp_path / shard.name)], capture_output=True, text=True, check=True)
    expected = [f"{r.key}.{f}" for r in records for f in sorted(r.fields)]
    assert listing.stdout.split() == expected
    assert listing.stderr == ""


def test_index_offsets_point_at_field_bytes_and_match_a_rescan(tmp_path: Path) -> None:
    records = make_records(25)
    shards = write_all(tmp_path, records, max_shard_bytes=30_000)
    by_key = {r.key: r for r in records}
    for shard in shards:
        data = (tmp_path / shard.name).read_bytes()
        index = read_index(tmp_path / shard.index)  # type: ignore[operator]
        rescan = index_tar(tmp_path / shard.name)
        assert index.shard_bytes == len(data) == shard.bytes
        assert index.keys() == rescan.keys()
        for i in range(index.num_samples):
            assert index.entry(i) == rescan.entry(i)
            for field, (offset, size) in index.sample_fields(i).items():
                assert data[offset : offset + size] == by_key[index.key(i)].fields[field]
        assert shard.fields == index.fields
        assert shard.sha256 == sha256_file(tmp_path / shard.name) == hashlib.sha256(data).hexdigest()


def test_rollover_by_bytes_is_greedy_and_respects_the_limit(tmp_path: Path) -> None:
    limit = 16_384
    shards = write_all(tmp_path, make_records(60, max_size=2000), max_shard_bytes=limit)
    assert all(s.bytes <= limit for s in shards)
    for shard, following in itertools.pairwise(shards):
        first = read_index(tmp_path / following.index).entry(0)  # type: ignore[operator]
        # The next shard's first sample did not fit: it would have crossed the limit.
        assert shard.bytes + first.size > limit


def test_rollover_by_count_closes_each_shard_as_soon_as_it_is_full(tmp_path: Path) -> None:
    records = make_records(10)
    writer = TarShardWriter(tmp_path, max_shard_bytes=None, max_samples_per_shard=4)
    closed_at = [i for i, rec in enumerate(records) if writer.write(rec)]
    last = writer.close()
    assert closed_at == [3, 7]
    assert [s.num_samples for s in writer.shards] == [4, 4, 2]
    assert last == [writer.shards[-1]]
    assert writer.close() == []


def test_oversized_sample_goes_alone_into_its_own_shard(tmp_path: Path) -> None:
    small = make_records(3, max_size=100)
    big = CleanRecord("big_one", "raw/big", {"jpg": b"\xff" * 50_000})
    records = [small[0], big, small[1], small[2]]
    shards = write_all(tmp_path, records, max_shard_bytes=10_000)
    assert [s.num_samples for s in shards] == [1, 1, 2]
    assert shards[1].bytes > 10_000
    assert read_index(tmp_path / shards[1].index).keys() == ["big_one"]  # type: ignore[operator]


def test_identical_inputs_give_identical_bytes(tmp_path: Path) -> None:
    records = make_records(30)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_all(tmp_path / "a", records, max_shard_bytes=25_000)
    second = write_all(tmp_path / "b", records, max_shard_bytes=25_000)
    assert len(first) > 1
    assert first == second
    for s in first:
        assert (tmp_path / "a" / s.name).read_bytes() == (tmp_path / "b" / s.name).read_bytes()
        assert s.index is not None
        assert (tmp_path / "a" / s.index).read_bytes() == (tmp_path / "b" / s.index).read_bytes()


def test_start_shard_and_prefix_name_the_shards(tmp_path: Path) -> None:
    shards = write_all(tmp_path, make_records(6), prefix="train", max_samples_per_shard=2, start_shard=7)
    assert [s.name for s in shards] == ["train-000007.tar", "train-000008.tar", "train-000009.tar"]
    assert [s.index for s in shards] == [f"{s.name}.idx" for s in shards]


def test_no_temporary_files_remain_after_close(tmp_path: Path) -> None:
    shards = write_all(tmp_path, make_records(20), max_shard_bytes=20_000)
    expected = {s.name for s in shards} | {f"{s.name}.idx" for s in shards}
    assert {p.name for p in tmp_path.iterdir()} == expected


def test_abort_removes_the_open_temporary_file_and_keeps_completed_shards(tmp_path: Path) -> None:
    writer = TarShardWriter(tmp_path, max_samples_per_shard=3)
    for rec in make_records(5):
        writer.write(rec)
    assert (tmp_path / ".shard-000001.tar.tmp").exists()
    writer.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-000000.tar", "shard-000000.tar.idx"]
    with pytest.raises(ValueError, match="closed or aborted"):
        writer.write(make_records(1)[0])


def test_exception_inside_with_block_aborts(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), TarShardWriter(tmp_path) as writer:
        writer.write(make_records(1)[0])
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_clean_with_exit_closes_the_last_shard(tmp_path: Path) -> None:
    with TarShardWriter(tmp_path) as writer:
        for rec in make_records(3):
            assert writer.write(rec) == []
    assert [s.num_samples for s in writer.shards] == [3]
    assert (tmp_path / "shard-000000.tar").exists()
    assert isinstance(writer, ShardWriter)


def test_long_and_unicode_keys_get_extended_headers_and_right_offsets(tmp_path: Path) -> None:
    long_dir = "d" * 120
    records = [
        CleanRecord(f"{long_dir}/{'k' * 150}_{i}", "raw", {"jpg": bytes([i]) * (100 + i), "txt": "é✓".encode() * i})
        for i in range(3)
    ] + [CleanRecord("ünïcödé_key", "raw", {"jpg": b"\x01\x02"})]
    [shard] = write_all(tmp_path, records)
    data = (tmp_path / shard.name).read_bytes()
    index = read_index(tmp_path / shard.index)  # type: ignore[operator]
    assert index.keys() == [r.key for r in records]
    for i, rec in enumerate(records):
        for field, (offset, size) in index.sample_fields(i).items():
            assert data[offset : offset + size] == rec.fields[field]
    assert index.entry(1) == index_tar(tmp_path / shard.name).entry(1)
    assert read_with_webdataset([tmp_path / shard.name]) == as_samples(records)


def test_non_bytes_field_is_refused_naming_key_and_field(tmp_path: Path) -> None:
    with TarShardWriter(tmp_path) as writer:
        with pytest.raises(TypeError, match=r"'k1'.*'cls'.*int"):
            writer.write(CleanRecord("k1", "raw", {"cls": 3, "jpg": b"x"}))
        writer.write(CleanRecord("k2", "raw", {"jpg": b"x"}))
    assert [s.num_samples for s in writer.shards] == [1]


@pytest.mark.parametrize("key", ["", "a.b", "dir/x.y", "/abs", "a//b", "../up", "dir/..", "dir/"])
def test_keys_that_would_not_read_back_are_refused(tmp_path: Path, key: str) -> None:
    with TarShardWriter(tmp_path) as writer, pytest.raises(ValueError, match="key"):
        writer.write(CleanRecord(key, "raw", {"jpg": b"x"}))


@pytest.mark.parametrize("field", ["", "_meta", "a/b"])
def test_bad_field_names_are_refused(tmp_path: Path, field: str) -> None:
    with TarShardWriter(tmp_path) as writer, pytest.raises(ValueError, match="field name"):
        writer.write(CleanRecord("k", "raw", {field: b"x"}))


def test_duplicate_key_within_a_shard_is_refused(tmp_path: Path) -> None:
    with TarShardWriter(tmp_path) as writer:
        writer.write(CleanRecord("k", "raw", {"jpg": b"x"}))
        with pytest.raises(ValueError, match="written twice"):
            writer.write(CleanRecord("k", "raw", {"cls": b"1"}))


def test_empty_sample_is_refused(tmp_path: Path) -> None:
    with TarShardWriter(tmp_path) as writer, pytest.raises(ValueError, match="no fields"):
        writer.write(CleanRecord("k", "raw", {}))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_shard_bytes": None, "max_samples_per_shard": None}, "at least one"),
        ({"max_shard_bytes": -3}, r"'max_shard_bytes' must be a positive int or None \(got -3 that is a int\)"),
        ({"max_samples_per_shard": True}, "'max_samples_per_shard' must be a positive int"),
        ({"start_shard": -1}, "'start_shard' must be a non-negative int"),
        ({"prefix": "a/b"}, "'prefix' must be"),
    ],
)
def test_bad_arguments_are_refused_at_construction(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TarShardWriter(tmp_path, **kwargs)  # type: ignore[arg-type]


def test_missing_output_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        TarShardWriter(tmp_path / "nope")


def test_fast_member_header_is_byte_identical_to_tarfile():
    import random
    import string
    import tarfile

    from dataprep.formats.tar.writer import _TAR_FORMAT, _member_header

    def reference(name: str, size: int) -> bytes:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = size, 0, 0o444, 0, 0, "", ""
        return info.tobuf(_TAR_FORMAT, "utf-8", "strict")

    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits + "_-."
    cases = [("ü.jpg", 5), ("x" * 150 + ".cls", 5), ("k.jpg", 8**11 - 1), ("k.jpg", 8**11)]
    cases += [("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 110))),
               rng.choice([0, 1, 511, 512, rng.randint(0, 10**9)]))
              for _ in range(2000)]
    for name, size in cases:
        assert _member_header(name, size) == reference(name, size), (name, size)


def test_writeback_of_a_growing_shard_starts_in_contiguous_ranges(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from dataprep.formats import writer as base  # where the writers' shared skeleton streams a shard to disk

    calls: list[tuple[int, int, int]] = []

    def record_and_start(fd: int, offset: int, nbytes: int) -> None:
        calls.append((fd, offset, nbytes))
        start_writeback(fd, offset, nbytes)  # the real call must accept what the writer passes

    monkeypatch.setattr(base, "WRITEBACK_BYTES", 64 * 1024)
    monkeypatch.setattr(base, "start_writeback", record_and_start)
    records = make_records(300, max_size=3000)
    (shard,) = write_all(tmp_path, records)
    assert len(calls) >= shard.bytes // (64 * 1024) - 1
    assert [offset for _, offset, _ in calls] == list(itertools.accumulate([0] + [n for _, _, n in calls[:-1]]))
    assert all(n >= 64 * 1024 for _, _, n in calls) and calls[-1][1] + calls[-1][2] <= shard.bytes
    assert sha256_file(tmp_path / shard.name) == shard.sha256  # the data is unchanged by it
    assert [s["__key__"] for s in wds.WebDataset(str(tmp_path / shard.name),
                                                 shardshuffle=False)] == [r.key for r in records]


def test_start_writeback_ignores_empty_ranges_and_works_on_a_real_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10_000)
    with open(path, "rb+") as f:
        start_writeback(f.fileno(), 0, 0)
        start_writeback(f.fileno(), 0, 10_000)
    assert path.read_bytes() == b"x" * 10_000
