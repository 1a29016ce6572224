"""What to generate (``SyntheticSpec``), what was written (``SyntheticReport``, ``CorpusReport``), argument checks,
random streams."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dataprep.errors import UsageError
from dataprep.errors import require_bool, require_int

# Random streams, one per scope, so that images do not depend on tables and vice versa.
STREAM_CLASS, STREAM_IMAGE, STREAM_BROKEN, STREAM_TABLE, STREAM_TEXT, STREAM_CORPUS = range(6)


def check_count(name: str, value: object, minimum: int) -> None:
    """Raise UsageError unless ``value`` is an int (not a bool) >= ``minimum``."""
    require_int(name, value, minimum=minimum, expected=f"an int >= {minimum}", error=UsageError)


@dataclasses.dataclass(frozen=True)
class SyntheticSpec:
    """What ``make_dataset`` writes: ``images`` valid images over ``classes`` folders, and more.

    documents: documents of the text corpus for tokenization (``corpus/``; 0: none).
    """

    images: int = 200
    classes: int = 10
    seed: int = 0
    broken: bool = True
    tables: bool = True
    text: bool = True
    sidecars: bool = True
    documents: int = 0

    def __post_init__(self) -> None:
        check_count("images", self.images, 1)
        check_count("documents", self.documents, 0)
        check_count("classes", self.classes, 1)
        check_count("seed", self.seed, 0)
        for name in ("broken", "tables", "text", "sidecars"):
            require_bool(name, getattr(self, name), error=UsageError)
        if self.classes > self.images:
            raise UsageError(f"'classes' must be <= 'images' so no class folder is empty (got classes={self.classes}, "
                             f"images={self.images})")


@dataclasses.dataclass(frozen=True)
class CorpusReport:
    """What ``write_corpus`` wrote under ``root`` (``dataprep.synthetic.corpus``).

    documents: inputs in each layout (files in ``text/``, rows of the table); kept: the
    distinct valid documents (what a run with exact dedup keeps); duplicates: document
    index -> index of the earlier document it repeats; rejects: document index -> reject
    reason value (``empty_text``, ``invalid_utf8``); bytes_written: bytes of every file;
    tokenizer: the BPE ``tokenizer.json`` trained on the corpus, if one was.
    """

    root: Path
    documents: int
    kept: int
    duplicates: dict[int, int] = dataclasses.field(default_factory=dict)
    rejects: dict[int, str] = dataclasses.field(default_factory=dict)
    bytes_written: int = 0
    tokenizer: Path | None = None


@dataclasses.dataclass(frozen=True)
class SyntheticReport:
    """What was written under ``root``; for the expected outcome of cleaning each input.

    image_files: valid images (cleaning keeps them all); sidecars and broken files not counted.
    broken: path relative to ``root/images`` -> the RejectReason value cleaning must give it.
    special: path relative to ``root/images`` -> kind (``SPECIAL_KINDS``) of a valid variant.
    table_rows / bad_table_rows: data rows (lines after any CSV header) in all table files.
    table_rejects: (file relative to ``root/tables``, 1-based line number in that file,
    the CSV header being line 1) -> the RejectReason value.
    bytes_written: bytes in all files written.
    corpus: the text corpus for tokenization, if one was written.
    """

    root: Path
    image_files: int
    broken: dict[str, str]
    table_rows: int
    bad_table_rows: int
    text_files: int
    bytes_written: int
    special: dict[str, str] = dataclasses.field(default_factory=dict)
    table_rejects: dict[tuple[str, int], str] = dataclasses.field(default_factory=dict)
    corpus: CorpusReport | None = None
