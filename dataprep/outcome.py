"""How a ``dataprep shard`` run ends: its budgets, its manifest and rejects file, or "already complete".

Separate from the run loop (``dataprep.pipeline``) so that what makes an output finished
is in one place: the checks a finished OUT must pass against a rerun, the manifest built
from the plan and the run's outcome, and the rejects file published before it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from dataprep.checkpoint import PARTIAL_REJECTS_NAME, state_dir
from dataprep.config import ShardConfig
from dataprep.errors import RejectBudgetError, UsageError
from dataprep.fsutil import commit_tmp
from dataprep.layouts import LayoutHandler, make_handler
from dataprep.listing import LISTING_NAME, changes, list_raw, listing_digest, read_listing
from dataprep.manifest import FORMAT_WDS, REJECTS_NAME, Manifest, ShardInfo, Totals
from dataprep.plan import Plan, PlanInfo
from dataprep.records import Reject
from dataprep.report import Summary


@dataclass(frozen=True)
class RunOutcome:
    """What the write loop of a run produced (``processed``, ``bytes_out``: this run's own work)."""

    totals: Totals
    shards: tuple[ShardInfo, ...]
    processed: int
    bytes_out: int


def build_manifest(config: ShardConfig, plan: Plan, output_format: str, outcome: RunOutcome, argv: tuple[str, ...]) -> Manifest:
    """The manifest of a finished run (written last, by the caller)."""
    handler = make_handler(plan, config.image, config.table, config.text, output_format)
    return Manifest(
        format=output_format, layout=str(plan.layout), shards=outcome.shards, totals=outcome.totals, command=argv,
        options=config.fingerprint(), label_map=plan.info.label_map,
        schema=_schema_json(handler, output_format, outcome.shards), rejects=REJECTS_NAME,
        layout_reason=plan.info.layout_reason, raw_listing_sha256=plan.info.listing_sha256,
    )


def already_complete(config: ShardConfig, m: Manifest) -> Summary:
    """The answer to a rerun over a finished OUT: its summary, unless RAW changed or the budgets now fail."""
    if m.raw_listing_sha256 is not None:
        now = listing_digest(Path(config.raw), follow_symlinks=config.follow_symlinks, exclude=Path(config.out))
        if now != m.raw_listing_sha256:
            raise UsageError(f"RAW {config.raw} changed since {config.out} was made from it (files added, removed or "
                             "modified); pass --overwrite to shard it again")
    # The budgets are not in the fingerprint: a finished OUT answers a stricter rerun as a fresh run would.
    check_budgets(config, m.totals, Path(config.out))
    return Summary(os.fspath(config.out), m.layout, m.format, m.totals, len(m.shards), sum(s.bytes for s in m.shards),
                   0.0, 0.0, 0.0, already_complete=True, layout_reason=m.layout_reason)


def check_raw_unchanged(config: ShardConfig, plan: PlanInfo, out: Path) -> None:
    """Refuse to resume when RAW's listing differs from the plan's, naming what changed."""
    raw = Path(config.raw)
    if listing_digest(raw, follow_symlinks=config.follow_symlinks, exclude=out) == plan.listing_sha256:
        return
    found = changes(read_listing(state_dir(out) / LISTING_NAME), list_raw(raw, follow_symlinks=config.follow_symlinks,
                                                                        exclude=out))
    raise UsageError(f"RAW {raw} changed since this run was planned ({'; '.join(found) or 'listing differs'}); "
                     f"resuming would mix two versions of it. Restore RAW, or pass --overwrite to start again from zero")


def check_budgets(config: ShardConfig, totals: Totals, out: Path) -> None:
    """Fail (no manifest; a rerun resumes at the end) on too many rejects or no sample at all."""
    seen, rejected = totals.inputs_seen, totals.rejected
    budget = config.max_reject_fraction
    if budget is not None and seen and rejected / seen > budget:
        raise RejectBudgetError(
            f"{rejected:,} of {seen:,} inputs rejected ({rejected / seen:.1%}), more than --max-reject-fraction "
            f"{budget}; see {out / REJECTS_NAME}. Rerun with a higher fraction to finish"
        )
    if totals.samples_kept == 0 and not config.allow_empty:
        reasons = ", ".join(f"{r} {n:,}" for r, n in sorted(totals.rejected_by_reason.items())) or "none"
        what = f"all {seen:,} inputs were rejected ({reasons}; see {out / REJECTS_NAME})" if seen else "no input was found"
        raise RejectBudgetError(f"no sample was kept: {what}. Check RAW and --layout, or pass --allow-empty "
                                "to accept an empty output")


def _schema_json(handler: LayoutHandler, output_format: str, shards: tuple[ShardInfo, ...]) -> list[dict[str, str]]:
    if output_format != FORMAT_WDS:
        return [{"name": f.name, "type": str(f.type)} for f in handler.parquet_schema()]
    fields = sorted({f for s in shards for f in s.fields})
    return [{"name": f, "type": "int64" if f == "cls" else "binary"} for f in fields]


def reject_line(reject: Reject) -> bytes:
    """One line of rejects.jsonl: UTF-8 JSON; names that are not UTF-8 keep their bytes as \\udcXX escapes."""
    doc = reject.to_json()
    try:
        return json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # a lone surrogate from surrogateescape: os.fsencode restores the bytes
        return json.dumps(doc).encode("ascii") + b"\n"


def publish_rejects(out: Path) -> None:
    """The run's rejects file, from the state folder to ``OUT/rejects.jsonl`` (before the manifest)."""
    commit_tmp(state_dir(out) / PARTIAL_REJECTS_NAME, out / REJECTS_NAME)
