"""Cleaning: RawRecord -> CleanRecord | Reject(reason), per record, in worker threads or processes.

- options    ImageOptions, TableOptions, TextOptions (frozen, validated, picklable)
- images     clean_image: check, strictly decode, normalise to RGB, re-encode only when needed
- structure  what decoders skip: JPEG marker structure, PNG chunk CRCs and IEND
- tables     infer_schema, clean_row, arrow_schema, dedup_digest (the rows come from ``dataprep.inputs.tables``)
- text       clean_text, clean_table_text (token output), text_digest (records from ``dataprep.inputs.text``)
"""

from __future__ import annotations

from dataprep.clean.images import clean_image, target_size
from dataprep.clean.options import ImageFormat, ImageOptions, TableOptions, TextOptions
from dataprep.clean.structure import jpeg_structure_problem, png_structure_problem
from dataprep.clean.tables import arrow_schema, clean_row, dedup_digest, dedup_value, infer_schema
from dataprep.clean.text import clean_table_text, clean_text, text_digest

__all__ = [
    "ImageFormat",
    "ImageOptions",
    "TableOptions",
    "TextOptions",
    "arrow_schema",
    "clean_image",
    "clean_row",
    "clean_table_text",
    "clean_text",
    "dedup_digest",
    "dedup_value",
    "infer_schema",
    "jpeg_structure_problem",
    "png_structure_problem",
    "target_size",
    "text_digest",
]
