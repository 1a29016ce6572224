"""Cleaning: RawRecord -> CleanRecord | Reject(reason), per record, in worker processes.

- options    ImageOptions, TableOptions, TextOptions (frozen, validated, picklable)
- images     clean_image: check, strictly decode, normalise to RGB, re-encode only when needed
- structure  what decoders skip: JPEG marker structure, PNG chunk CRCs and IEND
- tables     iter_table_rows (CSV/TSV, JSONL, Parquet), infer_schema, clean_row, arrow_schema
- text       iter_text_records (per file or line), clean_text, clean_table_text (token output), text_digest
"""

from __future__ import annotations

from dataprep.clean.images import IMAGE_FIELDS, clean_image, target_size
from dataprep.clean.options import ImageFormat, ImageOptions, TableOptions, TextOptions, TextUnit
from dataprep.clean.structure import jpeg_structure_problem, png_structure_problem
from dataprep.clean.tables import (
    TABLE_SUFFIXES,
    RowError,
    arrow_schema,
    clean_row,
    dedup_digest,
    dedup_value,
    infer_schema,
    iter_table_rows,
    source_key_stem,
)
from dataprep.clean.text import clean_table_text, clean_text, iter_text_records, text_digest

__all__ = [
    "IMAGE_FIELDS",
    "ImageFormat",
    "ImageOptions",
    "RowError",
    "TABLE_SUFFIXES",
    "TableOptions",
    "TextOptions",
    "TextUnit",
    "arrow_schema",
    "clean_image",
    "clean_row",
    "clean_table_text",
    "clean_text",
    "dedup_digest",
    "dedup_value",
    "infer_schema",
    "iter_table_rows",
    "iter_text_records",
    "jpeg_structure_problem",
    "png_structure_problem",
    "source_key_stem",
    "target_size",
    "text_digest",
]
