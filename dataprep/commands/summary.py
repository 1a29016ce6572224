"""Run summaries: the end-of-run table of ``dataprep shard`` and its JSON form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataprep.engines.context import WriterSplit
from dataprep.formats.manifest import Totals
from dataprep.formats.sizes import format_bytes


@dataclass(frozen=True)
class Summary:
    """What a ``dataprep shard`` run produced. Rates count this run's own work (not resumed parts).

    tokens: token ids in the shards (EOS included) for token output, else None. split: how the run
    shared its ``--workers`` cores (``engines.context.WriterSplit``: writer processes x cleaning threads,
    and why), None where the engine does not say (``--engine ray``, an OUT already complete).
    peak_mib: the peak resident memory of this process and of its largest writer process (MiB; None:
    not measured, or no writer processes).
    """

    out: str
    layout: str
    output_format: str
    totals: Totals
    shards: int
    bytes_written: int
    elapsed_s: float
    samples_per_s: float
    mb_per_s: float
    resumed_from_shard: int | None = None
    already_complete: bool = False
    layout_reason: str | None = None
    tokens: int | None = None
    split: WriterSplit | None = None
    peak_mib: tuple[float | None, float | None] = (None, None)

    def to_json(self) -> dict[str, Any]:
        return {
            "out": self.out,
            "layout": self.layout,
            "layout_reason": self.layout_reason,
            "format": self.output_format,
            "totals": self.totals.to_json(),
            "shards": self.shards,
            "bytes": self.bytes_written,
            "elapsed_s": round(self.elapsed_s, 3),
            "samples_per_s": round(self.samples_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 2),
            "resumed_from_shard": self.resumed_from_shard,
            "already_complete": self.already_complete,
            "tokens": self.tokens,
            "workers": self.split.to_json() if self.split is not None else None,
            "peak_rss_mib": {"process": self.peak_mib[0], "largest_writer": self.peak_mib[1]},
        }


def format_table(rows: list[tuple[str, str]]) -> str:
    """Two aligned columns, labels left, values right."""
    width = max(len(label) for label, _ in rows)
    vwidth = max(len(value) for _, value in rows)
    return "\n".join(f"{label:<{width}}  {value:>{vwidth}}" for label, value in rows)


def format_summary(summary: Summary) -> str:
    t = summary.totals
    rows = [
        ("output", summary.out),
        ("layout / format", f"{summary.layout} / {summary.output_format}"),
        *([("layout chosen because", summary.layout_reason)] if summary.layout_reason else []),
        ("inputs seen", f"{t.inputs_seen:,}"),
        ("samples kept", f"{t.samples_kept:,}"),
        ("rejected", f"{t.rejected:,}"),
    ]
    rows += [(f"  {reason}", f"{count:,}") for reason, count in sorted(t.rejected_by_reason.items())]
    rows += [("tokens (EOS included)", f"{summary.tokens:,}")] if summary.tokens is not None else []
    rows += [
        ("shards", f"{summary.shards:,}"),
        ("bytes written", format_bytes(summary.bytes_written)),
    ]
    if summary.already_complete:
        rows.append(("status", "already complete (nothing to do)"))
    else:
        rows += [
            ("elapsed", f"{summary.elapsed_s:.2f} s"),
            ("throughput", f"{summary.samples_per_s:,.1f} samples/s, {summary.mb_per_s:,.1f} MB/s written"),
        ]
        if summary.split is not None:
            rows += [("workers", summary.split.describe()), ("  because", summary.split.why)]
        process, writer = summary.peak_mib
        if process is not None:
            rows.append(("peak memory", f"{process:,.0f} MiB" + (f", largest writer {writer:,.0f} MiB"
                                                                 if writer is not None else "")))
        if summary.resumed_from_shard is not None:
            rows.append(("resumed at shard", str(summary.resumed_from_shard)))
    return format_table(rows)
