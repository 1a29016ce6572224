"""What differs by layout, behind one small interface, so that the run loop is generic.

A ``LayoutHandler`` (frozen, picklable: it is sent to each worker once) says, for one
layout, how a planned unit becomes raw records (``records``, in the parent), how a raw
record becomes the sample a writer takes (``clean``, in a worker: cleaning and the row
mapping of the output format), which content makes two samples duplicates
(``dedup_digest``), the Parquet schema of its samples, and whether its inputs are media
(``is_media``: one raw record per unit, cleaned on threads). The handler is built once per
run (``make_handler``) and passed down; the write loop (``dataprep.engines.write_loop``) knows
nothing else about layouts. Token output reads text: text files as for text output, and
a table's text column (``TableTextHandler``); its tokenization is a stage of the write
loop (``dataprep.tokenize.stage``), after deduplication.

A ``Packer`` sits between cleaning and the writer: it turns N kept inputs into M samples
(``IdentityPacker``: one each). A packer that concatenates and cuts (fixed-length token
samples for language-model training) keeps its carry-over in ``state_dict()``, which
the checkpoint stores; at the end of a range ``finish`` flushes the carry, so nothing
crosses a range boundary and a range's output depends only on the plan and the range.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import pyarrow as pa

from dataprep.clean.images import clean_image
from dataprep.clean.options import ImageOptions, TableOptions, TextOptions
from dataprep.clean.tables import arrow_schema, clean_row, dedup_digest
from dataprep.clean.text import clean_table_text, clean_text, text_digest
from dataprep.inputs.lines import DEFAULT_MAX_RECORD_BYTES
from dataprep.inputs.tables import iter_table_rows
from dataprep.inputs.text import iter_text_records
from dataprep.formats.manifest import FORMAT_TOKENS, FORMAT_WDS
from dataprep.formats.samples import CleanRecord, EncodedSample
from dataprep.inputs.records import RawRecord, Reject, RejectReason
from dataprep.inputs.records import FilePart, Unit
from dataprep.plan.run_plan import RunPlan
from dataprep.inputs.sources import Layout
from dataprep.formats.tar.writer import encode_sample

Result = CleanRecord | EncodedSample | Reject

# Columns of Parquet shards holding images; other fields of a sample go to "extra".
IMAGE_PARQUET_COLUMNS = (("jpg", pa.binary()), ("png", pa.binary()), ("cls", pa.int64()), ("txt", pa.string()),
                         ("json", pa.string()))
TEXT_PARQUET_SCHEMA = pa.schema([("__key__", pa.string()), ("text", pa.string()), ("__source__", pa.string()),
                                 ("__row__", pa.int64())])


class LayoutHandler(Protocol):
    """The per-layout part of a run (module docstring).

    is_media: inputs are media files: one raw record per unit, cleaned on threads in a
    supervised child (decoders release the GIL; a crashing decoder is isolated), and
    counted up front (the plan's length). Otherwise units are files of rows or lines,
    cleaned in worker processes.
    """

    is_media: ClassVar[bool]

    def records(self, unit: Unit) -> Iterator[RawRecord | Reject]:
        """The raw records of one planned unit, in order (a Reject unit yields itself)."""
        ...

    def clean(self, raw: RawRecord) -> Result:
        """A raw record -> the sample as the writer takes it, or why not (runs in a worker)."""
        ...

    def dedup_digest(self, sample: CleanRecord | EncodedSample) -> bytes | None:
        """Digest whose repetition makes ``sample`` a duplicate of an earlier one; None: never a duplicate."""
        ...

    def finds_duplicates(self) -> bool:
        """Whether ``dedup_digest`` may return a digest (a range-parallel run then looks for duplicates first)."""
        ...

    def parquet_schema(self) -> pa.Schema:
        """The columns of this layout's Parquet shards."""
        ...


class Packer(Protocol):
    """Kept inputs -> samples, with carry-over (module docstring)."""

    def push(self, sample: CleanRecord | EncodedSample) -> list[CleanRecord | EncodedSample]: ...

    def finish(self) -> list[CleanRecord | EncodedSample]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class IdentityPacker:
    """One sample per kept input; no carry-over."""

    def push(self, sample: CleanRecord | EncodedSample) -> list[CleanRecord | EncodedSample]:
        return [sample]

    def finish(self) -> list[CleanRecord | EncodedSample]:
        return []

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"IdentityPacker has no state (got {sorted(state)})")


def _bad_field_name(name: object) -> bool:
    """True for a field name a shard cannot hold (empty, starting with '_', with '/', or not UTF-8)."""
    if not isinstance(name, str) or not name or name.startswith("_") or "/" in name:
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@dataclass(frozen=True)
class MediaHandler:
    """image-folder and grouped: one input per unit, images cleaned, duplicates found by the plan."""

    is_media: ClassVar[bool] = True

    image: ImageOptions
    label_map: dict[str, int] | None
    output_format: str

    def records(self, unit: Unit) -> Iterator[RawRecord | Reject]:
        if isinstance(unit, FilePart):
            raise TypeError(f"a media plan holds no file parts (got {unit.source!r})")
        yield unit

    def clean(self, raw: RawRecord) -> Result:
        bad = sorted(repr(f) for f in raw.files if _bad_field_name(f))
        if bad:
            detail = (f"file names give fields {', '.join(bad)} that a shard cannot hold "
                      "(empty, starting with '_', or not UTF-8); rename the files")
            return Reject(raw.source, RejectReason.UNSUPPORTED, detail)
        label = self.label_map.get(raw.label) if self.label_map is not None and raw.label is not None else None
        result = clean_image(raw, self.image, label)
        if not isinstance(result, CleanRecord):
            return result
        if self.output_format == FORMAT_WDS:
            try:
                return encode_sample(result)
            except (TypeError, ValueError) as err:
                return Reject(raw.source, RejectReason.UNSUPPORTED, f"cannot be stored in a tar shard: {err}")
        return _parquet_row(result)

    def dedup_digest(self, sample: CleanRecord | EncodedSample) -> bytes | None:
        return None

    def finds_duplicates(self) -> bool:
        return False  # media duplicates are found while planning

    def parquet_schema(self) -> pa.Schema:
        return pa.schema([("__key__", pa.string()), *IMAGE_PARQUET_COLUMNS,
                          ("extra", pa.map_(pa.string(), pa.binary()))])


