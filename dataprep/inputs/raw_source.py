"""RAW as a run reads it: a folder, or a store URL (``s3://bucket/raw/``) listed and mirrored through the client.

A remote RAW is listed once per check, its listing taken as the walk of a folder would
give it (``listing.Entry``: the key relative to RAW, the size, the last-modified time in ns,
in walk order), so the plan's digest, the resume's "RAW changed" check and a finished OUT's
check all come from the listing, without downloading anything. Before planning or writing,
``mirror_raw`` brings ``config.raw`` (the staging folder's ``raw/``) to the listing: objects
missing or changed (size or last-modified) are downloaded (``MIRROR_THREADS`` at a time,
each under a temporary name, then renamed, its modification time set to the object's),
files no longer listed are removed; the mirror's own walk then gives the same listing, so
planning and cleaning read it as any folder. The mirror is RAW's size on this machine's
disk: planning reads content (table schemas, line parts, duplicate images), not just names.
A range task on another node (``--engine ray``) stages only its range's files
(``stage_units``).
``MirroredRaw`` removes the staging folder at the end of a run whose OUT is a folder (for a
remote OUT, ``object_output`` does).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

from dataprep.commands.config import ShardConfig
from dataprep.errors import UsageError
from dataprep.formats.durable import unique_tmp_path_for
from dataprep.inputs.listing import Entry, list_raw
from dataprep.output.object_store import output_config
from dataprep.inputs.records import RawRecord
from dataprep.remote import ObjectMeta, RemoteNotFoundError, RemoteStore
from dataprep.plan.run_plan import FilePart, RunPlan, Unit

MIRROR_THREADS = 8


def raw_entries(config: ShardConfig) -> Iterator[Entry]:
    """RAW's listing in walk order (``dataprep.inputs.listing``), from the store for a remote RAW."""
    if config.raw_url is None:
        return list_raw(config.raw, follow_symlinks=config.follow_symlinks, exclude=config.out)
    return iter([_entry(meta) for meta in _listing(config)])


def raw_digest(config: ShardConfig) -> str:
    """Hex sha256 of RAW's listing (``listing.listing_digest`` of the same entries)."""
    digest = hashlib.sha256()
    for entry in raw_entries(config):
        digest.update(entry.encode())
    return digest.hexdigest()


def mirror_raw(config: ShardConfig) -> None:
    """Bring the mirror ``config.raw`` to the remote RAW's listing (module docstring); nothing for a local RAW."""
    if config.raw_url is None:
        return
    listing = _listing(config)
    root = config.raw
    root.mkdir(parents=True, exist_ok=True)
    wanted = {meta.name for meta in listing}
    for path in [p for p in root.rglob("*") if p.is_file() or p.is_symlink()]:
        if path.relative_to(root).as_posix() not in wanted:
            path.unlink()
    stale = [meta for meta in listing if not _is_current(root / meta.name, meta)]
    store = _store(config)
    with ThreadPoolExecutor(MIRROR_THREADS, thread_name_prefix="raw-mirror") as pool:
        for _ in pool.map(lambda meta: _download(store, root, meta), stale):
            pass


def check_planned_here(config: ShardConfig, plan: RunPlan) -> None:
    """Refuse to resume a run whose plan names RAW's files in another mirror (``--staging`` changed)."""
    if config.raw_url is None:
        return
    for unit in plan.units(0, len(plan)):
        paths = _paths(unit)
        if paths:
            if not paths[0].startswith(f"{config.raw}/"):
                planned = paths[0].partition("/dataprep-staging-")[0] or paths[0]
                raise UsageError(f"this run was planned with RAW {config.raw_url} mirrored under {planned}, not under "
                                 f"{config.raw.parent.parent}: rerun with the same --staging, or pass --overwrite")
            return


def stage_units(config: ShardConfig, units: Iterable[Unit]) -> None:
    """Download the RAW files of ``units`` that this node lacks (a range task of a remote RAW, on any node).

    The plan names RAW's files by their path in the driver's mirror (``config.raw``); a task
    on another node puts each file its range reads at that path (the same staging folder
    there), so a node holds its ranges' inputs, not the whole of RAW. Nothing for a local RAW.
    """
    if config.raw_url is None:
        return
    missing = sorted({path for unit in units for path in _paths(unit) if not os.path.exists(path)})
    if not missing:
        return
    with _store(config) as store:
        for path in missing:
            meta = store.head(Path(path).relative_to(config.raw).as_posix())
            _download(store, config.raw, meta)


def _paths(unit: Unit) -> list[str]:
    if isinstance(unit, FilePart):
        return [unit.path]
    return list(unit.files.values()) if isinstance(unit, RawRecord) else []


class MirroredRaw:
    """Removes the staging folder of a remote RAW when a run whose OUT is a folder ends (a context manager)."""

    def __init__(self, config: ShardConfig) -> None:
        self.folder = config.raw.parent if config.raw_url is not None and config.out_url is None else None

    def __enter__(self) -> MirroredRaw:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def _store(config: ShardConfig) -> RemoteStore:
    if config.raw_url is None:
        raise ValueError("RAW is not a store URL (config.raw_url is None)")
    return RemoteStore(config.raw_url, output_config(config.remote_timeout_s))


def _listing(config: ShardConfig) -> list[ObjectMeta]:
    """The objects of RAW in walk order (sorted by their keys' path components); a usage error if none."""
    with _store(config) as store:
        try:
            found = [m for m in store.list() if m.name and not m.name.endswith("/")]
        except RemoteNotFoundError as err:
            raise UsageError(f"RAW {config.raw_url}: the bucket {store.url.bucket!r} does not exist; fix the URL") \
                from err
    if not found:
        raise UsageError(f"RAW {config.raw_url} holds no objects: check the URL (RAW is a prefix, a folder of "
                         "objects)")
    return sorted(found, key=lambda m: m.name.encode().split(b"/"))


def _mtime_ns(meta: ObjectMeta) -> int:
    return round(meta.mtime_s * 1_000_000) * 1000


def _entry(meta: ObjectMeta) -> Entry:
    return Entry(os.fsencode(meta.name), meta.size, _mtime_ns(meta))


def _is_current(path: Path, meta: ObjectMeta) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_size == meta.size and st.st_mtime_ns == _mtime_ns(meta)


def _download(store: RemoteStore, root: Path, meta: ObjectMeta) -> None:
    final = root / meta.name
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = unique_tmp_path_for(final)
    try:
        with open(tmp, "wb") as f:
            for chunk in store.iter_range(meta.name, etag=meta.etag):
                f.write(chunk)
        os.utime(tmp, ns=(_mtime_ns(meta), _mtime_ns(meta)))
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
