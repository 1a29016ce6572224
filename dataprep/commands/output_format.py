"""Which output format a run writes: from ``--format``, ``--tokenizer`` and RAW's layout, decided once."""

from __future__ import annotations

from dataprep.inputs.detection import Layout
from dataprep.errors import UsageError
from dataprep.formats.manifest import FORMAT_PARQUET, FORMAT_TOKENS, FORMAT_WDS


def choose_format(requested: str, layout: Layout, *, tokenized: bool = False) -> str:
    """The output format for ``--format`` (auto, wds, parquet, tokens), ``--tokenizer`` (``tokenized``) and the layout.

    A tokenizer makes token shards, of text (text files, or a table's text column) only.
    """
    if tokenized:
        if layout.is_media:
            raise UsageError(f"--tokenizer tokenizes text, but RAW is {layout} (media files); leave out --tokenizer, "
                             "or give a RAW of text files or tables (--layout text or table)")
        if requested not in ("auto", FORMAT_TOKENS):
            raise UsageError(f"--tokenizer writes token shards (--format {FORMAT_TOKENS}), not --format {requested}; "
                             "leave out --format, or --tokenizer")
        return FORMAT_TOKENS
    if requested == FORMAT_TOKENS:
        raise UsageError(f"--format {FORMAT_TOKENS} needs --tokenizer TOK: a Hugging Face tokenizer.json, or bytes "
                         "(UTF-8 bytes as ids)")
    if requested == "auto":
        return FORMAT_WDS if layout.is_media else FORMAT_PARQUET
    if requested == FORMAT_WDS and not layout.is_media:
        raise UsageError(f"--format wds holds media samples; a {layout} dataset goes to --format parquet")
    return requested
