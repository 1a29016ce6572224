"""tools.common.synthetic: only colour JPEGs are kept for decode timings; a failing ``dataprep shard`` names its
paths."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from tools.common.report import ToolError
from tools.common.synthetic import rgb_jpegs, shard


def encoded(mode: str, image_format: str) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (8, 8)).save(buf, format=image_format)
    return buf.getvalue()


def test_rgb_jpegs_keeps_colour_jpegs_only() -> None:
    colour = encoded("RGB", "JPEG")
    assert rgb_jpegs([encoded("L", "JPEG"), colour, encoded("CMYK", "JPEG"), encoded("RGB", "PNG")]) == [colour]


def test_failing_shard_command_names_the_paths_and_the_exit_status(tmp_path: Path) -> None:
    raw, out = tmp_path / "absent", tmp_path / "out"
    with pytest.raises(ToolError, match=r"dataprep shard .*absent .*out failed \(\d+\)"):
        shard(raw, out, resize_short=64)
