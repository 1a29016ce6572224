"""Sample raw data for the demo, the tests and the benchmarks, deterministic in a seed.

``python -m dataprep.synthetic OUT [--images N] [--classes K] [--seed S] [--no-broken]
[--no-tables] [--no-text] [--documents N]`` writes, under OUT:

- ``images/class_KK/img_NNNN.jpg``: an image-folder tree of N valid images over K
  classes. Photo-like content (1/f^alpha colour texture over per-class gradients and soft
  shapes), ImageNet-like sizes (mostly ~500x375 either way, some 1024x768 and 320x240).
  Images 1.. are special variants (``SPECIAL_KINDS``: PNG RGB/RGBA/palette/16-bit grey,
  grey and CMYK JPEG, EXIF orientation 6, odd and undecodable file names); some images
  have a caption ``.txt`` and a ``.json`` object with the same stem. With ``broken``,
  extra files that cleaning must reject (``BROKEN_KINDS``), each declared in the report.
- ``tables/part-0.csv`` and ``tables/part-1.jsonl``: ``TABLE_COLUMNS``, 200 rows each;
  9 malformed rows (wrong type, null id or missing name, extra CSV field, invalid JSON,
  Latin-1 bytes, one duplicate id), declared in the report.
- ``text/*.txt``: UTF-8 paragraphs with a duplicate line, NFC and NFD spellings of one
  text, a whitespace-only file and a file with a line of Latin-1 (invalid UTF-8) bytes.
- with ``--documents N``, ``corpus/``: a text corpus to tokenize, N documents with a
  realistic length spread (many short, 1 in 40 several thousand tokens long), exact
  duplicates and broken inputs (empty, blank, invalid UTF-8), as ``text/doc_NNNNN.txt``
  and as ``table/documents.jsonl`` (a ``text`` column), and ``tokenizer.json``, a small
  byte-level BPE trained on it (needs ``tokenizers``).

Same seed and library versions (libjpeg, zlib) -> byte-identical files.

Modules:
    spec      ``SyntheticSpec``, ``SyntheticReport``, argument checks, the random-stream ids
    sink      the byte-counting file ``Sink`` and the empty-or-absent output directory check
    vocab     words, subjects and people for captions, metadata, rows and text
    photos    ``photo_like``: 1/f^alpha texture over gradients and soft shapes; encoding
    images    ``make_image_tree``: valid photos, special variants, sidecars, broken files
    tables    the CSV and JSONL table files with declared malformed rows
    text      the text files (duplicate line, NFC/NFD, blank, Latin-1)
    corpus    the text corpus for tokenization: length spread, duplicates, broken inputs, two layouts
    bpe       ``train_bpe``: a small byte-level BPE tokenizer.json trained on given texts
    dataset   ``make_dataset``: images, tables and text under one root
    cli       ``main``: argument parsing and the summary line (``__main__`` runs it)
"""

from __future__ import annotations

from dataprep.synthetic.bpe import bpe_json, train_bpe
from dataprep.synthetic.cli import main
from dataprep.synthetic.corpus import corpus_kind, iter_documents, make_corpus, write_corpus
from dataprep.synthetic.dataset import make_dataset
from dataprep.synthetic.images import BROKEN_KINDS, ODD_NAME, SPECIAL_KINDS, UNDECODABLE_NAME, make_image_tree
from dataprep.synthetic.photos import photo_like
from dataprep.synthetic.spec import CorpusReport, SyntheticReport, SyntheticSpec
from dataprep.synthetic.tables import TABLE_COLUMNS, TABLE_ROWS_PER_FILE

__all__ = [
    "BROKEN_KINDS",
    "CorpusReport",
    "ODD_NAME",
    "SPECIAL_KINDS",
    "SyntheticReport",
    "SyntheticSpec",
    "TABLE_COLUMNS",
    "TABLE_ROWS_PER_FILE",
    "UNDECODABLE_NAME",
    "bpe_json",
    "corpus_kind",
    "iter_documents",
    "main",
    "make_corpus",
    "make_dataset",
    "make_image_tree",
    "photo_like",
    "train_bpe",
    "write_corpus",
]