def _parquet_row(record: CleanRecord) -> CleanRecord | Reject:
    """Image sample bytes fields -> typed Parquet columns; a ``cls`` that is not an integer is a reject."""
    fields = dict(record.fields)
    row: dict[str, object] = {"jpg": fields.pop("jpg", None), "png": fields.pop("png", None)}
    cls = fields.pop("cls", None)
    try:
        row["cls"] = int(cls) if isinstance(cls, bytes) else None
    except ValueError:
        shown = cls[:40] if isinstance(cls, bytes) else cls
        return Reject(record.source, RejectReason.BAD_LABEL,
                      f"cls {shown!r} is not an integer; Parquet shards store cls as int64 "
                      "(use --format wds to keep it as text)")
    for name in ("txt", "json"):
        value = fields.pop(name, None)
        row[name] = value.decode("utf-8") if isinstance(value, bytes) else None
    row["extra"] = sorted(fields.items()) or None
    return CleanRecord(record.key, record.source, row)


@dataclass(frozen=True)
class TableHandler:
    """table: rows of file parts, coerced to the plan's schema; duplicates by ``--dedup-on``.

    max_record_bytes: the longest row read (``--max-record-bytes``), here and in the other file layouts.
    """

    is_media: ClassVar[bool] = False

    schema: dict[str, str]
    options: TableOptions
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES

    def records(self, unit: Unit) -> Iterator[RawRecord | Reject]:
        return _table_records(unit, self.max_record_bytes)

    def clean(self, raw: RawRecord) -> Result:
        return clean_row(raw, self.schema, self.options)

    def dedup_digest(self, sample: CleanRecord | EncodedSample) -> bytes | None:
        if self.options.dedup_on is None or not isinstance(sample, CleanRecord):
            return None
        return dedup_digest(sample, self.options.dedup_on)

    def finds_duplicates(self) -> bool:
        return self.options.dedup_on is not None

    def parquet_schema(self) -> pa.Schema:
        return arrow_schema(self.schema)


@dataclass(frozen=True)
class TextHandler:
    """text: files or lines of file parts, decoded and normalised; exact duplicates dropped."""

    is_media: ClassVar[bool] = False

    options: TextOptions
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES

    def records(self, unit: Unit) -> Iterator[RawRecord | Reject]:
        if not isinstance(unit, FilePart):
            yield unit
            return
        yield from iter_text_records(Path(unit.path), unit.source, self.options.unit, key_stem=unit.key,
                                     start=unit.start, end=unit.end, first_row=unit.first_row,
                                     max_record_bytes=self.max_record_bytes)

    def clean(self, raw: RawRecord) -> Result:
        return clean_text(raw, self.options)

    def dedup_digest(self, sample: CleanRecord | EncodedSample) -> bytes | None:
        return text_digest(sample) if isinstance(sample, CleanRecord) else None

    def finds_duplicates(self) -> bool:
        return True

    def parquet_schema(self) -> pa.Schema:
        return TEXT_PARQUET_SCHEMA


@dataclass(frozen=True)
class TableTextHandler(TextHandler):
    """table, tokenized: the text of column ``column`` of each row, cleaned and deduplicated as text is."""

    column: str = "text"

    def records(self, unit: Unit) -> Iterator[RawRecord | Reject]:
        return _table_records(unit, self.max_record_bytes)

    def clean(self, raw: RawRecord) -> Result:
        return clean_table_text(raw, self.column, self.options)


def _table_records(unit: Unit, max_record_bytes: int) -> Iterator[RawRecord | Reject]:
    """The rows of a table file part (a Reject unit yields itself)."""
    if not isinstance(unit, FilePart):
        yield unit
        return
    yield from iter_table_rows(Path(unit.path), unit.source, key_stem=unit.key, start=unit.start, end=unit.end,
                               first_row=unit.first_row, max_record_bytes=max_record_bytes)


def make_handler(plan: RunPlan, image: ImageOptions, table: TableOptions, text: TextOptions,
                 output_format: str, *, text_column: str = "text",
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> LayoutHandler:
    """The handler of the plan's layout (built once per run, or once per range task).

    ``text_column``: the column of a table that token output (``FORMAT_TOKENS``) tokenizes;
    ``max_record_bytes``: the longest line, row or text file read (tables and text).
    """
    layout = plan.layout
    if layout is Layout.TABLE:
        if output_format == FORMAT_TOKENS:
            return TableTextHandler(options=text, column=text_column, max_record_bytes=max_record_bytes)
        return TableHandler(plan.info.table_schema or {}, table, max_record_bytes)
    if layout is Layout.TEXT:
        return TextHandler(text, max_record_bytes)
    return MediaHandler(image, plan.info.label_map, output_format)
