"""Token output's rejects: empty, invalid UTF-8, duplicates, --min-tokens, table rows; inputs = kept + rejected."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.dataprep.helpers import MANIFEST, read_rejects, write_text
from tests.dataprep.token_samples import TokenCorpus, library_ids, megatron_documents

pytest.importorskip("megatron.core.datasets.indexed_dataset")


def totals_of(out: Path) -> dict:
    return json.loads((out / MANIFEST).read_text())["totals"]


def test_broken_and_repeated_documents_are_rejected_with_their_reason(cli, tmp_path: Path,
                                                                       corpus: TokenCorpus) -> None:
    out = tmp_path / "out"
    assert cli("shard", corpus.folder("text"), out, "--tokenizer", corpus.tokenizer).rc == 0
    rejects = read_rejects(out)
    texts = corpus.texts
    expected = Counter({"invalid_utf8": sum(t is None for t in texts),
                        "empty_text": sum(t is not None and not t.strip() for t in texts)})
    expected["duplicate"] = corpus.documents - len(corpus.kept("text")) - sum(expected.values())
    assert min(expected.values()) > 0, expected
    assert Counter(r["reason"] for r in rejects) == expected
    totals = totals_of(out)
    assert totals["rejected_by_reason"] == dict(expected)
    assert totals["inputs_seen"] == totals["samples_kept"] + totals["rejected"] == corpus.documents
    by_source = {r["source"]: r for r in rejects}
    for index, text in enumerate(texts):
        if text is None:
            assert by_source[f"doc_{index:05d}.txt"]["reason"] == "invalid_utf8"


def test_min_tokens_rejects_shorter_documents_counting_without_the_eos(cli, tmp_path: Path,
                                                                        corpus: TokenCorpus) -> None:
    kept = corpus.kept("lines")
    lengths = [len(ids) - 1 for ids in library_ids(corpus.tokenizer, kept)]  # without the EOS
    limit = sorted(lengths)[len(lengths) // 4]
    out = tmp_path / "out"
    res = cli("shard", corpus.folder("lines"), out, "--tokenizer", corpus.tokenizer, "--text-unit", "line",
              "--min-tokens", limit)
    assert res.rc == 0, res.text
    longer = [text for text, n in zip(kept, lengths) if n >= limit]
    assert megatron_documents(out) == library_ids(corpus.tokenizer, longer)
    short = [r for r in read_rejects(out) if r["reason"] == "too_few_tokens"]
    assert len(short) == len(kept) - len(longer) > 0
    assert all(r["row"] >= 1 and f"fewer than --min-tokens {limit}" in r["detail"] for r in short)
    assert "too_few_tokens" in res.out  # the summary's reasons
    totals = totals_of(out)
    assert totals["inputs_seen"] == totals["samples_kept"] + totals["rejected"] == corpus.documents


def test_a_repeat_of_a_too_short_document_is_a_duplicate(cli, tmp_path: Path) -> None:
    """Duplicates are told on the text, before tokenizing: the first copy is too short, the second a duplicate."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "docs.txt", "ab\nabcdefgh\nab\n")
    assert cli("shard", raw, out, "--tokenizer", "bytes", "--text-unit", "line", "--min-tokens", "3").rc == 0
    assert [(r["row"], r["reason"]) for r in read_rejects(out)] == [(1, "too_few_tokens"), (3, "duplicate")]
    assert megatron_documents(out) == [[*b"abcdefgh", 256]]


def test_table_rows_without_usable_text(cli, tmp_path: Path) -> None:
    """Only the text column is read (other columns dropped); a row without it, null, blank or not a string is
    rejected with the table reasons; NFC applies to it as to text files."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    rows = [{"id": 1, "body": "kept e\u0301", "extra": None}, {"id": 2}, {"id": 3, "body": None},
            {"id": 4, "body": "  "}, {"id": 5, "body": 17}, {"id": 6, "body": "kept \u00e9"},
            {"id": 7, "body": "second", "extra": [1, 2]}]
    write_text(raw / "t.jsonl", "".join(json.dumps(r) + "\n" for r in rows) + "{broken\n")
    res = cli("shard", raw, out, "--tokenizer", "bytes", "--text-column", "body")
    assert res.rc == 0, res.text
    reasons = {r["row"]: r["reason"] for r in read_rejects(out)}
    assert reasons == {2: "missing_column", 3: "empty_text", 4: "empty_text", 5: "wrong_type", 6: "duplicate",
                       8: "bad_row"}
    assert megatron_documents(out) == [[*"kept \u00e9".encode(), 256], [*b"second", 256]]


def test_a_run_that_keeps_nothing_fails_unless_allowed(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    write_text(raw / "docs.txt", "a\nb\n")
    res = cli("shard", raw, tmp_path / "out", "--tokenizer", "bytes", "--text-unit", "line", "--min-tokens", "5")
    assert res.rc == 1 and "too_few_tokens 2" in res.err, res.text
    res = cli("shard", raw, tmp_path / "empty", "--tokenizer", "bytes", "--text-unit", "line", "--min-tokens", "5",
              "--allow-empty")
    assert res.rc == 0, res.text
    manifest = json.loads((tmp_path / "empty" / MANIFEST).read_text())
    assert manifest["shards"] == [] and manifest["tokenizer"]["name"] == "bytes"
    assert cli("verify", tmp_path / "empty").rc == 0
