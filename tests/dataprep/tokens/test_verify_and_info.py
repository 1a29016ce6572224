"""``dataprep verify`` and ``dataprep info`` over token shards."""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path

import pytest

from tests.dataprep.helpers import MANIFEST, verify_ok
from tests.dataprep.token_samples import TokenCorpus, megatron_documents

pytest.importorskip("megatron.core.datasets.indexed_dataset")


@pytest.fixture
def out(cli, tmp_path: Path, corpus: TokenCorpus) -> Path:
    """A finished, verified token run over the corpus's JSONL table, several shards."""
    out = tmp_path / "out"
    res = cli("shard", corpus.folder("jsonl"), out, "--tokenizer", corpus.tokenizer, "--samples-per-shard", "60")
    assert res.rc == 0, res.text
    assert verify_ok(cli, out)
    return out


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def rewrite_manifest(out: Path, change) -> None:  # noqa: ANN001 (a function of the manifest document)
    doc = json.loads((out / MANIFEST).read_text())
    change(doc)
    (out / MANIFEST).write_text(json.dumps(doc, indent=2))


@pytest.mark.parametrize("suffix", [".bin", ".idx"])
def test_verify_names_the_file_with_a_flipped_byte(cli, out: Path, suffix: str) -> None:
    shard = json.loads((out / MANIFEST).read_text())["shards"][1]
    name = shard["name"] if suffix == ".bin" else shard["index"]
    flip_byte(out / name, (out / name).stat().st_size // 2)
    res = cli("verify", out)
    assert res.rc == 1, res.text
    problems = [line for line in res.out.splitlines() if line.startswith("PROBLEM")]
    assert problems and all(name in line for line in problems), problems
    assert "sha256" in problems[0]


def test_verify_checks_the_index_against_the_manifest_and_the_bin(cli, out: Path) -> None:
    """A .bin cut short and a manifest rewritten to match it (hashes and sizes), and counts edited: the .idx
    contradicts them, and verify says where."""
    doc = json.loads((out / MANIFEST).read_text())
    first, second = doc["shards"][0], doc["shards"][1]
    data = (out / first["name"]).read_bytes()[:-2]
    (out / first["name"]).write_bytes(data)

    def edit(manifest: dict) -> None:
        manifest["shards"][0].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        manifest["shards"][1]["num_tokens"] += 1

    rewrite_manifest(out, edit)
    res = cli("verify", out)
    assert res.rc == 1, res.text
    assert f"{first['index']}: its documents hold" in res.out and f"{first['name']} has {len(data)} bytes" in res.out
    assert f"{second['index']}: {second['num_tokens']} tokens, the manifest records {second['num_tokens'] + 1}" \
        in res.out


def test_verify_finds_a_missing_index_and_a_stray_shard(cli, out: Path) -> None:
    shard = json.loads((out / MANIFEST).read_text())["shards"][0]
    (out / shard["index"]).rename(out / "shard-copy.idx")
    res = cli("verify", out)
    assert res.rc == 1
    assert f"{shard['index']}: the token index of {shard['name']} is missing" in res.out, res.out
    assert "shard-copy.idx: a shard file" in res.out, res.out


def test_info_shows_the_tokenizer_documents_and_tokens(cli, out: Path, corpus: TokenCorpus) -> None:
    lengths = [len(doc) for doc in megatron_documents(out)]
    res = cli("info", out, "--json")
    assert res.rc == 0, res.text
    info = json.loads(res.out)
    assert info["format"] == "tokens" and info["layout"] == "table"
    assert info["tokenizer"]["name"] == "tokenizer.json" and info["tokenizer"]["dtype"] == "uint16"
    assert info["tokens"] == {"documents": len(lengths), "tokens": sum(lengths),
                              "tokens_per_document": {"min": min(lengths), "median": statistics.median(lengths),
                                                      "max": max(lengths)}}
    res = cli("info", out)
    assert res.rc == 0, res.text
    rows = dict(line.rsplit("  ", 1) for line in res.out.splitlines())
    rows = {label.strip(): value.strip() for label, value in rows.items()}
    assert rows["documents"] == f"{len(lengths):,}" and rows["tokens (EOS included)"] == f"{sum(lengths):,}"
    assert rows["tokens per document min / median / max"] == \
        f"{min(lengths):,} / {statistics.median(lengths):,g} / {max(lengths):,}"
    assert rows["tokenizer"].startswith("tokenizer.json (sha256 ")
