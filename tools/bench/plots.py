"""The benchmark plots of docs/benchmarks.md and README.md, drawn from figures already measured.

    python -m tools.bench.plots [--data docs/img/figures.json] [--out docs/img]

Measures nothing: it reads ``--data`` (figures copied from tools/RESULTS.md, each entry naming its
section, command, machine and date) and writes one PNG per question into ``--out``:
``stock.png`` (ours against the stock DataLoader), ``remote-peers.png`` (object storage against Mosaic
Streaming and LitData), ``writers.png`` (dataprep on 1 and 2 cores), ``gpu.png`` (ResNet-50 fed on one
GPU), ``tokens.png`` (tokenization) and ``codecs.png`` (compressed inputs). Needs matplotlib (the ``plot``
extra). The PNGs are committed; rerun this after changing the data file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = ROOT / "docs" / "img" / "figures.json"
DEFAULT_OUT = ROOT / "docs" / "img"
DATA_VERSION = 1


def _caption(entry: dict[str, Any]) -> str:
    return f"{entry['machine']}, {entry['date']}\n{entry['command']}"


def _label(value: float) -> str:
    """1,598 / 97,561 for counts, 1.65 / 0.757 for ratios and rates below 100."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _grouped_bars(ax: Any, rows: dict[str, Sequence[float]], groups: Sequence[str]) -> None:
    """One horizontal bar per (row, group), rows top to bottom, a legend of the groups."""
    height = 0.8 / len(groups)
    names = list(rows)
    for g, group in enumerate(groups):
        positions = [i + g * height for i in range(len(names))]
        values = [rows[name][g] for name in names]
        bars = ax.barh(positions, values, height=height, label=group)
        ax.bar_label(bars, labels=[_label(v) for v in values], padding=2, fontsize=8)
    ax.set_yticks([i + height * (len(groups) - 1) / 2 for i in range(len(names))], names)
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize=8)


def _bars(ax: Any, rows: dict[str, float]) -> None:
    names = list(rows)
    bars = ax.barh(names, [rows[n] for n in names])
    ax.bar_label(bars, labels=[_label(rows[n]) for n in names], padding=2, fontsize=8)
    ax.invert_yaxis()


def _stock(ax: Any, entry: dict[str, Any]) -> None:
    _grouped_bars(ax, entry["rows"], entry["photos"])
    ax.axvline(1.0, color="grey", linewidth=0.8)


def _remote(ax: Any, entry: dict[str, Any]) -> None:
    _grouped_bars(ax, entry["rows"], entry["epochs"])


def _writers(ax: Any, entry: dict[str, Any]) -> None:
    speedups = {name: two / one for name, (one, two) in entry["rows"].items()}
    _bars(ax, speedups)
    ax.axvline(2.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlim(0, 2.2)


def _gpu(ax: Any, entry: dict[str, Any]) -> None:
    _bars(ax, entry["rows"])
    ax.axvline(entry["ceiling"], color="grey", linewidth=0.8, linestyle="--")


def _simple(ax: Any, entry: dict[str, Any]) -> None:
    _bars(ax, entry["rows"])


# (file name, data key, title, x label, how to draw)
PLOTS: tuple[tuple[str, str, str, str, Callable[[Any, dict[str, Any]], None]], ...] = (
    ("stock.png", "stock", "Against the stock DataLoader, same JPEG bytes", "x the stock DataLoader (uint8)", _stock),
    ("remote-peers.png", "remote", "Shards in S3 (50 MB/s link): 2 epochs", "img/s", _remote),
    ("writers.png", "writers", "dataprep shard: 2 cores against 1", "speed-up, --workers 2 / --workers 1 (2 = ideal)",
     _writers),
    ("gpu.png", "gpu", "ResNet-50 training fed on one H200 (ceiling dashed)", "img/s", _gpu),
    ("tokens.png", "tokens", "Tokenization, byte-level BPE of 8,000 ids", "M tokens/s", _simple),
    ("codecs.png", "codecs", "Reading compressed JSON lines as rows, one core", "MiB/s (CPU)", _simple),
)


def load(path: Path) -> dict[str, Any]:
    """The data file, checked for its version."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("version") != DATA_VERSION:
        raise SystemExit(f"{path}: version {data.get('version')!r}, expected {DATA_VERSION}")
    return data


def draw(data: dict[str, Any], out: Path) -> list[Path]:
    """Write every plot of ``PLOTS`` into ``out``; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, key, title, xlabel, render in PLOTS:
        entry = data[key]
        fig, ax = plt.subplots(figsize=(8, 0.5 * len(entry["rows"]) + 1.8))
        render(ax, entry)
        ax.set_title(title, fontsize=11)
        ax.set_xlabel(xlabel)
        ax.margins(x=0.15)
        fig.text(0.01, 0.01, _caption(entry), fontsize=7, color="dimgrey", va="bottom")
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        path = out / name
        fig.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the figures (JSON)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder of the PNGs")
    args = parser.parse_args(argv)
    for path in draw(load(args.data), args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
