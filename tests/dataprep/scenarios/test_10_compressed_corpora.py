"""10. Corpora as they ship (issue 27): compressed JSON lines, CSV and text, damaged files, very long records.

The promises checked: a compressed RAW gives the shards of its uncompressed copy, byte for byte (a Parquet
row's ``__source__`` names the file as uncompressed: ``part-0.jsonl.gz`` holds ``part-0.jsonl``; a reject names
the file on disk); a truncated or corrupt file
keeps every complete record before the damage and adds one ``corrupt_compressed`` reject naming the compressed
byte offset and the records read, the accounting holding, exit 0; a line longer than ``--max-record-bytes`` is a
``record_too_long`` reject that is never held in memory; kill -9 and resume, a changed compressed file, and
``verify`` work as for any RAW.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.dataprep.compressed_samples import CODECS, EXTENSIONS, complete_lines, compress, decoded_prefix
from tests.dataprep.helpers import (KILL_POINTS, MANIFEST, REPO, Result, assert_accounted, assert_same_output,
                                    identities, kill_when, read_output, read_rejects, run_in, verify_ok, write_text)

_WORDS = ("the", "river", "Zürich", "model", "token", "naïve", "corpus", "shard", "résumé", "data", "of", "and",
          "language", "training", "東京", "learning", "stream", "line", "—", "value")


def _documents(n: int, seed: int = 27) -> list[str]:
    """``n`` distinct prose documents of 5 to 400 words, some non-ASCII."""
    rng = random.Random(seed)
    return [f"doc {i}: " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 400))) for i in range(n)]


def _corpus(root: Path, kind: str, codec: str | None) -> Path:
    """RAW of ``kind`` (jsonl, csv, text) in three files, each compressed with ``codec`` (None: plain)."""
    docs = _documents(1200)
    suffix = f".{EXTENSIONS[codec]}" if codec else ""
    for part in range(3):
        chunk = docs[part::3]
        if kind == "jsonl":
            data = "".join(json.dumps({"id": part * 1000 + i, "text": t}, ensure_ascii=False) + "\n"
                           for i, t in enumerate(chunk))
            name = f"part-{part}.jsonl"
        elif kind == "csv":
            data = "id,text\n" + "".join(f'{part * 1000 + i},"{t}"\n' for i, t in enumerate(chunk))
            name = f"part-{part}.csv"
        else:
            data = "".join(t + "\n" for t in chunk)
            name = f"part-{part}.txt"
        raw = data.encode("utf-8")
        write_text(root / (name + suffix), compress(raw, codec) if codec else raw)
    return root


CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "jsonl-parquet": ("jsonl", ()),
    "csv-parquet": ("csv", ()),
    "text-lines-parquet": ("text", ("--text-unit", "line")),
    "jsonl-tokens-bpe": ("jsonl", ("--tokenizer", "BPE")),
    "jsonl-tokens-bytes": ("jsonl", ("--tokenizer", "bytes")),
}
_REFERENCES: dict[str, Path] = {}


def _shard(cli: Callable[..., Result], raw: Path, out: Path, options: tuple[str, ...], bpe_path: Path) -> None:
    options = tuple(os.fspath(bpe_path) if o == "BPE" else o for o in options)
    res = cli("shard", raw, out, "--workers", "2", "--samples-per-shard", "150", "--no-progress", *options)
    assert res.rc == 0, res.text


def _plain_name(source: str) -> str:
    return re.sub(r"\.(gz|zst|bz2|xz)$", "", source)


def _assert_same_shards(got: Path, want: Path) -> None:
    """The shards of ``want`` (a plain RAW's) in ``got``, byte for byte; the same totals, and the same rejects
    but for their source, which names the compressed file on disk."""
    mg, mw = (json.loads((out / MANIFEST).read_text()) for out in (got, want))
    assert mg["totals"] == mw["totals"] and mg["format"] == mw["format"] and mg.get("schema") == mw.get("schema")
    assert [s["name"] for s in mg["shards"]] == [s["name"] for s in mw["shards"]]
    assert [s["num_samples"] for s in mg["shards"]] == [s["num_samples"] for s in mw["shards"]]
    assert [s["sha256"] for s in mg["shards"]] == [s["sha256"] for s in mw["shards"]]
    for shard in mw["shards"]:
        for name in (shard["name"], shard.get("index")):
            if name:
                assert (got / name).read_bytes() == (want / name).read_bytes(), name
    rejects = [(_plain_name(r["source"]), r["reason"], r.get("row")) for r in read_rejects(got)]
    assert rejects == [(r["source"], r["reason"], r.get("row")) for r in read_rejects(want)]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_compressed_corpus_gives_the_shards_of_its_plain_copy(cli, tmp_path, tmp_path_factory, bpe_path, case,
                                                               codec) -> None:
    kind, options = CASES[case]
    if case not in _REFERENCES:  # the plain copy's shards, once per case
        reference = tmp_path_factory.mktemp(f"plain-{case}")
        _shard(cli, _corpus(reference / "raw", kind, None), reference / "out", options, bpe_path)
        _REFERENCES[case] = reference / "out"
    raw, out = _corpus(tmp_path / "raw", kind, codec), tmp_path / "out"
    _shard(cli, raw, out, options, bpe_path)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["layout"] == ("text" if kind == "text" else "table")
    assert f".{EXTENSIONS[codec]}" in manifest["layout_reason"], manifest["layout_reason"]
    _assert_same_shards(out, _REFERENCES[case])
    assert verify_ok(cli, out)


def _damage(packed: bytes, how: str) -> tuple[bytes, int]:
    """``packed`` damaged as a user's tools leave it, and the compressed byte where the damage starts."""
    if how == "truncated":  # an interrupted download or copy
        cut = len(packed) * 8 // 10
        return packed[:cut], cut
    at = len(packed) // 2  # a stretch of a bad disk, overwritten in the middle
    return packed[:at] + bytes(b ^ 0x5A for b in packed[at:at + 512]) + packed[at + 512:], at


@pytest.mark.parametrize("how", ["truncated", "corrupt-middle"])
@pytest.mark.parametrize("codec", CODECS)
def test_a_damaged_file_keeps_the_records_before_the_damage(cli, tmp_path: Path, codec: str, how: str) -> None:
    ext = EXTENSIONS[codec]
    lines = [json.dumps({"id": i, "text": t}, ensure_ascii=False).encode() for i, t in enumerate(_documents(1500))]
    packed = compress(b"".join(line + b"\n" for line in lines), codec)
    damaged, at = _damage(packed, how)
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / f"bad.jsonl.{ext}", damaged)
    write_text(raw / f"good.jsonl.{ext}", compress(b'{"id": -1, "text": "fine"}\n', codec))
    res = cli("shard", raw, out, "--workers", "1", "--no-progress")
    assert res.rc == 0, res.text
    output = read_output(out)  # checks inputs seen = kept + rejected, every shard against the manifest
    before = complete_lines(decoded_prefix(damaged[:at], codec))
    assert before == lines[:len(before)] and (len(before) > 0 or codec == "bzip2")
    (damage,) = [r for r in output.rejects if r["reason"] == "corrupt_compressed"]
    assert damage["source"] == f"bad.jsonl.{ext}" and "row" not in damage
    found = re.search(rf"found at compressed byte (\d+) of {len(damaged)} .*; (\d+) records read before it",
                      damage["detail"])
    assert found, damage["detail"]
    offset, read = int(found.group(1)), int(found.group(2))
    assert at <= offset <= len(damaged) and read >= len(before)
    rows = sorted(row for source, row in identities(output) if _plain_name(source) == "bad.jsonl" and row is not None)
    assert len(rows) == read and rows[:len(before)] == list(range(1, len(before) + 1))  # each once
    kept = {row for source, row in output.samples if source == "bad.jsonl"}
    assert set(range(1, len(before) + 1)) <= kept
    texts = {r["__row__"]: r["text"] for p in sorted(out.glob("*.parquet")) for r in pq.read_table(p).to_pylist()
             if r["__source__"] == "bad.jsonl"}
    assert all(texts[i + 1] == json.loads(lines[i])["text"] for i in range(len(before)))
    if how == "truncated":  # nothing but what the file holds: every complete row, none after
        assert offset == len(damaged) and rows == list(range(1, len(before) + 1))
    assert verify_ok(cli, out)


