"""How a ``dataprep shard`` run ends: its budgets, its rejects file and manifest, or "already complete".

Separate from the write loop so that what makes an output finished is in one place: the
checks a finished OUT must pass against a rerun, the rejects file published before the
manifest, and the manifest built from the plan and the run's outcome, written last.
"""

from __future__ import annotations

import os

from dataprep.checkpoint import PARTIAL_REJECTS_PATH, state_dir
from dataprep.config import ShardConfig
from dataprep.errors import RejectBudgetError, UsageError
from dataprep.listing import LISTING_NAME, changes, list_raw, listing_digest, read_listing
from dataprep.manifest import FORMAT_TOKENS, MANIFEST_NAME, REJECTS_NAME, Manifest, ShardInfo, Totals, manifest_bytes
from dataprep.report import Summary
from dataprep.run_context import RunContext, RunOutcome
from dataprep.run_plan import RunPlanInfo
from dataprep.store import OutputStore
from dataprep.writers import manifest_schema


def build_manifest(ctx: RunContext, outcome: RunOutcome, argv: tuple[str, ...]) -> Manifest:
    """The manifest of a finished run (written last, by ``publish_manifest``)."""
    info, options = ctx.plan.info, ctx.writer_options
    return Manifest(
        format=ctx.output_format, layout=str(ctx.plan.layout), shards=outcome.shards, totals=outcome.totals,
        command=argv, options=ctx.fingerprint, label_map=info.label_map,
        schema=manifest_schema(ctx.output_format, ctx.handler.parquet_schema(), outcome.shards, options.token_dtype),
        rejects=REJECTS_NAME, layout_reason=info.layout_reason, raw_listing_sha256=info.listing_sha256,
        tokenizer=ctx.tokenizer.manifest_block() if ctx.tokenizer is not None else None,
    )


def publish_manifest(store: OutputStore, manifest: Manifest) -> None:
    """``OUT/manifest.json``, atomically: the last file of a run, which makes OUT finished."""
    store.write_bytes(MANIFEST_NAME, manifest_bytes(manifest))


def publish_rejects(store: OutputStore) -> None:
    """The run's rejects file, from the state folder to ``OUT/rejects.jsonl`` (before the manifest)."""
    store.move([(PARTIAL_REJECTS_PATH, REJECTS_NAME)])


def already_complete(config: ShardConfig, m: Manifest) -> Summary:
    """The answer to a rerun over a finished OUT: its summary, unless RAW changed or the budgets now fail."""
    if m.raw_listing_sha256 is not None:
        now = listing_digest(config.raw, follow_symlinks=config.follow_symlinks, exclude=config.out)
        if now != m.raw_listing_sha256:
            raise UsageError(f"RAW {config.raw} changed since {config.out} was made from it (files added, removed or "
                             "modified); pass --overwrite to shard it again")
    # The budgets are not in the fingerprint: a finished OUT answers a stricter rerun as a fresh run would.
    check_budgets(config, m.totals)
    return Summary(out=os.fspath(config.out), layout=m.layout, output_format=m.format, totals=m.totals,
                   shards=len(m.shards), bytes_written=sum(s.bytes for s in m.shards), elapsed_s=0.0,
                   samples_per_s=0.0, mb_per_s=0.0, already_complete=True, layout_reason=m.layout_reason,
                   tokens=_tokens(m.format, m.shards))


def check_raw_unchanged(config: ShardConfig, plan: RunPlanInfo) -> None:
    """Refuse to resume when RAW's listing differs from the plan's, naming what changed."""
    raw, out = config.raw, config.out
    if listing_digest(raw, follow_symlinks=config.follow_symlinks, exclude=out) == plan.listing_sha256:
        return
    found = changes(read_listing(state_dir(out) / LISTING_NAME),
                    list_raw(raw, follow_symlinks=config.follow_symlinks, exclude=out))
    raise UsageError(f"RAW {raw} changed since this run was planned ({'; '.join(found) or 'listing differs'}); "
                     "resuming would mix two versions of it. Restore RAW, or pass --overwrite to start again from "
                     "zero")


def check_budgets(config: ShardConfig, totals: Totals) -> None:
    """Fail (no manifest; a rerun resumes at the end) on too many rejects or no sample at all."""
    seen, rejected = totals.inputs_seen, totals.rejected
    rejects_file = config.out / REJECTS_NAME
    budget = config.max_reject_fraction
    if budget is not None and seen and rejected / seen > budget:
        raise RejectBudgetError(
            f"{rejected:,} of {seen:,} inputs rejected ({rejected / seen:.1%}), more than --max-reject-fraction "
            f"{budget}; see {rejects_file}. Rerun with a higher fraction to finish"
        )
    if totals.samples_kept == 0 and not config.allow_empty:
        reasons = ", ".join(f"{r} {n:,}" for r, n in sorted(totals.rejected_by_reason.items())) or "none"
        what = f"all {seen:,} inputs were rejected ({reasons}; see {rejects_file})" if seen else "no input was found"
        raise RejectBudgetError(f"no sample was kept: {what}. Check RAW and --layout, or pass --allow-empty "
                                "to accept an empty output")


def summary_of(ctx: RunContext, outcome: RunOutcome, elapsed_s: float, resumed_from_shard: int | None) -> Summary:
    """The summary of a run that wrote ``outcome`` in ``elapsed_s`` seconds."""
    return Summary(
        out=os.fspath(ctx.config.out), layout=str(ctx.plan.layout), output_format=ctx.output_format,
        totals=outcome.totals, shards=len(outcome.shards), bytes_written=sum(s.bytes for s in outcome.shards),
        elapsed_s=elapsed_s, samples_per_s=outcome.processed / elapsed_s if elapsed_s else 0.0,
        mb_per_s=outcome.bytes_out / elapsed_s / 1e6 if elapsed_s else 0.0, resumed_from_shard=resumed_from_shard,
        layout_reason=ctx.plan.info.layout_reason, tokens=_tokens(ctx.output_format, outcome.shards),
    )


def _tokens(output_format: str, shards: tuple[ShardInfo, ...]) -> int | None:
    """Token ids in token shards (EOS included); None for the other formats."""
    return sum(s.num_tokens or 0 for s in shards) if output_format == FORMAT_TOKENS else None
