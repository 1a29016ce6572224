"""--plot writes a PNG where matplotlib is installed (an optional extra; skipped without it)."""

from __future__ import annotations

from pathlib import Path

import pytest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_cpu_and_disk_plots(sharded: tuple[Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from tools.profile import cpu, disk

    png = tmp_path / "cpu.png"
    assert cpu.main([str(sharded[1]), "--n", "4", "--max-workers", "1", "--repeat", "1", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == PNG_MAGIC
    png = tmp_path / "disk.png"
    assert disk.main([str(sharded[1]), "--random-samples", "8", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == PNG_MAGIC
