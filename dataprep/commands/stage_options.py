"""``ShardConfig`` -> the small frozen options each stage of a run reads: the one reader of its fields.

Every stage below the command takes the values it uses: RAW (``RawSource``), OUT (``OutTarget``),
planning (``PlanOptions``), the shard writers (``WriterOptions``), what the write loop writes
(``RunSpec``) and the reject budget (``RejectBudget``). The options a run's layout makes
meaningless are refused here, before anything is written.
"""

from __future__ import annotations

from typing import Any

from dataprep.commands.config import ShardConfig
from dataprep.commands.run_end import RejectBudget
from dataprep.engines.context import RunSpec
from dataprep.engines.handlers import LayoutHandler, make_handler
from dataprep.errors import UsageError
from dataprep.formats.registry import WriterOptions
from dataprep.inputs.raw_source import RawSource
from dataprep.inputs.sources import Layout, LayoutChoice
from dataprep.output.target import OutTarget
from dataprep.plan.run_plan import PlanOptions, RunPlan
from dataprep.tokenize.tokenizer import Tokenizer


def raw_source(config: ShardConfig) -> RawSource:
    """RAW of the run: its folder (a remote RAW's mirror), URL, symlink policy, the longest record read; OUT is never
    read as input."""
    return RawSource(root=config.raw, url=config.raw_url, follow_symlinks=config.follow_symlinks, exclude=config.out,
                     timeout_s=config.remote_timeout_s, max_record_bytes=config.max_record_bytes)


def out_target(config: ShardConfig) -> OutTarget:
    """OUT of the run: its folder (a remote OUT's staging folder) and URL."""
    return OutTarget(folder=config.out, url=config.out_url, timeout_s=config.remote_timeout_s)


def plan_options(config: ShardConfig) -> PlanOptions:
    """What planning reads: RAW, the range size, the media order, the text unit, the table options."""
    return PlanOptions(raw=raw_source(config), range_bytes=config.range_bytes, seed=config.seed,
                       shuffle=config.shuffle, text_unit=config.text.unit, table=config.table,
                       text_column=config.tokens.column if config.is_tokenized else None)


def reject_budget(config: ShardConfig) -> RejectBudget:
    """``--max-reject-fraction`` and ``--allow-empty``."""
    return RejectBudget(max_fraction=config.max_reject_fraction, allow_empty=config.allow_empty)


def layout_handler(config: ShardConfig, plan: RunPlan, output_format: str) -> LayoutHandler:
    """The handler of the plan's layout, with the cleaning options of the run and the longest record read."""
    return make_handler(plan, config.image, config.table, config.text, output_format,
                        text_column=config.tokens.column, max_record_bytes=config.max_record_bytes)


def run_spec(config: ShardConfig, handler: LayoutHandler, output_format: str, fingerprint: dict[str, Any],
             tokenizer: Tokenizer | None) -> RunSpec:
    """What the run writes (``RunSpec``), decided once."""
    writer = WriterOptions(max_shard_bytes=config.max_shard_bytes, max_samples_per_shard=config.max_samples_per_shard,
                           row_group_bytes=config.row_group_bytes, parquet_schema=handler.parquet_schema(),
                           token_dtype=tokenizer.dtype if tokenizer is not None else None)
    return RunSpec(handler=handler, output_format=output_format, fingerprint=fingerprint, writer=writer,
                   prefix=config.prefix, raw=raw_source(config), tokenizer=tokenizer,
                   min_tokens=config.tokens.fewest_tokens)


def refuse_other_layouts_options(config: ShardConfig, choice: LayoutChoice) -> None:
    """Table options (and ``--text-column``) over a RAW that is not a table would be ignored: a usage error instead."""
    if choice.layout is Layout.TABLE:
        return
    table = config.table
    given = [flag for flag, value in (("--schema", table.schema), ("--dedup-on", table.dedup_on),
                                      ("--required", table.required or None),
                                      ("--text-column", config.tokens.text_column)) if value is not None]
    if given:
        raise UsageError(f"{', '.join(given)} applies to tables, but RAW {config.raw} is {choice.layout} "
                         f"({choice.reason}); leave it out, or pass --layout table if RAW holds tables")
