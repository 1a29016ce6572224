"""Fixtures of the cleaning tests: files written into tmp_path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dataprep.inputs.records import RawRecord


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, bytes], str]:
    """write(name, data) -> absolute path of a new file under tmp_path."""
    def _write(name: str, data: bytes) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return str(path)

    return _write


@pytest.fixture
def record(write: Callable[[str, bytes], str]) -> Callable[..., RawRecord]:
    """record(files={field: bytes}, label=None) -> RawRecord whose files are written under tmp_path."""
    def _record(files: dict[str, bytes], label: str | None = None, source: str = "cat/img.jpg") -> RawRecord:
        paths = {field: write(f"img.{field}", data) for field, data in files.items()}
        return RawRecord("cat_img", source, paths, label)

    return _record
