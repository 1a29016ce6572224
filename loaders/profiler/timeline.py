"""The report's PNG timeline: each loader's wait share over time above its seconds per batch by stage.

matplotlib comes with the ``plot`` extra (``pip install 'shardfeed[plot]'``); without it
``write_timeline`` writes nothing and says so. The figure is drawn on its own Agg canvas, never
through pyplot, so the training script's own matplotlib state (backend, open figures) is untouched.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["NO_MATPLOTLIB", "write_timeline"]

NO_MATPLOTLIB = "not written: matplotlib is not installed (pip install 'shardfeed[plot]')"
_SHOWN_STAGES = ("dataset", "collate", "pin", "transfer", "device_decode")  # read/decode/transform are in dataset


def write_timeline(report: Mapping[str, Any], path: str | os.PathLike[str]) -> tuple[Path | None, str]:
    """Draw ``report``'s timeline to ``path``; (the path, "") or (None, why not)."""
    loaders = [entry for entry in report["loaders"] if entry["timeline"]]
    if not loaders:
        return None, "not written: no loader handed over batches"
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None, NO_MATPLOTLIB
    figure = Figure(figsize=(10, 2.6 * len(loaders) + 1.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2 * len(loaders), 1, sharex=True, squeeze=False)[:, 0]
    for index, entry in enumerate(loaders):
        _draw_waits(axes[2 * index], entry)
        _draw_stages(axes[2 * index + 1], entry)
    axes[-1].set_xlabel("seconds since the script started")
    figure.suptitle(f"shardfeed-profile: {report['run']['target']}")
    target = Path(path)
    figure.savefig(target, dpi=100)
    return target, ""


def _draw_waits(ax: Any, entry: Mapping[str, Any]) -> None:
    from matplotlib.ticker import MaxNLocator

    points = entry["timeline"]
    times = [p["t_s"] for p in points]
    ax.plot(times, [100 * p["wait_fraction"] for p in points], color="tab:red", label="waits for data")
    ax.set_ylim(0, 100)
    ax.set_ylabel("% of loop time")
    summary = entry["summary"]
    ax.set_title(f"{entry['name']} ({entry['dataset']}): waits {summary['wait_fraction']:.0%}, "
                 f"bottleneck {summary['bottleneck']}", fontsize=10, loc="left")
    workers = ax.twinx()
    workers.step(times, [p["workers"] for p in points], where="post", color="tab:gray", label="workers")
    workers.set_ylabel("workers")
    workers.set_ylim(0, max(p["workers"] for p in points) + 1)
    workers.yaxis.set_major_locator(MaxNLocator(integer=True))
    for decision in entry["tuning"]:
        if decision.get("t_s") is not None:
            ax.axvline(decision["t_s"], color="tab:green", linestyle=":", linewidth=1)
    ax.legend(loc="upper left", fontsize=8)
    workers.legend(loc="upper right", fontsize=8)


def _draw_stages(ax: Any, entry: Mapping[str, Any]) -> None:
    points = entry["timeline"]
    times = [p["t_s"] for p in points]
    ax.plot(times, [1e3 * p["step_s"] for p in points], color="black", label="step")
    for name in _SHOWN_STAGES:
        values = [1e3 * p["stages"].get(name, 0.0) for p in points]
        if any(values):
            ax.plot(times, values, label=name)
    ax.set_ylabel("ms per batch")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8, ncol=3)