_PEAK_RSS_SCRIPT = """
import sys
from dataprep.cli import main
status = main(["shard", *sys.argv[1:], "--workers", "1", "--no-progress", "--max-record-bytes", "1MiB"])
with open("/proc/self/status") as f:
    print(status, next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")))
"""


def _peak_rss_kib(raw: Path, out: Path) -> int:
    """Peak RSS (KiB, VmHWM) of a ``dataprep shard`` process (``--workers 1``: it does everything)."""
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}  # a repeatable peak (engines/test_memory.py)
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS_SCRIPT, os.fspath(raw), os.fspath(out)],
                          capture_output=True, text=True, cwd=REPO, env=env)
    assert done.returncode == 0 and done.stdout, done.stderr
    status, peak = map(int, done.stdout.splitlines()[-1].split())
    assert status == 0, done.stderr
    return peak


def _long_line_raw(root: Path, name: str, long_bytes: int) -> Path:
    """A JSONL table whose second row is ``long_bytes`` long (0: a short row instead)."""
    text = "x" * long_bytes if long_bytes else "short"
    data = b'{"id": 1, "text": "a"}\n' + json.dumps({"id": 2, "text": text}).encode() + b'\n{"id": 3, "text": "c"}\n'
    write_text(root / name, compress(data, "gzip") if name.endswith(".gz") else data)
    return root


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS (VmHWM) from Linux /proc")
@pytest.mark.parametrize("name", ["rows.jsonl", "rows.jsonl.gz"])
def test_a_100_mib_line_is_rejected_without_being_held(tmp_path: Path, name: str) -> None:
    small = _peak_rss_kib(_long_line_raw(tmp_path / "small", name, 0), tmp_path / "out-small")
    large = _peak_rss_kib(_long_line_raw(tmp_path / "large", name, 100 * 2**20), tmp_path / "out-large")
    assert (large - small) * 1024 < 16 * 2**20, f"peak RSS grew from {small} to {large} KiB for a 100 MiB line"
    output = read_output(tmp_path / "out-large")
    plain = _plain_name(name)  # a kept row names its file as uncompressed, a reject the file on disk
    assert_accounted(output, [(plain, 1), (name, 2), (plain, 3)])
    (reject,) = output.rejects
    assert reject["reason"] == "record_too_long" and reject["row"] == 2
    row_bytes = len(json.dumps({"id": 2, "text": ""})) + 100 * 2**20
    assert f"{row_bytes} bytes, over --max-record-bytes {2**20}" in reject["detail"], reject["detail"]


