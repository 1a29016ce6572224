"""``make_dataset``: the image tree, the tables, the text and the text corpus under one root, in one report."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from dataprep.synthetic.corpus import make_corpus
from dataprep.synthetic.images import make_image_tree
from dataprep.synthetic.sink import Sink, prepare_dir
from dataprep.synthetic.spec import SyntheticReport, SyntheticSpec
from dataprep.synthetic.tables import TABLE_ROWS_PER_FILE, write_tables
from dataprep.synthetic.text import write_text


def make_dataset(root: str | os.PathLike[str], spec: SyntheticSpec | None = None) -> SyntheticReport:
    """Write ``images/``, ``tables/``, ``text/`` and, with ``spec.documents``, ``corpus/`` under ``root``.

    ``root`` is created and must be empty or absent; ``spec``: what to write (default
    ``SyntheticSpec()``). The corpus needs ``tokenizers`` (its ``tokenizer.json``).
    """
    spec = spec if spec is not None else SyntheticSpec()
    top = Path(root)
    prepare_dir(top)
    tree = make_image_tree(top / "images", images=spec.images, classes=spec.classes, seed=spec.seed,
                           broken=spec.broken, sidecars=spec.sidecars)
    sink = Sink()
    table_rejects = write_tables(top / "tables", spec.seed, sink) if spec.tables else {}
    text_files = write_text(top / "text", spec.seed, sink) if spec.text else 0
    corpus = make_corpus(top / "corpus", spec.seed, spec.documents, sink) if spec.documents else None
    return dataclasses.replace(
        tree,
        root=top,
        table_rows=2 * TABLE_ROWS_PER_FILE if spec.tables else 0,
        bad_table_rows=len(table_rejects),
        text_files=text_files,
        bytes_written=tree.bytes_written + sink.bytes_written,
        table_rejects=table_rejects,
        corpus=corpus,
    )
