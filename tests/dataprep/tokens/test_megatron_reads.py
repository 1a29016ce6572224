"""Megatron-Core's ``IndexedDataset`` reads every shard of a real run, each document the tokenizer's ids + EOS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.dataprep.helpers import MANIFEST, write_text
from tests.dataprep.token_samples import TokenCorpus, library_ids, megatron_documents, word_level

pytest.importorskip("megatron.core.datasets.indexed_dataset")

LAYOUTS = {  # raw layout -> extra options of its run
    "text": (),
    "lines": ("--text-unit", "line"),
    "jsonl": (),
    "csv": (),
    "parquet": (),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_kept_document_is_the_libraries_ids_plus_eos_in_order(cli, tmp_path: Path, corpus: TokenCorpus,
                                                                   layout: str) -> None:
    out = tmp_path / "out"
    res = cli("shard", corpus.folder(layout), out, "--tokenizer", corpus.tokenizer, "--shard-size", "64KiB",
              "--workers", "2", *LAYOUTS[layout])
    assert res.rc == 0, res.text
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["format"] == "tokens" and len(manifest["shards"]) > 3
    kept = corpus.kept(layout)
    assert megatron_documents(out) == library_ids(corpus.tokenizer, kept)
    assert manifest["totals"]["samples_kept"] == len(kept) == sum(s["num_samples"] for s in manifest["shards"])
    tokenizer = manifest["tokenizer"]
    assert tokenizer["dtype"] == "uint16" and tokenizer["eos"] == "<|endoftext|>"
    assert tokenizer["name"] == "tokenizer.json" and tokenizer["vocab_size"] <= 2000
    assert [s["num_tokens"] for s in manifest["shards"]] == [
        sum(len(d) for d in megatron_documents_of(out, s["name"])) for s in manifest["shards"]]
    assert manifest["schema"] == [{"name": "tokens", "type": "uint16"}]


def megatron_documents_of(out: Path, bin_name: str) -> list[list[int]]:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(str(out / bin_name.removesuffix(".bin")))
    return [dataset[i].tolist() for i in range(len(dataset))]


def test_the_bytes_tokenizer_gives_utf8_bytes_and_eos_256(cli, tmp_path: Path, corpus: TokenCorpus) -> None:
    out = tmp_path / "out"
    res = cli("shard", corpus.folder("jsonl"), out, "--tokenizer", "bytes", "--samples-per-shard", "50")
    assert res.rc == 0, res.text
    assert megatron_documents(out) == [[*text.encode("utf-8"), 256] for text in corpus.kept("jsonl")]
    tokenizer = json.loads((out / MANIFEST).read_text())["tokenizer"]
    assert tokenizer == {"name": "bytes", "sha256": tokenizer["sha256"], "vocab_size": 257, "eos": "<|endoftext|>",
                         "eos_id": 256, "dtype": "uint16"}


@pytest.mark.parametrize(("words", "dtype"), [(65_400, "uint16"), (70_000, "int32")])
def test_the_shard_dtype_follows_the_vocabulary(cli, tmp_path: Path, words: int, dtype: str) -> None:
    """Megatron's rule: uint16 below 65,500 ids, else int32; ids past 65,535 survive."""
    pytest.importorskip("tokenizers")
    tokenizer = word_level(tmp_path / "tokenizer.json", words)
    raw, out = tmp_path / "raw", tmp_path / "out"
    lines = [f"w1 w{words - 1} w2", f"w{words // 2} w0", "w3 w4 w5 w6"]
    write_text(raw / "docs.txt", "\n".join(lines) + "\n")
    res = cli("shard", raw, out, "--tokenizer", tokenizer, "--text-unit", "line")
    assert res.rc == 0, res.text
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["tokenizer"]["dtype"] == dtype and manifest["tokenizer"]["eos_id"] == words + 1
    documents = megatron_documents(out)
    assert documents == library_ids(tokenizer, lines)
    assert documents[0] == [1, words - 1, 2, words + 1]
    bin_bytes = (out / manifest["shards"][0]["name"]).stat().st_size
    assert bin_bytes == sum(map(len, documents)) * (2 if dtype == "uint16" else 4)


def test_eos_names_another_token_of_the_tokenizer(cli, tmp_path: Path, corpus: TokenCorpus) -> None:
    pytest.importorskip("tokenizers")
    tokenizer = word_level(tmp_path / "tokenizer.json", 10, specials=("<|endoftext|>", "<sep>"))
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "docs.txt", "w1 w2\nw3\n")
    assert cli("shard", raw, out, "--tokenizer", tokenizer, "--eos", "<sep>", "--text-unit", "line").rc == 0
    assert megatron_documents(out) == library_ids(tokenizer, ["w1 w2", "w3"], eos="<sep>")
    assert json.loads((out / MANIFEST).read_text())["tokenizer"]["eos"] == "<sep>"
