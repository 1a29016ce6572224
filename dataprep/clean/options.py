"""Options of the cleaning step: frozen, picklable, validated once at construction."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dataprep.errors import UsageError
from dataprep.inputs.tables import RESERVED_COLUMNS
from dataprep.inputs.text import TextUnit
from dataprep.errors import as_enum, require_int, bad_argument, is_int

# Pillow's default decompression-bomb threshold (``PIL.Image.MAX_IMAGE_PIXELS``).
DEFAULT_MAX_PIXELS = 89_478_485
TABLE_TYPES = frozenset({"int64", "double", "string", "bool"})
NORMAL_FORMS = frozenset({"NFC", "NFD", "NFKC", "NFKD"})


class ImageFormat(enum.StrEnum):
    """Encoding of images that must be re-encoded; the value is the output field name."""

    JPEG = "jpg"
    PNG = "png"


@dataclass(frozen=True)
class ImageOptions:
    """How images are checked and normalised.

    min_side: reject images whose shorter side (pixels, after EXIF orientation) is smaller; 0 = no minimum.
    max_pixels: reject images with more pixels than this, before decoding. Pillow refuses
        more than 2 x ``PIL.Image.MAX_IMAGE_PIXELS`` whatever this says.
    resize_short: downscale so that the shorter side is this many pixels (never upscale).
    max_side: downscale so that the longer side is at most this many pixels.
    quality: JPEG quality (1..100) of re-encoded images.
    reencode_format: encoding of images that cannot keep their original bytes.
    background: RGB colour (0..255 each) that transparent pixels are composited on.
    """

    min_side: int = 32
    max_pixels: int = DEFAULT_MAX_PIXELS
    resize_short: int | None = None
    max_side: int | None = None
    quality: int = 95
    reencode_format: ImageFormat = ImageFormat.JPEG
    background: tuple[int, int, int] = (255, 255, 255)

    def __post_init__(self) -> None:
        require_int("min_side", self.min_side, minimum=0, error=UsageError)
        require_int("max_pixels", self.max_pixels, minimum=1, error=UsageError)
        require_int("resize_short", self.resize_short, minimum=1, optional=True, error=UsageError)
        require_int("max_side", self.max_side, minimum=1, optional=True, error=UsageError)
        if self.resize_short is not None and self.max_side is not None:
            raise UsageError(
                f"'resize_short' and 'max_side' are mutually exclusive (got {self.resize_short} and {self.max_side})"
            )
        require_int("quality", self.quality, minimum=1, maximum=100, error=UsageError)
        object.__setattr__(self, "reencode_format",
                           as_enum("reencode_format", ImageFormat, self.reencode_format, error=UsageError))
        background = self.background
        if (
            not isinstance(background, (tuple, list))
            or len(background) != 3
            or not all(is_int(c) and 0 <= c <= 255 for c in background)
        ):
            raise bad_argument("background", "three ints within 0..255 (R, G, B)", background, UsageError)
        object.__setattr__(self, "background", tuple(background))


@dataclass(frozen=True)
class TableOptions:
    """How table rows are checked.

    schema: column -> type name (one of ``TABLE_TYPES``); None = infer from the first rows.
    required: columns that must be present and non-null; None = every column of the schema.
    dedup_on: drop rows whose value in this column repeats an earlier row's (done by the caller).
    """

    schema: dict[str, str] | None = None
    required: tuple[str, ...] | None = ()
    dedup_on: str | None = None

    def __post_init__(self) -> None:
        if self.schema is not None:
            if not isinstance(self.schema, dict) or not self.schema:
                raise bad_argument("schema", "a non-empty dict of column -> type name or None", self.schema, UsageError)
            for column, type_name in self.schema.items():
                if not isinstance(column, str) or not column or column in RESERVED_COLUMNS:
                    expected = f"keyed by column names neither empty nor reserved {sorted(RESERVED_COLUMNS)}"
                    raise bad_argument("schema", expected, column, UsageError)
                if type_name not in TABLE_TYPES:
                    raise bad_argument(f"schema[{column!r}]", f"one of {sorted(TABLE_TYPES)}", type_name, UsageError)
            object.__setattr__(self, "schema", dict(self.schema))  # no aliasing of the caller's dict
        if self.required is not None:
            if isinstance(self.required, str) or not all(isinstance(c, str) and c for c in self.required):
                raise bad_argument("required", "a tuple of column names or None", self.required, UsageError)
            object.__setattr__(self, "required", tuple(self.required))
        if self.dedup_on is not None and (not isinstance(self.dedup_on, str) or not self.dedup_on):
            raise bad_argument("dedup_on", "a column name or None", self.dedup_on, UsageError)
        if self.schema is not None:
            for name in (*(self.required or ()), *([self.dedup_on] if self.dedup_on else [])):
                if name not in self.schema:
                    raise UsageError(f"column {name!r} is not in the schema (columns: {', '.join(self.schema)})")


@dataclass(frozen=True)
class TextOptions:
    """How text is split and normalised.

    unit: one sample per file or per line.
    normalize: Unicode normal form applied to kept text ("NFC", "NFD", "NFKC" or "NFKD").
    """

    unit: TextUnit = TextUnit.FILE
    normalize: str = "NFC"

    def __post_init__(self) -> None:
        object.__setattr__(self, "unit", as_enum("unit", TextUnit, self.unit, error=UsageError))
        if self.normalize not in NORMAL_FORMS:
            raise bad_argument("normalize", f"one of {sorted(NORMAL_FORMS)}", self.normalize, UsageError)
