"""What a run decides once and hands down (``RunSpec``, ``RunContext``), and what its write loop returns
(``RunOutcome``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataprep.engines.handlers import LayoutHandler
from dataprep.formats.manifest import ShardInfo, Totals
from dataprep.formats.registry import WriterOptions
from dataprep.inputs.raw_source import RawSource
from dataprep.output.store import OutputStore
from dataprep.plan.run_plan import RunPlan
from dataprep.tokenize.tokenizer import Tokenizer


@dataclass(frozen=True)
class RunSpec:
    """What a run writes, decided once by the command (``dataprep.commands.shard``); picklable, the same on
    every node and in every writer.

    handler: the plan's layout (``dataprep.engines.handlers``); output_format: ``Manifest.format``;
    fingerprint: the options that shape the output bytes; writer: how shards roll over
    (``formats.registry.WriterOptions``); prefix: shard names are ``{prefix}-{range:05d}-{n:06d}``;
    raw: RAW (rejects name a remote RAW's objects by their URL); tokenizer: the loaded
    ``--tokenizer`` of token output, else None; min_tokens: the fewest tokens (EOS not counted)
    a kept document has.
    """

    handler: LayoutHandler
    output_format: str
    fingerprint: dict[str, Any]
    writer: WriterOptions
    prefix: str
    raw: RawSource
    tokenizer: Tokenizer | None = None
    min_tokens: int = 1


@dataclass(frozen=True)
class RunContext:
    """One run (or one range task) as the write loop reads it: what it writes (``spec``), into ``store``
    (OUT, or an attempt's folder), from ``plan`` (the saved run plan), with ``workers`` cleaning threads or
    processes (and tokenizing threads)."""

    spec: RunSpec
    store: OutputStore
    plan: RunPlan
    workers: int = 1


@dataclass(frozen=True)
class RunOutcome:
    """What the write loop of a run produced (``processed``, ``bytes_out``: this run's own work)."""

    totals: Totals
    shards: tuple[ShardInfo, ...]
    processed: int
    bytes_out: int
