"""``dataprep shard``, the command: open OUT and the run plan, choose the engine, end the run, report.

One run, in order: load the tokenizer of token output (``--tokenizer``: a usage error
before anything is written), check RAW and OUT, lock OUT (``run_output.make_output``: a
folder, or object storage through a staging folder), see what it holds (``RunOutput.open``:
fresh, a run to resume, or finished), then open the run: the saved plan (RAW must be
unchanged) or a new one (``dataprep.plan``; a remote RAW is mirrored first,
``dataprep.inputs.raw_source``), and with it everything decided once and handed down as a
``RunSpec`` (``dataprep.engines.context``): the layout's handler, the output format, the
options' fingerprint (with the tokenizer's sha256), the writer options, the tokenizer. The
engine writes the ranges (``LocalEngine``: this machine, checkpointed; ``RayEngine``: range
tasks on a cluster); then the rejects file is published, the budgets checked and the
manifest written last (``dataprep.commands.run_end``). This module and ``stage_options`` are
the only readers of ``ShardConfig`` below the command line: every stage gets its own small
options.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from dataprep.commands import stage_options
from dataprep.commands.config import Engine, ShardConfig
from dataprep.commands.output_format import choose_format
from dataprep.commands.run_end import (already_complete, build_manifest, check_budgets, check_raw_unchanged,
                                       publish_manifest, publish_rejects, summary_of)
from dataprep.commands.run_output import make_output
from dataprep.commands.summary import Summary
from dataprep.engines.context import RunContext, RunOutcome
from dataprep.engines.handlers import LayoutHandler
from dataprep.engines.progress import ProgressLine
from dataprep.engines.write_loop import Item
from dataprep.errors import UsageError
from dataprep.inputs.raw_source import MirroredRaw, check_planned_here, mirror_raw
from dataprep.inputs.sources import LayoutChoice, choose_layout
from dataprep.output.store import OutputStore
from dataprep.phases import PhaseProgress
from dataprep.plan.checkpoint import Checkpoint, save_checkpoint, state_dir
from dataprep.plan.outdir import OutputState
from dataprep.plan.plan_build import make_run_plan
from dataprep.plan.run_plan import RunPlan, plan_names
from dataprep.tokenize.tokenizer import Tokenizer, load_tokenizer


class WriteEngine(Protocol):
    """Where the ranges of a plan are written (``--engine``)."""

    def check(self) -> None:
        """Raise ``UsageError`` if the engine cannot run here (before anything is written)."""
        ...

    def run(self, ctx: RunContext, checkpoint: Checkpoint, progress: ProgressLine) -> RunOutcome:
        """Write every range not yet done, from ``checkpoint``; refuses a run that the other engine started."""
        ...


def make_engine(config: ShardConfig) -> WriteEngine:
    """The engine of ``--engine`` (the one place that reads it). A local run imports nothing of Ray's engine."""
    if config.engine is Engine.RAY:
        from dataprep.engines.ray_engine import RayEngine  # the range driver and Ray: for --engine ray only

        return RayEngine(config.address)
    from dataprep.engines.local_engine import LocalEngine

    return LocalEngine(config.workers)


def shard(config: ShardConfig, *, argv: tuple[str, ...] = (), progress: ProgressLine | None = None) -> Summary:
    """Run ``dataprep shard`` (see the module docstring). Raises DataprepError subclasses."""
    started = time.monotonic()
    engine = make_engine(config)
    engine.check()
    tokenizer = run_tokenizer(config)
    raw, out = stage_options.raw_source(config), stage_options.out_target(config)
    budget = stage_options.reject_budget(config)
    progress = progress or ProgressLine(None, enabled=False)
    with make_output(out, raw) as output, MirroredRaw(raw, out_is_remote=out.is_remote):
        fingerprint = config.fingerprint(tokenizer)
        store = output.store
        state = output.open(fingerprint, overwrite=config.overwrite)
        if state.finished is not None:
            return already_complete(raw, out, budget, state.finished, progress)
        ctx, checkpoint = _open_run(config, store, state, fingerprint, tokenizer, progress)
        progress.total = len(ctx.plan) if ctx.spec.handler.is_media else None
        outcome = engine.run(ctx, checkpoint, progress)
        publish_rejects(store)
        check_budgets(budget, out.name, outcome.totals)
        publish_manifest(store, build_manifest(ctx, outcome, argv))
        output.finish()
    resumed_from_shard = checkpoint.next_shard if state.plan is not None else None
    return summary_of(ctx, out.name, outcome, time.monotonic() - started, resumed_from_shard)


