"""Cleaning options: validation messages, normalisation of values, pickling, the package's __all__."""

from __future__ import annotations

import pickle

import pytest

import dataprep.clean
from dataprep.clean.options import ImageFormat, ImageOptions, TableOptions, TextOptions
from dataprep.inputs.text import TextUnit
from dataprep.errors import UsageError


def test_public_api_is_pinned() -> None:
    assert dataprep.clean.__all__ == sorted(dataprep.clean.__all__)
    assert set(dataprep.clean.__all__) == {
        "ImageFormat", "ImageOptions", "TableOptions", "TextOptions", "arrow_schema", "clean_image", "clean_row",
        "clean_table_text", "clean_text", "dedup_digest", "dedup_value", "infer_schema", "jpeg_structure_problem",
        "png_structure_problem", "target_size", "text_digest",
    }


def test_defaults() -> None:
    opts = ImageOptions()
    assert (opts.min_side, opts.max_pixels, opts.quality,
            opts.reencode_format) == (32, 89_478_485, 95, ImageFormat.JPEG)
    assert TextOptions().unit is TextUnit.FILE and TextOptions().normalize == "NFC"
    assert TableOptions().schema is None and TableOptions().required == ()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_side": -3}, "'min_side' must be a non-negative int (got -3 that is a int)"),
        ({"max_pixels": 0}, "'max_pixels' must be a positive int (got 0 that is a int)"),
        ({"max_pixels": True}, "'max_pixels' must be a positive int (got True that is a bool)"),
        ({"resize_short": 0}, "'resize_short' must be a positive int or None (got 0 that is a int)"),
        ({"max_side": 2.5}, "'max_side' must be a positive int or None (got 2.5 that is a float)"),
        ({"resize_short": 256, "max_side": 512}, "mutually exclusive"),
        ({"quality": 101}, "'quality' must be an int within 1..100 (got 101 that is a int)"),
        ({"reencode_format": "gif"}, "'reencode_format' must be one of 'jpg', 'png' (got 'gif' that is a str)"),
        ({"background": (0, 0)}, "'background' must be three ints within 0..255"),
        ({"background": (0, 0, 256)}, "'background' must be three ints within 0..255"),
    ],
)
def test_image_options_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as info:
        ImageOptions(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_image_options_normalise_values() -> None:
    opts = ImageOptions(reencode_format="png", background=[1, 2, 3])  # type: ignore[arg-type]
    assert opts.reencode_format is ImageFormat.PNG and opts.background == (1, 2, 3)
    assert hash(opts) == hash(ImageOptions(reencode_format=ImageFormat.PNG, background=(1, 2, 3)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schema": {}}, "'schema' must be a non-empty dict"),
        ({"schema": {"a": "int32"}}, "'schema['a']' must be one of"),
        ({"schema": {"__row__": "int64"}}, "reserved"),
        ({"schema": {"a": "int64"}, "required": ("b",)}, "column 'b' is not in the schema"),
        ({"schema": {"a": "int64"}, "dedup_on": "b"}, "column 'b' is not in the schema"),
        ({"required": "a"}, "'required' must be a tuple of column names or None"),
        ({"dedup_on": ""}, "'dedup_on' must be a column name or None"),
    ],
)
def test_table_options_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as info:
        TableOptions(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_table_options_copy_the_schema_and_accept_lists() -> None:
    schema = {"a": "int64"}
    opts = TableOptions(schema=schema, required=["a"], dedup_on="a")  # type: ignore[arg-type]
    schema["b"] = "string"
    assert opts.schema == {"a": "int64"} and opts.required == ("a",)


def test_text_options_validation() -> None:
    assert TextOptions(unit="line").unit is TextUnit.LINE  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="'unit' must be one of 'file', 'line'"):
        TextOptions(unit="word")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="'normalize' must be one of"):
        TextOptions(normalize="nfc")


@pytest.mark.parametrize(
    "opts",
    [ImageOptions(resize_short=256), TableOptions(schema={"a": "int64"}, required=None),
     TextOptions(unit=TextUnit.LINE)],
)
def test_options_pickle_for_worker_processes(opts: object) -> None:
    assert pickle.loads(pickle.dumps(opts)) == opts


def test_options_are_frozen() -> None:
    with pytest.raises(AttributeError):
        ImageOptions().quality = 50  # type: ignore[misc]
