"""What a run decides once and hands down (``RunSpec``, ``RunContext``), how its cores are shared
(``WriterSplit``), and what its write loop returns (``RunOutcome``)."""

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
class WriterSplit:
    """How a run shares its ``--workers`` cores: ``writers`` processes each writing ranges of the plan, each
    cleaning on ``threads`` threads (1: inline, on the writing thread); ``why`` says what chose it.

    One writer is the run's own process (nothing forked but a media run's supervised child).
    """

    writers: int
    threads: int
    why: str = ""

    def describe(self) -> str:
        """'4 writer processes x 2 cleaning threads' / '1 process, cleaning inline'."""
        who = "1 process" if self.writers == 1 else f"{self.writers} writer processes"
        how = "cleaning inline" if self.threads == 1 else f"{self.threads} cleaning threads"
        return f"{who} x {how}" if self.writers > 1 and self.threads > 1 else f"{who}, {how}"

    def to_json(self) -> dict[str, Any]:
        return {"writers": self.writers, "threads_per_writer": self.threads, "why": self.why}


@dataclass(frozen=True)
class RunOutcome:
    """What the write loop of a run produced (``processed``, ``bytes_out``: this run's own work; ``split``:
    how the engine shared the cores, None where it does not say; ``writer_peak_kib``: the largest peak
    resident memory of its writer processes, KiB, None without writer processes or /proc)."""

    totals: Totals
    shards: tuple[ShardInfo, ...]
    processed: int
    bytes_out: int
    split: WriterSplit | None = None
    writer_peak_kib: int | None = None
