"""Options of the cleaning step: frozen, picklable, validated once at construction."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dataprep.errors import UsageError

# Pillow's default decompression-bomb threshold (``PIL.Image.MAX_IMAGE_PIXELS``).
DEFAULT_MAX_PIXELS = 89_478_485
TABLE_TYPES = frozenset({"int64", "double", "string", "bool"})
NORMAL_FORMS = frozenset({"NFC", "NFD", "NFKC", "NFKD"})
RESERVED_COLUMNS = frozenset({"__key__", "__source__", "__row__"})


class ImageFormat(enum.StrEnum):
    """Encoding of images that must be re-encoded; the value is the output field name."""

    JPEG = "jpg"
    PNG = "png"


class TextUnit(enum.StrEnum):
    """One text sample per file or per line."""

    FILE = "file"
    LINE = "line"


def _fail(name: str, expected: str, value: object) -> UsageError:
    return UsageError(f"'{name}' must be {expected} (got {value!r} that is a {type(value).__name__})")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(name: str, value: object, minimum: int, expected: str) -> None:
    if not _is_int(value) or value < minimum:  # type: ignore[operator]
        raise _fail(name, expected, value)


def _check_optional_positive(name: str, value: object) -> None:
    if value is not None:
        _check_int(name, value, 1, "a positive int or None")


def _as_enum(name: str, cls: type[enum.StrEnum], value: object) -> enum.StrEnum:
    if isinstance(value, cls):
        return value
    choices = ", ".join(repr(m.value) for m in cls)
    if not isinstance(value, str):
        raise _fail(name, f"one of {choices}", value)
    try:
        return cls(value)
    except ValueError:
        raise _fail(name, f"one of {choices}", value) from None


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
        _check_int("min_side", self.min_side, 0, "a non-negative int")
        _check_int("max_pixels", self.max_pixels, 1, "a positive int")
        _check_optional_positive("resize_short", self.resize_short)
        _check_optional_positive("max_side", self.max_side)
        if self.resize_short is not None and self.max_side is not None:
            raise UsageError(
                f"'resize_short' and 'max_side' are mutually exclusive (got {self.resize_short} and {self.max_side})"
            )
        if not _is_int(self.quality) or not 1 <= self.quality <= 100:
            raise _fail("quality", "an int within 1..100", self.quality)
        object.__setattr__(self, "reencode_format", _as_enum("reencode_format", ImageFormat, self.reencode_format))
        background = self.background
        if (
            not isinstance(background, (tuple, list))
            or len(background) != 3
            or not all(_is_int(c) and 0 <= c <= 255 for c in background)
        ):
            raise _fail("background", "three ints within 0..255 (R, G, B)", background)
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
                raise _fail("schema", "a non-empty dict of column -> type name or None", self.schema)
            for column, type_name in self.schema.items():
                if not isinstance(column, str) or not column or column in RESERVED_COLUMNS:
                    raise _fail("schema", f"keyed by column names neither empty nor reserved {sorted(RESERVED_COLUMNS)}", column)
                if type_name not in TABLE_TYPES:
                    raise _fail(f"schema[{column!r}]", f"one of {sorted(TABLE_TYPES)}", type_name)
            object.__setattr__(self, "schema", dict(self.schema))  # no aliasing of the caller's dict
        if self.required is not None:
            if isinstance(self.required, str) or not all(isinstance(c, str) and c for c in self.required):
                raise _fail("required", "a tuple of column names or None", self.required)
            object.__setattr__(self, "required", tuple(self.required))
        if self.dedup_on is not None and (not isinstance(self.dedup_on, str) or not self.dedup_on):
            raise _fail("dedup_on", "a column name or None", self.dedup_on)
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
        object.__setattr__(self, "unit", _as_enum("unit", TextUnit, self.unit))
        if self.normalize not in NORMAL_FORMS:
            raise _fail("normalize", f"one of {sorted(NORMAL_FORMS)}", self.normalize)
