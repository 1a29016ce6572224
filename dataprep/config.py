"""``ShardConfig``: every option of ``dataprep shard``, validated once."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataprep.clean.options import ImageOptions, TableOptions, TextOptions
from dataprep.errors import UsageError
from dataprep.sources import Layout

# One unit for sizes everywhere: MiB (the CLI's defaults, the writers' and the README's).
DEFAULT_SHARD_BYTES = 256 * 2**20
DEFAULT_ROW_GROUP_BYTES = 64 * 2**20
# A range (the unit of work of a multi-node run) holds about this much input.
DEFAULT_RANGE_BYTES = 4 * 2**30


class OutputFormat(enum.StrEnum):
    AUTO = "auto"
    WDS = "wds"
    PARQUET = "parquet"


def default_workers() -> int:
    """All CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class ShardConfig:
    """Options of one ``dataprep shard RAW OUT`` run.

    Options that shape the output bytes are in ``fingerprint()``; the rest (workers,
    progress, budgets, ``allow_empty``: a run that keeps no sample succeeds) may change
    between a run and its resumption. ``range_bytes``: input bytes per range of the plan.
    """

    raw: Path
    out: Path
    layout: Layout | None = None  # None = detect
    output_format: OutputFormat = OutputFormat.AUTO
    max_shard_bytes: int | None = DEFAULT_SHARD_BYTES
    max_samples_per_shard: int | None = None
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    prefix: str = "shard"
    seed: int = 0
    shuffle: bool = True
    image: ImageOptions = field(default_factory=ImageOptions)
    table: TableOptions = field(default_factory=TableOptions)
    text: TextOptions = field(default_factory=TextOptions)
    workers: int = field(default_factory=default_workers)
    follow_symlinks: bool = False
    overwrite: bool = False
    max_reject_fraction: float | None = None
    allow_empty: bool = False
    range_bytes: int = DEFAULT_RANGE_BYTES

    def __post_init__(self) -> None:
        if self.max_shard_bytes is None and self.max_samples_per_shard is None:
            raise UsageError("give --shard-size and/or --samples-per-shard")
        for name in ("max_shard_bytes", "max_samples_per_shard", "row_group_bytes", "workers", "range_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise UsageError(f"'{name}' must be a positive int (got {value!r} that is a {type(value).__name__})")
        if not self.prefix or "/" in self.prefix or self.prefix.startswith("."):
            raise UsageError(f"'prefix' must be a plain file-name prefix (got {self.prefix!r})")
        if self.max_reject_fraction is not None and not 0.0 <= self.max_reject_fraction <= 1.0:
            raise UsageError(f"'max_reject_fraction' must be within [0, 1] (got {self.max_reject_fraction!r})")

    def fingerprint(self) -> dict[str, Any]:
        """The options that determine the output bytes, as JSON-ready values (stored in the manifest)."""
        return {
            "raw": os.fsdecode(Path(self.raw).resolve()),
            "layout": str(self.layout) if self.layout else "auto",
            "format": str(self.output_format),
            "max_shard_bytes": self.max_shard_bytes,
            "max_samples_per_shard": self.max_samples_per_shard,
            "row_group_bytes": self.row_group_bytes,
            "range_bytes": self.range_bytes,
            "prefix": self.prefix,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "follow_symlinks": self.follow_symlinks,
            "image": _jsonable(self.image),
            "table": _jsonable(self.table),
            "text": _jsonable(self.text),
        }


def _jsonable(options: object) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in getattr(options, "__dataclass_fields__", {}):
        value = getattr(options, name)
        if isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out
