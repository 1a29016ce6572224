"""Compressed files read as streams (``inputs.compressed``) and line by line with bounded memory (``inputs.lines``)."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from dataprep.inputs import compressed
from dataprep.inputs.compressed import open_input
from dataprep.inputs.lines import LongLine, StreamDamage, read_lines, read_whole
from dataprep.inputs.names import codec_of, data_extension, without_codec
from tests.dataprep.compressed_samples import CODECS, EXTENSIONS, complete_lines, compress, decoded_prefix


def _lines(n: int, width: int = 60) -> bytes:
    """``n`` distinct lines of about ``width`` bytes that compress like prose (not to nothing)."""
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta", b"theta"]
    out = []
    for i in range(n):
        text = b" ".join(words[(i * 7 + k * 3 + (i >> k)) % len(words)] for k in range(width // 6))
        out.append(b"%d %s\n" % (i, text))
    return b"".join(out)


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_names_say_the_codec_and_what_the_file_holds() -> None:
    assert [codec_of(n) for n in ("a.jsonl.gz", "b.TXT.ZST", "c.csv.bz2", "d.tsv.xz", "e.jsonl", ".gz")] == \
        ["gzip", "zstd", "bzip2", "xz", None, None]
    assert without_codec("dir/part-0.jsonl.gz") == "dir/part-0.jsonl"
    assert without_codec("dir/part-0.jsonl") == "dir/part-0.jsonl"
    assert [data_extension(n) for n in ("part-0.json.gz", "a.txt.zst", "a.tar.gz", "x.gz", "a.csv")] == \
        ["json", "txt", "tar", "", "csv"]


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_reads_concatenated_members_to_the_end(tmp_path: Path, codec: str) -> None:
    data = _lines(3000)
    # two members or frames, as cat a.gz b.gz, pigz or zstd -T write them
    members = compress(data[:70_000], codec) + compress(data[70_000:], codec)
    path = _write(tmp_path, f"c.txt.{EXTENSIONS[codec]}", members)
    got = list(read_lines(path, 1 << 20))
    assert b"".join(got) == data
    with open_input(path) as src:
        assert src.codec == codec and src.stream.read() == data


@pytest.mark.parametrize("codec", CODECS)
def test_a_truncated_file_keeps_every_complete_line_and_ends_at_its_size(tmp_path: Path, codec: str) -> None:
    data = _lines(20_000)  # 1.2 MB: bzip2's blocks of 900 kB decode whole, so two of them
    packed = compress(data, codec)
    cut = len(packed) * 9 // 10  # an interrupted download
    path = _write(tmp_path, f"t.txt.{EXTENSIONS[codec]}", packed[:cut])
    items = list(read_lines(path, 1 << 20))
    damage = items.pop()
    assert isinstance(damage, StreamDamage) and damage.truncated and damage.codec == codec
    assert damage.offset == damage.size == cut
    assert [line.rstrip(b"\n") for line in items] == complete_lines(decoded_prefix(packed[:cut], codec))
    assert len(items) > 0 and all(isinstance(line, bytes) and line.endswith(b"\n") for line in items)


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_bytes_end_the_file_after_every_line_decoded_before_them(tmp_path: Path, codec: str) -> None:
    data = _lines(5000)
    packed = compress(data, codec)
    at = len(packed) // 2
    broken = packed[:at] + os.urandom(256) + packed[at + 256:]  # a damaged stretch, as a bad sector leaves
    path = _write(tmp_path, f"c.txt.{EXTENSIONS[codec]}", broken)
    items = list(read_lines(path, 1 << 20))
    damage = items.pop()
    assert isinstance(damage, StreamDamage) and damage.codec == codec and damage.size == len(broken)
    assert at <= damage.offset <= len(broken)
    before = complete_lines(decoded_prefix(packed[:at], codec))
    assert [line.rstrip(b"\n") for line in items[:len(before)]] == before
    assert f"found at compressed byte {damage.offset} of {len(broken)}" in damage.describe(len(items))


@pytest.mark.parametrize("codec", CODECS)
def test_an_empty_compressed_file_is_damaged(tmp_path: Path, codec: str) -> None:
    path = _write(tmp_path, f"e.jsonl.{EXTENSIONS[codec]}", b"")
    items = list(read_lines(path, 1024))
    assert len(items) == 1 and isinstance(items[0], StreamDamage) and items[0].offset == 0
    assert isinstance(read_whole(path, 1024), StreamDamage)


def test_a_compressed_file_is_read_from_its_start_only(tmp_path: Path) -> None:
    path = _write(tmp_path, "a.txt.gz", compress(b"a\nb\n", "gzip"))
    with pytest.raises(ValueError, match="read from its start"), open_input(path, start=2):
        pass


def test_a_plain_file_reads_a_part_between_line_starts(tmp_path: Path) -> None:
    path = _write(tmp_path, "a.txt", b"one\ntwo\nthree\nfour\n")
    assert list(read_lines(path, 100, start=4, end=14)) == [b"two\n", b"three\n"]
    assert list(read_lines(path, 100, start=14)) == [b"four\n"]


@pytest.mark.parametrize("name", ["long.txt", "long.txt.gz", "long.txt.zst"])
def test_a_line_over_the_limit_is_skipped_without_being_held(tmp_path: Path, name: str) -> None:
    line = b"x" * (24 * 2**20)  # 24 MiB, one line; the limit is 256 KiB
    data = b"before\n" + line + b"\nafter\n" + b"y" * 300_000
    codec = codec_of(name)
    path = _write(tmp_path, name, compress(data, codec) if codec else data)
    tracemalloc.start()
    try:
        items = list(read_lines(path, 256 * 2**10))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert items == [b"before\n", LongLine(len(line) + 1, True), b"after\n", LongLine(300_000, False)]
    assert items[1].record_bytes == len(line)
    assert peak < 8 * 2**20, f"reading held {peak / 2**20:.1f} MiB"


def test_a_line_of_exactly_the_limit_is_read(tmp_path: Path) -> None:
    path = _write(tmp_path, "a.txt", b"12345\n123456\n12345")
    assert list(read_lines(path, 5)) == [b"12345\n", LongLine(7, True), b"12345"]


def test_a_whole_file_is_read_up_to_the_limit(tmp_path: Path) -> None:
    small = _write(tmp_path, "small.txt.xz", compress(b"hello\n", "xz"))
    big = _write(tmp_path, "big.txt.bz2", compress(b"z" * 10_000, "bzip2"))
    assert read_whole(small, 100) == b"hello\n"
    assert read_whole(big, 100) == LongLine(101, False)


def test_the_gzip_backend_is_isal_where_installed() -> None:
    pytest.importorskip("isal")
    assert compressed.GZIP_BACKEND == "isal"
