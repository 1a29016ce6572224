"""``dataprep shard``, the command: open OUT and the run plan, choose the engine, end the run, report.

One run, in order: load the tokenizer of token output (``--tokenizer``: a usage error
before anything is written), check RAW and OUT, lock OUT (``output.make_output``: a folder,
or object storage through a staging folder), see what it holds (``RunOutput.open``: fresh, a
run to resume, or finished), then open the run: the saved plan (RAW must be unchanged) or a
new one (``dataprep.plan.run_plan``; a remote RAW is mirrored first, ``dataprep.inputs.raw_source``), and with it
everything decided once and handed down as a ``RunContext``: the output store, the
layout's handler, the output format, the options' fingerprint (with the tokenizer's
sha256), the tokenizer. The engine writes the ranges (``LocalEngine``: this
machine, checkpointed; ``RayEngine``: range tasks on a cluster); then the rejects file is
published, the budgets checked and the manifest written last (``dataprep.commands.run_end``).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from dataprep.engines import ray_engine
from dataprep.plan.checkpoint import Checkpoint, save_checkpoint, state_dir
from dataprep.commands.config import Engine, ShardConfig
from dataprep.errors import UsageError
from dataprep.engines.handlers import LayoutHandler, make_handler, refuse_other_layouts_options
from dataprep.engines.local_engine import LocalEngine
from dataprep.commands.outdir import OutputState
from dataprep.commands.run_output import make_output
from dataprep.inputs.raw_source import MirroredRaw, check_planned_here, mirror_raw
from dataprep.engines.progress import ProgressLine
from dataprep.commands.summary import Summary
from dataprep.engines.context import RunContext, RunOutcome
from dataprep.commands.run_end import (already_complete, build_manifest, check_budgets, check_raw_unchanged,
                                       publish_manifest, publish_rejects, summary_of)
from dataprep.plan.run_plan import RunPlan, make_run_plan, plan_names
from dataprep.inputs.sources import LayoutChoice, choose_layout
from dataprep.output.store import OutputStore
from dataprep.tokenize.tokenizer import Tokenizer, load_tokenizer
from dataprep.engines.write_loop import Item
from dataprep.commands.output_format import choose_format


class WriteEngine(Protocol):
    """Where the ranges of a plan are written (``--engine``)."""

    def check(self) -> None:
        """Raise ``UsageError`` if the engine cannot run here (before anything is written)."""
        ...

    def run(self, ctx: RunContext, checkpoint: Checkpoint, progress: ProgressLine) -> RunOutcome:
        """Write every range not yet done, from ``checkpoint``; refuses a run that the other engine started."""
        ...


def make_engine(config: ShardConfig) -> WriteEngine:
    """The engine of ``--engine`` (the one place that reads it)."""
    if config.engine is Engine.RAY:
        return ray_engine.RayEngine(config.address)
    return LocalEngine()


def shard(config: ShardConfig, *, argv: tuple[str, ...] = (), progress: ProgressLine | None = None) -> Summary:
    """Run ``dataprep shard`` (see the module docstring). Raises DataprepError subclasses."""
    started = time.monotonic()
    engine = make_engine(config)
    engine.check()
    tokenizer = run_tokenizer(config)
    with make_output(config) as output, MirroredRaw(config):
        fingerprint = config.fingerprint(tokenizer)
        store = output.store
        state = output.open(fingerprint, overwrite=config.overwrite)
        if state.finished is not None:
            return already_complete(config, state.finished)
        ctx, checkpoint = _open_run(config, store, state, fingerprint, tokenizer)
        progress = progress or ProgressLine(None, enabled=False)
        progress.total = len(ctx.plan) if ctx.handler.is_media else None
        outcome = engine.run(ctx, checkpoint, progress)
        publish_rejects(store)
        check_budgets(config, outcome.totals)
        publish_manifest(store, build_manifest(ctx, outcome, argv))
        output.finish()
    resumed_from_shard = checkpoint.next_shard if state.plan is not None else None
    return summary_of(ctx, outcome, time.monotonic() - started, resumed_from_shard)


def run_tokenizer(config: ShardConfig) -> Tokenizer | None:
    """The tokenizer of ``--tokenizer`` (and ``--eos``), loaded once per run; None without token output."""
    spec = config.tokens.tokenizer
    return None if spec is None else load_tokenizer(spec, eos=config.tokens.eos)


def _open_run(config: ShardConfig, store: OutputStore, state: OutputState, fingerprint: dict[str, Any],
              tokenizer: Tokenizer | None) -> tuple[RunContext, Checkpoint]:
    """The run: its saved plan and checkpoint when resuming (RAW must be unchanged), or a new plan."""
    requested, tokenized = str(config.output_format), config.is_tokenized
    if state.plan is not None and state.checkpoint is not None:
        check_raw_unchanged(config, state.plan)
        plan, checkpoint = RunPlan(state_dir(config.out)), state.checkpoint
        check_planned_here(config, plan)
        mirror_raw(config)
        output_format = choose_format(requested, plan.layout, tokenized=tokenized)
    else:
        mirror_raw(config)
        choice = choose_layout(config.raw, config.layout, follow_symlinks=config.follow_symlinks)
        output_format = choose_format(requested, choice.layout, tokenized=tokenized)  # before planning
        refuse_other_layouts_options(choice, config.table, config.raw, config.tokens.text_column)
        plan = _new_plan(config, choice, fingerprint)
        store.publish(plan_names())  # the plan, then the checkpoint that says a run is under way
        checkpoint = Checkpoint()
        save_checkpoint(store, checkpoint)
    handler = make_handler(plan, config.image, config.table, config.text, output_format,
                           text_column=config.tokens.column)
    ctx = RunContext(config=config, store=store, plan=plan, handler=handler, output_format=output_format,
                     fingerprint=fingerprint, tokenizer=tokenizer)
    return ctx, checkpoint


def _new_plan(config: ShardConfig, choice: LayoutChoice, fingerprint: dict[str, Any]) -> RunPlan:
    """Plan RAW into OUT's state folder; a plan refused half-way leaves no state folder."""
    directory = state_dir(config.out)
    directory.mkdir(exist_ok=True)
    try:
        return make_run_plan(config, choice, directory, fingerprint)
    except UsageError:
        shutil.rmtree(directory, ignore_errors=True)  # nothing was written but a part of the plan
        raise


def plan_records(config: ShardConfig, directory: Path, output_format: str) -> tuple[LayoutHandler, Iterator[Item]]:
    """Plan ``config.raw`` into ``directory``; the layout's handler and every raw record in plan order.

    What a run cleans, without writing anything (for benchmarks: ``write_loop.clean_item(handler, item)``).
    """
    choice = choose_layout(config.raw, config.layout, follow_symlinks=config.follow_symlinks)
    plan = make_run_plan(config, choice, directory, config.fingerprint(run_tokenizer(config)))
    handler = make_handler(plan, config.image, config.table, config.text, output_format,
                           text_column=config.tokens.column)
    return handler, (record for unit in plan.units(0, len(plan)) for record in handler.records(unit))
