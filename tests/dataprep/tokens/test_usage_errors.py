"""Token output's usage errors: exit 2, a message naming the file or option and the fix, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dataprep.helpers import MANIFEST, STATE_DIR, image_tree, write_text
from tests.dataprep.token_samples import TokenCorpus, word_level


def assert_refused(cli, raw: Path, out: Path, *args: object, says: tuple[str, ...]) -> None:
    res = cli("shard", raw, out, *args)
    assert res.rc == 2, res.text
    assert "Traceback" not in res.err and all(part in res.err for part in says), res.err
    assert not (out / MANIFEST).exists() and not (out / STATE_DIR).exists()
    assert not out.exists() or not list(out.iterdir()), sorted(p.name for p in out.iterdir())


@pytest.fixture
def text_raw(tmp_path: Path) -> Path:
    return write_text(tmp_path / "raw" / "docs.txt", "one document\nanother\n").parent


def test_a_tokenizer_that_cannot_be_used_is_named(cli, tmp_path: Path, text_raw: Path) -> None:
    out = tmp_path / "out"
    assert_refused(cli, text_raw, out, "--tokenizer", tmp_path / "missing.json",
                   says=("missing.json: no such tokenizer file", "never fetched"))
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)  # reading it fails (ELOOP) whatever the user's rights
    assert_refused(cli, text_raw, out, "--tokenizer", loop, says=("loop.json: cannot read the tokenizer file",))
    garbage = write_text(tmp_path / "garbage.json", '{"not": "a tokenizer"}')
    assert_refused(cli, text_raw, out, "--tokenizer", garbage,
                   says=("garbage.json: not a Hugging Face tokenizer.json",))


def test_a_tokenizer_without_an_eos_needs_one_named(cli, tmp_path: Path, text_raw: Path) -> None:
    pytest.importorskip("tokenizers")
    plain = word_level(tmp_path / "plain.json", 10, specials=("<pad>",))
    out = tmp_path / "out"
    assert_refused(cli, text_raw, out, "--tokenizer", plain, says=("plain.json: no end-of-document token", "--eos"))
    assert_refused(cli, text_raw, out, "--tokenizer", plain, "--eos", "</eos>",
                   says=("--eos '</eos>' is not a token of this tokenizer", "<pad>"))
    assert cli("shard", text_raw, out, "--tokenizer", plain, "--eos", "<pad>", "--text-unit", "line").rc == 0


def test_media_cannot_be_tokenized(cli, tmp_path: Path) -> None:
    raw = tmp_path / "images"
    image_tree(raw, {"cat": 2, "dog": 2})
    assert_refused(cli, raw, tmp_path / "out", "--tokenizer", "bytes",
                   says=("--tokenizer tokenizes text, but RAW is image-folder", "leave out --tokenizer"))


def test_format_and_tokenizer_must_agree(cli, tmp_path: Path, text_raw: Path) -> None:
    out = tmp_path / "out"
    assert_refused(cli, text_raw, out, "--format", "tokens", says=("--format tokens needs --tokenizer TOK",))
    assert_refused(cli, text_raw, out, "--format", "parquet", "--tokenizer", "bytes",
                   says=("--tokenizer writes token shards", "not --format parquet"))


def test_token_options_without_a_tokenizer_or_with_table_options(cli, tmp_path: Path, text_raw: Path) -> None:
    out = tmp_path / "out"
    assert_refused(cli, text_raw, out, "--eos", "</s>", "--min-tokens", "3",
                   says=("--eos, --min-tokens apply to token output; add --tokenizer",))
    assert_refused(cli, text_raw, out, "--tokenizer", "bytes", "--eos", "</s>",
                   says=("--eos '</s>': the 'bytes' tokenizer's EOS is '<|endoftext|>'",))
    assert_refused(cli, text_raw, out, "--tokenizer", "bytes", "--text-column", "body",
                   says=("--text-column applies to tables, but RAW", "is text"))
    table = write_text(tmp_path / "table" / "t.jsonl", '{"text": "a"}\n').parent
    assert_refused(cli, table, out, "--tokenizer", "bytes", "--dedup-on", "text",
                   says=("--dedup-on: with --tokenizer a table's --text-column", "leave these options out"))


def test_a_text_column_that_no_table_has_is_refused(cli, tmp_path: Path, corpus: TokenCorpus) -> None:
    for layout in ("jsonl", "csv", "parquet"):
        assert_refused(cli, corpus.folder(layout), tmp_path / layout, "--tokenizer", "bytes", "--text-column", "body",
                       says=("--text-column 'body': no such column", "columns found: id, text"))
    assert_refused(cli, corpus.folder("jsonl"), tmp_path / "default", "--tokenizer", corpus.tokenizer,
                   "--layout", "table", "--text-column", "id ", says=("--text-column 'id ': no such column",))
