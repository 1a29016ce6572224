"""How a ``dataprep shard`` run ends: its budgets, its rejects file and manifest, or "already complete".

Separate from the write loop so that what makes an output finished is in one place: the
checks a finished OUT must pass against a rerun, the rejects file published before the
manifest, and the manifest built from the plan and the run's outcome, written last.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataprep.plan.checkpoint import PARTIAL_REJECTS_PATH, state_dir
from dataprep.errors import FormatError, RejectBudgetError, UsageError
from dataprep.inputs.listing import LISTING_NAME, changes, read_listing
from dataprep.formats.manifest import (FORMAT_TOKENS, MANIFEST_NAME, REJECTS_NAME, Manifest, ShardInfo, Totals,
                                       manifest_bytes)
from dataprep.plan.outdir import shard_pattern
from dataprep.inputs.raw_source import RawSource
from dataprep.output.target import OutTarget
from dataprep.phases import SILENT, PhaseProgress
from dataprep.commands.summary import Summary
from dataprep.engines.context import RunContext, RunOutcome
from dataprep.engines.writer_pool import peak_rss_kib
from dataprep.plan.run_plan import RunPlanInfo
from dataprep.output.store import OutputStore
from dataprep.formats.registry import manifest_schema


@dataclass(frozen=True)
class RejectBudget:
    """How many rejects a run may end with: ``max_fraction`` of its inputs (None: any), and whether keeping
    no sample at all is a success (``allow_empty``)."""

    max_fraction: float | None = None
    allow_empty: bool = False


def build_manifest(ctx: RunContext, outcome: RunOutcome, argv: tuple[str, ...]) -> Manifest:
    """The manifest of a finished run (written last, by ``publish_manifest``)."""
    info, spec = ctx.plan.info, ctx.spec
    return Manifest(
        format=spec.output_format, layout=str(ctx.plan.layout), shards=outcome.shards, totals=outcome.totals,
        command=argv, options=spec.fingerprint, label_map=info.label_map,
        schema=manifest_schema(spec.output_format, spec.handler.parquet_schema(), outcome.shards,
                               spec.writer.token_dtype),
        rejects=REJECTS_NAME, layout_reason=info.layout_reason, raw_listing_sha256=info.listing_sha256,
        tokenizer=ctx.spec.tokenizer.manifest_block() if ctx.spec.tokenizer is not None else None,
    )


def publish_manifest(store: OutputStore, manifest: Manifest) -> None:
    """``OUT/manifest.json``, atomically: the last file of a run, which makes OUT finished.

    Its first byte is written only once OUT is listed and holds every file it names, each
    shard of its size (``FormatError`` otherwise); shards of the run's prefix that it does not
    name (written again after a crash of the writing process, in fewer shards) are removed first.
    """
    present = store.listing()
    missing = [f"{s.name} ({present.get(s.name, 'no')} bytes, {s.bytes} written)" for s in manifest.shards
               if present.get(s.name) != s.bytes]
    missing += [name for name in [*(s.index for s in manifest.shards), manifest.rejects]
                if name is not None and name not in present]
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise FormatError(f"{store.describe()} does not hold every file of the run ({shown}); the manifest was not "
                          "written. Rerun the same command to resume")
    named = {s.name for s in manifest.shards} | {s.index for s in manifest.shards if s.index}
    pattern = shard_pattern(str(manifest.options.get("prefix", "shard")))
    store.remove(sorted(n for n in present if n not in named and pattern.fullmatch(n)))
    store.write_bytes(MANIFEST_NAME, manifest_bytes(manifest))


def publish_rejects(store: OutputStore) -> None:
    """The run's rejects file, from the state folder to ``OUT/rejects.jsonl`` (before the manifest)."""
    store.move([(PARTIAL_REJECTS_PATH, REJECTS_NAME)])