def run_tokenizer(config: ShardConfig) -> Tokenizer | None:
    """The tokenizer of ``--tokenizer`` (and ``--eos``), loaded once per run; None without token output."""
    spec = config.tokens.tokenizer
    return None if spec is None else load_tokenizer(spec, eos=config.tokens.eos)


def _open_run(config: ShardConfig, store: OutputStore, state: OutputState, fingerprint: dict[str, Any],
              tokenizer: Tokenizer | None, progress: PhaseProgress) -> tuple[RunContext, Checkpoint]:
    """The run: its saved plan and checkpoint when resuming (RAW must be unchanged), or a new plan (RAW's mirror,
    walk and plan told to ``progress``)."""
    requested, tokenized = str(config.output_format), config.is_tokenized
    raw = stage_options.raw_source(config)
    if state.plan is not None and state.checkpoint is not None:
        check_raw_unchanged(raw, stage_options.out_target(config), state.plan, progress)
        plan, checkpoint = RunPlan(state_dir(config.out)), state.checkpoint
        check_planned_here(raw, plan.units(0, len(plan)))
        mirror_raw(raw, progress)
        output_format = choose_format(requested, plan.layout, tokenized=tokenized)
    else:
        mirror_raw(raw, progress)
        choice = choose_layout(config.raw, config.layout, follow_symlinks=config.follow_symlinks)
        output_format = choose_format(requested, choice.layout, tokenized=tokenized)  # before planning
        stage_options.refuse_other_layouts_options(config, choice)
        plan = _new_plan(config, choice, fingerprint, progress)
        store.publish(plan_names())  # the plan, then the checkpoint that says a run is under way
        checkpoint = Checkpoint()
        save_checkpoint(store, checkpoint)
    handler = stage_options.layout_handler(config, plan, output_format)
    spec = stage_options.run_spec(config, handler, output_format, fingerprint, tokenizer)
    return RunContext(spec=spec, store=store, plan=plan, workers=config.workers), checkpoint


def _new_plan(config: ShardConfig, choice: LayoutChoice, fingerprint: dict[str, Any],
              progress: PhaseProgress) -> RunPlan:
    """Plan RAW into OUT's state folder; a plan refused half-way leaves no state folder."""
    directory = state_dir(config.out)
    directory.mkdir(exist_ok=True)
    try:
        return make_run_plan(stage_options.plan_options(config), choice, directory, fingerprint, progress=progress)
    except UsageError:
        shutil.rmtree(directory, ignore_errors=True)  # nothing was written but a part of the plan
        raise


def plan_records(config: ShardConfig, directory: Path, output_format: str) -> tuple[LayoutHandler, Iterator[Item]]:
    """Plan ``config.raw`` into ``directory``; the layout's handler and every raw record in plan order.

    What a run cleans, without writing anything (for benchmarks: ``write_loop.clean_item(handler, item)``).
    """
    choice = choose_layout(config.raw, config.layout, follow_symlinks=config.follow_symlinks)
    fingerprint = config.fingerprint(run_tokenizer(config))
    plan = make_run_plan(stage_options.plan_options(config), choice, directory, fingerprint)
    handler = stage_options.layout_handler(config, plan, output_format)
    return handler, (record for unit in plan.units(0, len(plan)) for record in handler.records(unit))
