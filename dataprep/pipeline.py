"""``dataprep shard``: plan -> clean in parallel -> write shards -> manifest, resumable.

One loop owns the order: inputs are cleaned in parallel and come back in plan order, so
shard contents do not depend on the number of workers. After every completed shard a
checkpoint records how many inputs are final; a killed run restarted with the same
arguments skips them and ends byte-identical to an uninterrupted run.

Media inputs (``--workers`` > 1) are cleaned on threads (decoding releases the GIL) in a
forked child process that also writes the shards, so image bytes are never pickled or
piped between processes. If a decoder crashes that child, this process runs each input
that was in flight alone in a process of its own; those that crash again become
``worker_crash`` rejects and a new child resumes from the last checkpoint. Table rows
and text, whose cleaning holds the GIL, go to worker processes (``parallel.ordered_map``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import closing
from collections import Counter
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from dataprep.checkpoint import (
    PARTIAL_REJECTS_NAME,
    Checkpoint,
    finish,
    prepare_output,
    save_checkpoint,
    state_dir,
)
from dataprep.clean.images import clean_image, prepare_threads
from dataprep.clean.options import ImageOptions, TableOptions, TextOptions
from dataprep.clean.tables import arrow_schema, clean_row
from dataprep.clean.text import clean_text, text_digest
from dataprep.config import OutputFormat, ShardConfig
from dataprep.errors import RejectBudgetError, UsageError, WorkerCrashError
from dataprep.fsutil import commit_tmp
from dataprep.manifest import FORMAT_PARQUET, FORMAT_WDS, REJECTS_NAME, Manifest, ShardInfo, Totals, write_manifest
from dataprep.parallel import InFlight, describe_exit, ordered_map, run_forked, threaded_ordered_map
from dataprep.plan import Item, Plan, PlannedItems, StreamFactory, make_plan
from dataprep.records import CleanRecord, RawRecord, Reject, RejectReason
from dataprep.report import Progress, Summary
from dataprep.sources import Layout, detect_layout
from dataprep.writers import EncodedSample, ParquetShardWriter, ShardWriter, TarShardWriter, encode_sample

# Columns of Parquet shards holding images; other fields of a sample go to "extra".
IMAGE_PARQUET_COLUMNS = (("jpg", pa.binary()), ("png", pa.binary()), ("cls", pa.int64()), ("txt", pa.string()), ("json", pa.string()))


@dataclass(frozen=True)
class CleanContext:
    """Everything a worker process needs to clean any input; sent to each worker once."""

    layout: Layout
    image: ImageOptions
    table: TableOptions
    text: TextOptions
    label_map: dict[str, int] | None
    table_schema: dict[str, str] | None
    encode_tar: bool = False


log = logging.getLogger(__name__)

Result = CleanRecord | EncodedSample | Reject

# Inputs submitted to the cleaning threads ahead of the writer, per thread.
THREAD_WINDOW_PER_WORKER = 32


@dataclass(frozen=True)
class CleaningThreads:
    """How a run's child cleans media on threads.

    in_flight: positions being cleaned, shared with the supervising parent;
    crashed: plan position -> the ``worker_crash`` reject of an input known to crash.
    """

    in_flight: InFlight
    crashed: Mapping[int, Reject]


@dataclass(frozen=True)
class RunOutcome:
    """What the write loop of a run produced (``processed``, ``bytes_out``: this run's own work)."""

    totals: Totals
    shards: tuple[ShardInfo, ...]
    processed: int
    bytes_out: int
    schema: list[dict[str, str]]


def clean_item(ctx: CleanContext, item: Item) -> Result:
    """Clean one input (runs in a worker). Rejects found while planning pass through.

    With ``encode_tar`` a kept sample comes back already serialised as tar members, so
    the main process only appends bytes (it is the one serial stage of a run).
    """
    if isinstance(item, Reject):
        return item
    if ctx.layout is Layout.TABLE:
        return clean_row(item, ctx.table_schema or {}, ctx.table)
    if ctx.layout is Layout.TEXT:
        return clean_text(item, ctx.text)
    label_index = ctx.label_map.get(item.label) if ctx.label_map is not None and item.label is not None else None
    result = clean_image(item, ctx.image, label_index)
    return encode_sample(result) if ctx.encode_tar and isinstance(result, CleanRecord) else result


def resolve_format(config: ShardConfig, layout: Layout) -> str:
    media = layout in (Layout.IMAGE_FOLDER, Layout.GROUPED)
    if config.output_format is OutputFormat.AUTO:
        return FORMAT_WDS if media else FORMAT_PARQUET
    if config.output_format is OutputFormat.WDS and not media:
        raise UsageError(f"--format wds holds media samples; a {layout} dataset goes to --format parquet")
    return str(config.output_format)


def shard(config: ShardConfig, *, argv: tuple[str, ...] = (), progress: Progress | None = None) -> Summary:
    """Run ``dataprep shard`` (see the module docstring). Raises DataprepError subclasses."""
    started = time.monotonic()
    raw = Path(config.raw)
    if not raw.exists():
        raise UsageError(f"RAW {raw} does not exist")
    out = Path(config.out)
    if _is_within(out, raw) and raw.is_dir():
        raise UsageError(f"OUT {out} is inside RAW {raw}; its shards would become inputs")
    layout = config.layout or detect_layout(raw)
    output_format = resolve_format(config, layout)
    fingerprint = config.fingerprint()
    state = prepare_output(out, fingerprint, overwrite=config.overwrite)
    if state.finished is not None:
        m = state.finished
        return Summary(os.fspath(out), m.layout, m.format, m.totals, len(m.shards), sum(s.bytes for s in m.shards),
                       0.0, 0.0, 0.0, already_complete=True)
    plan = make_plan(config, layout, state_dir(out))
    checkpoint = state.resume or Checkpoint(fingerprint)
    if state.resume is None:
        save_checkpoint(out, checkpoint)
    outcome = _execute(config, plan, output_format, checkpoint, progress or Progress(plan.total, enabled=False))
    totals, shards = outcome.totals, outcome.shards
    _publish_rejects(out)
    budget = config.max_reject_fraction
    if budget is not None and totals.inputs_seen and totals.rejected / totals.inputs_seen > budget:
        raise RejectBudgetError(
            f"{totals.rejected:,} of {totals.inputs_seen:,} inputs rejected ({totals.rejected / totals.inputs_seen:.1%}), "
            f"more than --max-reject-fraction {budget}; see {out / REJECTS_NAME}"
        )
    manifest = Manifest(
        format=output_format, layout=str(layout), shards=tuple(shards), totals=totals, command=argv,
        options=fingerprint, label_map=plan.label_map, schema=outcome.schema, rejects=REJECTS_NAME,
    )
    write_manifest(out, manifest)
    finish(out)
    elapsed = time.monotonic() - started
    return Summary(
        os.fspath(out), str(layout), output_format, totals, len(shards), sum(s.bytes for s in shards), elapsed,
        outcome.processed / elapsed if elapsed else 0.0, outcome.bytes_out / elapsed / 1e6 if elapsed else 0.0,
        resumed_from_shard=checkpoint.next_shard if state.resume is not None else None,
    )


def _execute(config: ShardConfig, plan: Plan, output_format: str, checkpoint: Checkpoint, progress: Progress) -> RunOutcome:
    """Run the write loop: here, or for media on several workers in a supervised child (module docstring)."""
    if config.workers <= 1 or not isinstance(plan.items, PlannedItems):
        return _Run(config, plan, output_format, checkpoint, progress).execute()
    in_flight = InFlight(config.workers * THREAD_WINDOW_PER_WORKER)
    crashed: dict[int, Reject] = {}
    while True:
        run = _Run(config, plan, output_format, checkpoint, progress, CleaningThreads(in_flight, dict(crashed)))
        forked = run_forked(run.execute)
        if not forked.died:
            return forked.result()
        suspects = [p for p in in_flight.positions() if p not in crashed]
        culprits = _crash_culprits(run.context(), plan.items, suspects)
        if not culprits:
            sources = [getattr(plan.items.at(p), "source", "?") for p in suspects]
            shown = ", ".join(sources[:5]) + (" ..." if len(sources) > 5 else "")
            raise WorkerCrashError(
                f"the process cleaning and writing shards died ({describe_exit(forked.exit_status)}) while cleaning "
                f"{len(sources)} inputs ({shown or 'none'}), none of which crashes when cleaned alone; "
                f"rerun the same command to resume from the last complete shard",
                sources,
            )
        crashed.update(culprits)
        in_flight.reset()
        for reject in culprits.values():
            log.warning("%s: %s; rejected (worker_crash), the run resumes from its last complete shard",
                        reject.source, reject.detail)
        # Tidy what the dead child left (its open shard, rejects past its last checkpoint).
        resumed = prepare_output(Path(config.out), config.fingerprint(), overwrite=False).resume
        checkpoint = resumed or checkpoint


def _crash_culprits(ctx: CleanContext, items: PlannedItems, positions: list[int]) -> dict[int, Reject]:
    """Position -> ``worker_crash`` reject, for each input at ``positions`` that kills a process of its own."""
    culprits: dict[int, Reject] = {}
    for position in positions:
        item = items.at(position)
        forked = run_forked(clean_item, ctx, item)
        if forked.died:
            culprits[position] = crash_reject(item, forked.exit_status)
    return culprits


class _Run:
    """The write loop of one run: results in plan order -> rejects file, writer, checkpoints."""

    def __init__(self, config: ShardConfig, plan: Plan, output_format: str, checkpoint: Checkpoint, progress: Progress,
                 threads: CleaningThreads | None = None) -> None:
        self.config, self.plan, self.format, self.checkpoint, self.progress = config, plan, output_format, checkpoint, progress
        self.threads = threads
        self.out = Path(config.out)
        self.counts: Counter[str] = Counter(checkpoint.totals.rejected_by_reason)
        self.kept = checkpoint.totals.samples_kept
        self.shards: list[ShardInfo] = list(checkpoint.shards)
        self.seen_digests: set[object] = set()
        self.processed = 0
        self.bytes_out = 0
        self.parquet_schema: pa.Schema | None = None

    def context(self) -> CleanContext:
        return CleanContext(self.plan.layout, self.config.image, self.config.table, self.config.text,
                            self.plan.label_map, self.plan.table_schema, encode_tar=self.format == FORMAT_WDS)

    def execute(self) -> RunOutcome:
        done = self.checkpoint.records_done
        # Media inputs already accounted for are skipped outright; table and text inputs are
        # cleaned again (cheap) because duplicate detection needs what they contained.
        replay = not isinstance(self.plan.items, PlannedItems)
        items = self.plan.items if replay else self.plan.items.iter_from(done)
        position = 0 if replay else done
        rejects_path = state_dir(self.out) / PARTIAL_REJECTS_NAME
        with self._writer() as writer, open(rejects_path, "ab") as rejects, closing(self._results(items, position)) as results:
            for result in results:
                position += 1
                if replay and position <= done:
                    self._remember(result)
                    continue
                self._consume(result, writer, rejects, position)
            self._closed(writer.close(), rejects, position)
            rejects.flush()
            os.fsync(rejects.fileno())
        self.progress.update(self.processed, sum(self.counts.values()), self.bytes_out, force=True)
        self.progress.close()
        rejected = sum(self.counts.values())
        totals = Totals(self.kept + rejected, self.kept, rejected, dict(self.counts))
        return RunOutcome(totals, tuple(self.shards), self.processed, self.bytes_out, self.schema_json(self.shards))

    def _results(self, items: Iterator[Item] | StreamFactory, first: int) -> Generator[Result, None, None]:
        """Cleaning results in plan order; ``first``: the plan position of the first item."""
        ctx, workers = self.context(), self.config.workers
        if self.threads is None:
            return ordered_map(clean_item, items, context=ctx, workers=workers, on_crash=crash_reject)
        prepare_threads()
        crashed = self.threads.crashed
        # An input known to crash arrives as its reject, which clean_item passes through.
        items = (crashed.get(position, item) for position, item in enumerate(items, first))
        return threaded_ordered_map(clean_item, items, context=ctx, workers=workers, window=self.threads.in_flight.slots,
                                    first_position=first, in_flight=self.threads.in_flight)

    def _consume(self, result: Result, writer: ShardWriter, rejects: Any, position: int) -> None:
        self.processed += 1
        if isinstance(result, CleanRecord) and not self._remember(result):
            result = Reject(result.source, RejectReason.DUPLICATE, "same content as an earlier input", _row_of(result))
        if isinstance(result, Reject):
            self.counts[str(result.reason)] += 1
            rejects.write(json.dumps(result.to_json(), ensure_ascii=False).encode("utf-8", "surrogateescape") + b"\n")
        else:
            self.kept += 1
            self._closed(writer.write(self._row(result)), rejects, position)
        self.progress.update(self.processed, sum(self.counts.values()), self.bytes_out)

    def _remember(self, result: Result) -> bool:
        """Track duplicates of tables (``--dedup-on``) and text; False if ``result`` repeats one."""
        if not isinstance(result, CleanRecord):
            return True
        if self.plan.layout is Layout.TEXT:
            digest: object = text_digest(result)
        elif self.plan.layout is Layout.TABLE and self.config.table.dedup_on:
            digest = repr(result.fields.get(self.config.table.dedup_on))
        else:
            return True
        if digest in self.seen_digests:
            return False
        self.seen_digests.add(digest)
        return True

    def _closed(self, closed: list[ShardInfo], rejects: Any, position: int) -> None:
        """Checkpoint after shards closed while writing input ``position`` (1-based).

        Inputs before it are final; the input itself is final only if it went into a
        closed shard (a writer may close a shard before or after adding a sample).
        """
        if not closed:
            return
        self.shards.extend(closed)
        self.bytes_out += sum(s.bytes for s in closed)
        rejects.flush()
        os.fsync(rejects.fileno())
        rejected = sum(self.counts.values())
        kept_done = sum(s.num_samples for s in self.shards)
        records_done = position if kept_done == self.kept else position - 1
        totals = Totals(kept_done + rejected, kept_done, rejected, dict(self.counts))
        self.checkpoint = replace(self.checkpoint, next_shard=self.checkpoint.next_shard + len(closed),
                                  records_done=records_done, rejects_bytes=rejects.tell(), totals=totals,
                                  shards=tuple(self.shards))
        save_checkpoint(self.out, self.checkpoint)

    def _writer(self) -> ShardWriter:
        c = self.config
        if self.format == FORMAT_WDS:
            return TarShardWriter(self.out, prefix=c.prefix, max_shard_bytes=c.max_shard_bytes,
                                  max_samples_per_shard=c.max_samples_per_shard, start_shard=self.checkpoint.next_shard)
        self.parquet_schema = self._parquet_schema()
        return ParquetShardWriter(self.out, schema=self.parquet_schema, prefix=c.prefix, max_shard_bytes=c.max_shard_bytes,
                                  max_samples_per_shard=c.max_samples_per_shard, row_group_bytes=c.row_group_bytes,
                                  start_shard=self.checkpoint.next_shard)

    def _parquet_schema(self) -> pa.Schema:
        if self.plan.layout is Layout.TABLE:
            return arrow_schema(self.plan.table_schema or {})
        if self.plan.layout is Layout.TEXT:
            return pa.schema([("__key__", pa.string()), ("text", pa.string()), ("__source__", pa.string()), ("__row__", pa.int64())])
        return pa.schema([("__key__", pa.string()), *IMAGE_PARQUET_COLUMNS, ("extra", pa.map_(pa.string(), pa.binary()))])

    def _row(self, record: CleanRecord | EncodedSample) -> CleanRecord | EncodedSample:
        """Image samples bound for Parquet: bytes fields -> typed columns."""
        if isinstance(record, EncodedSample) or self.format != FORMAT_PARQUET or self.plan.layout not in (
            Layout.IMAGE_FOLDER, Layout.GROUPED
        ):
            return record
        fields = dict(record.fields)
        row: dict[str, object] = {"jpg": fields.pop("jpg", None), "png": fields.pop("png", None)}
        cls = fields.pop("cls", None)
        row["cls"] = int(cls) if isinstance(cls, bytes) else None
        for name in ("txt", "json"):
            value = fields.pop(name, None)
            row[name] = value.decode("utf-8") if isinstance(value, bytes) else None
        row["extra"] = sorted(fields.items()) or None
        return CleanRecord(record.key, record.source, row)

    def schema_json(self, shards: list[ShardInfo]) -> list[dict[str, str]]:
        if self.parquet_schema is not None:
            return [{"name": f.name, "type": str(f.type)} for f in self.parquet_schema]
        fields = sorted({f for s in shards for f in s.fields})
        return [{"name": f, "type": "int64" if f == "cls" else "binary"} for f in fields]


def crash_reject(item: Item, exit_status: int | None) -> Reject:
    """The reject of an input whose cleaning killed its worker process (run alone to be sure)."""
    if isinstance(item, Reject):
        return item
    detail = f"cleaning it alone killed the worker process ({describe_exit(exit_status)})"
    return Reject(item.source, RejectReason.WORKER_CRASH, detail, item.row)


def _row_of(record: CleanRecord) -> int | None:
    row = record.fields.get("__row__")
    return row if isinstance(row, int) else None


def _publish_rejects(out: Path) -> None:
    commit_tmp(state_dir(out) / PARTIAL_REJECTS_NAME, out / REJECTS_NAME)


def _is_within(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True