def already_complete(raw: RawSource, out: OutTarget, budget: RejectBudget, m: Manifest,
                     progress: PhaseProgress = SILENT) -> Summary:
    """The answer to a rerun over a finished OUT: its summary, unless RAW changed (its walk told to ``progress``)
    or the budgets now fail."""
    if m.raw_listing_sha256 is not None and raw.digest(progress) != m.raw_listing_sha256:
        raise UsageError(f"RAW {raw.name} changed since {out.name} was made from it (files added, "
                         "removed or modified); pass --overwrite to shard it again")
    # The budgets are not in the fingerprint: a finished OUT answers a stricter rerun as a fresh run would.
    check_budgets(budget, out.name, m.totals)
    return Summary(out=out.name, layout=m.layout, output_format=m.format, totals=m.totals,
                   shards=len(m.shards), bytes_written=sum(s.bytes for s in m.shards), elapsed_s=0.0,
                   samples_per_s=0.0, mb_per_s=0.0, already_complete=True, layout_reason=m.layout_reason,
                   tokens=_tokens(m.format, m.shards))


def check_raw_unchanged(raw: RawSource, out: OutTarget, plan: RunPlanInfo, progress: PhaseProgress = SILENT) -> None:
    """Refuse to resume when RAW's listing differs from the plan's, naming what changed (the walk told to
    ``progress``)."""
    if raw.digest(progress) == plan.listing_sha256:
        return
    found = changes(read_listing(state_dir(out.folder) / LISTING_NAME), raw.entries())
    what = "; ".join(found) or "listing differs"
    raise UsageError(f"RAW {raw.name} changed since this run was planned ({what}); resuming would mix two "
                     "versions of it. Restore RAW, or pass --overwrite to start again from zero")


def check_budgets(budget: RejectBudget, out_name: str, totals: Totals) -> None:
    """Fail (no manifest; a rerun resumes at the end) on too many rejects or no sample at all."""
    seen, rejected = totals.inputs_seen, totals.rejected
    rejects_file = f"{out_name}/{REJECTS_NAME}"
    fraction = budget.max_fraction
    if fraction is not None and seen and rejected / seen > fraction:
        raise RejectBudgetError(
            f"{rejected:,} of {seen:,} inputs rejected ({rejected / seen:.1%}), more than --max-reject-fraction "
            f"{fraction}; see {rejects_file}. Rerun with a higher fraction to finish"
        )
    if totals.samples_kept == 0 and not budget.allow_empty:
        reasons = ", ".join(f"{r} {n:,}" for r, n in sorted(totals.rejected_by_reason.items())) or "none"
        what = f"all {seen:,} inputs were rejected ({reasons}; see {rejects_file})" if seen else "no input was found"
        raise RejectBudgetError(f"no sample was kept: {what}. Check RAW and --layout, or pass --allow-empty "
                                "to accept an empty output")


def summary_of(ctx: RunContext, out_name: str, outcome: RunOutcome, elapsed_s: float,
               resumed_from_shard: int | None) -> Summary:
    """The summary of a run that wrote ``outcome`` into OUT (``out_name``) in ``elapsed_s`` seconds."""
    return Summary(
        out=out_name, layout=str(ctx.plan.layout), output_format=ctx.spec.output_format,
        totals=outcome.totals, shards=len(outcome.shards), bytes_written=sum(s.bytes for s in outcome.shards),
        elapsed_s=elapsed_s, samples_per_s=outcome.processed / elapsed_s if elapsed_s else 0.0,
        mb_per_s=outcome.bytes_out / elapsed_s / 1e6 if elapsed_s else 0.0, resumed_from_shard=resumed_from_shard,
        layout_reason=ctx.plan.info.layout_reason, tokens=_tokens(ctx.spec.output_format, outcome.shards),
        split=outcome.split, peak_mib=(_kib_to_mib(peak_rss_kib()), _kib_to_mib(outcome.writer_peak_kib)),
    )


def _kib_to_mib(kib: int | None) -> float | None:
    return None if kib is None else round(kib / 1024, 1)


def _tokens(output_format: str, shards: tuple[ShardInfo, ...]) -> int | None:
    """Token ids in token shards (EOS included); None for the other formats."""
    return sum(s.num_tokens or 0 for s in shards) if output_format == FORMAT_TOKENS else None
