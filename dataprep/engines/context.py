"""What a run decides once and hands down (``RunContext``), and what its write loop returns (``RunOutcome``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataprep.commands.config import ShardConfig
from dataprep.engines.handlers import LayoutHandler
from dataprep.formats.manifest import ShardInfo, Totals
from dataprep.plan.run_plan import RunPlan
from dataprep.output.store import OutputStore
from dataprep.tokenize.tokenizer import Tokenizer
from dataprep.formats.registry import WriterOptions


@dataclass(frozen=True)
class RunContext:
    """One run as every stage reads it, decided once: by ``dataprep.commands.shard``, or once per range task.

    store: OUT (``dataprep.output.store``); plan: the saved run plan; handler: the plan's layout
    (``dataprep.engines.handlers``); output_format: ``Manifest.format``, from ``writers.choose_format``;
    fingerprint: ``config.fingerprint(tokenizer)``, the options that shape the output bytes;
    tokenizer: the loaded ``--tokenizer`` of token output (loaded once, by the driver), else None.
    """

    config: ShardConfig
    store: OutputStore
    plan: RunPlan
    handler: LayoutHandler
    output_format: str
    fingerprint: dict[str, Any]
    tokenizer: Tokenizer | None = None

    @property
    def writer_options(self) -> WriterOptions:
        """How every range's writer rolls shards over (``writers.open_writer``)."""
        config = self.config
        return WriterOptions(max_shard_bytes=config.max_shard_bytes, max_samples_per_shard=config.max_samples_per_shard,
                             row_group_bytes=config.row_group_bytes, parquet_schema=self.handler.parquet_schema(),
                             token_dtype=self.tokenizer.dtype if self.tokenizer is not None else None)


@dataclass(frozen=True)
class RunOutcome:
    """What the write loop of a run produced (``processed``, ``bytes_out``: this run's own work)."""

    totals: Totals
    shards: tuple[ShardInfo, ...]
    processed: int
    bytes_out: int