def test_a_json_array_is_refused_naming_the_file(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    write_text(raw / "part-0.json.gz", compress(b'{"text": "a"}\n{"text": "b"}\n', "gzip"))
    write_text(raw / "part-1.json.gz", compress(b'[{"text": "a"}, {"text": "b"}]', "gzip"))
    res = cli("shard", raw, tmp_path / "out", "--no-progress")
    assert res.rc == 2 and "part-1.json.gz: holds one JSON array, not JSON lines" in res.err, res.text
    assert "Traceback" not in res.err


@pytest.mark.slow
@pytest.mark.parametrize("point", ["checkpoint", "fourth-shard"])
def test_kill9_then_resume_on_a_compressed_corpus_is_byte_identical(cli, tmp_path: Path, point: str) -> None:
    raw = tmp_path / "raw"
    for codec in CODECS:  # one file of each codec
        _corpus(raw / codec, "jsonl", codec)
    args = ("shard", "../raw", "out", "--workers", "2", "--samples-per-shard", "100", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    assert kill_when(args, run, KILL_POINTS[point](run / "out"))
    assert not (run / "out" / MANIFEST).exists()
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert verify_ok(cli, run / "out")


@pytest.mark.slow
def test_a_compressed_file_replaced_by_other_bytes_is_a_changed_raw(cli, tmp_path: Path) -> None:
    raw = _corpus(tmp_path / "raw", "jsonl", "zstd")
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "50", "--no-progress")
    run = tmp_path / "run"
    run.mkdir()
    assert kill_when(args, run, KILL_POINTS["checkpoint"](run / "out"))
    packed = (raw / "part-2.jsonl.zst").read_bytes()
    (raw / "part-2.jsonl.zst").write_bytes(compress(b'{"id": 0, "text": "other"}\n', "zstd"))
    res = run_in(cli, args, run)
    assert res.rc in (1, 2) and "part-2.jsonl.zst" in res.err and "--overwrite" in res.err, res.text
    (raw / "part-2.jsonl.zst").write_bytes(packed[:-1] + bytes([packed[-1] ^ 1]))  # the same size, a byte changed
    res = run_in(cli, args, run)
    assert res.rc in (1, 2) and "part-2.jsonl.zst" in res.err, res.text
    assert run_in(cli, (*args, "--overwrite"), run).rc == 0
    assert verify_ok(cli, run / "out")
