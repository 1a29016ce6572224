"""Host-to-device copy bandwidth and the PCIe link's theoretical peak (gpu_bench part 1)."""

from __future__ import annotations

import functools
import subprocess
from typing import Any

import torch

from tools.common.report import ToolError
from tools.gpu.timing import time_ms
from tools.gpu.train_step import Sizes

# PCIe per-lane transfer rate (GT/s) by generation; the line code's payload share is below.
_PCIE_GT_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def pcie_peak_gb_s(gen: int, width: int) -> float:
    """Theoretical one-direction PCIe payload rate in GB/s (10^9 B/s) of ``width`` lanes of
    generation ``gen``: line rate x line-code efficiency (8b/10b, 128b/130b, gen 6 FLIT
    242/256), before packet headers, which cost real copies another ~10-15 %."""
    if gen not in _PCIE_GT_S or width < 1:
        raise ToolError(f"no PCIe generation {gen} / width {width} (known generations {sorted(_PCIE_GT_S)})")
    encoding = 0.8 if gen <= 2 else (128 / 130 if gen <= 5 else 242 / 256)
    return _PCIE_GT_S[gen] * width * encoding / 8


def link_info(device: torch.device) -> dict[str, Any]:
    """The GPU's PCIe link as ``nvidia-smi`` reports it (max and current generation and width)
    and ``peak_gb_s`` for the max ones; ``{"skipped": why}`` where it cannot be read."""
    if device.type != "cuda":
        return {"skipped": "no CUDA device"}
    query = "pcie.link.gen.max,pcie.link.width.max,pcie.link.gen.current,pcie.link.width.current"
    command = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", str(device.index or 0)]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return {"skipped": f"nvidia-smi failed: {err}"}
    try:
        gen_max, width_max, gen_now, width_now = (int(v) for v in out.strip().splitlines()[0].split(","))
        peak = pcie_peak_gb_s(gen_max, width_max)
    except (ValueError, IndexError, ToolError) as err:
        return {"skipped": f"unreadable nvidia-smi output {out.strip()!r}: {err}"}
    return {"gen_max": gen_max, "width_max": width_max, "gen_current": gen_now, "width_current": width_now,
            "peak_gb_s": peak}


def measure_h2d(device: torch.device, sizes: Sizes, peak_gb_s: float | None = None,
                repeats: int = 10) -> list[dict[str, Any]]:
    """Part 1: one [B, side, side, 3] batch copied to ``device``, per dtype and host memory kind.

    Rows: dtype, host ("pinned"/"pageable"), mb (10^6 B), ms per copy, gb_s, and
    ``of_link_peak`` (gb_s / ``peak_gb_s``; None when no peak is known).
    """
    rows = []
    for dtype in (torch.uint8, torch.float32):
        for pinned in (True, False):
            if pinned and device.type != "cuda":
                continue  # pinned memory needs CUDA
            # Random bytes, not a constant: no path may gain from compressible data.
            src = torch.randint(0, 256, (sizes.batch, sizes.side, sizes.side, 3), dtype=torch.uint8).to(dtype)
            src = src.pin_memory() if pinned else src
            dst = torch.empty_like(src, device=device)
            # Only a pinned source can be copied asynchronously; a pageable one is staged by
            # the driver and blocks the host either way, so ask for what really happens.
            ms = time_ms(functools.partial(dst.copy_, src, non_blocking=pinned), device, repeats=repeats)
            size_bytes = src.numel() * src.element_size()
            gb_s = size_bytes / ms / 1e6
            rows.append({"dtype": str(dtype).removeprefix("torch."), "host": "pinned" if pinned else "pageable",
                         "mb": size_bytes / 1e6, "ms": ms, "gb_s": gb_s,
                         "of_link_peak": gb_s / peak_gb_s if peak_gb_s else None})
    return rows
