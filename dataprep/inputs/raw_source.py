"""RAW as a run reads it: a folder, or a store URL (``s3://bucket/raw/``) listed and mirrored through the client.

A remote RAW is listed once per check, its listing taken as the walk of a folder would
give it (``listing.Entry``: the key relative to RAW, the size, the last-modified time in ns,
in walk order), so the plan's digest, the resume's "RAW changed" check and a finished OUT's
check all come from the listing, without downloading anything. Before planning or writing,
``mirror_raw`` brings ``RawSource.root`` (the staging folder's ``raw/``) to the listing: objects
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
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from dataprep.errors import UsageError
from dataprep.formats.durable import unique_tmp_path_for
from dataprep.inputs.lines import DEFAULT_MAX_RECORD_BYTES
from dataprep.inputs.listing import Entry, list_raw
from dataprep.inputs.records import FilePart, RawRecord, Unit
from dataprep.phases import SILENT, PhaseProgress, counted

if TYPE_CHECKING:  # the client is imported where a store URL is read: a local run never loads it
    from dataprep.remote import ObjectMeta, RemoteStore

MIRROR_THREADS = 8


@dataclass(frozen=True)
class RawSource:
    """RAW as a run reads it: ``root``, a folder of this machine (for a store URL, its mirror in the staging folder).

    url: RAW's store URL (None: RAW is the folder ``root``); follow_symlinks: the walk's symlink
    policy; exclude: a folder never read as input (OUT, when it lies inside RAW); timeout_s: a
    store request without progress this long fails the run, naming the URL; max_record_bytes: the
    longest record (line, row, text file) read, in bytes (``--max-record-bytes``; longer ones are
    ``record_too_long`` rejects, never held whole).
    """

    root: Path
    url: str | None = None
    follow_symlinks: bool = False
    exclude: Path | None = None
    timeout_s: float = 60.0
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES

    @property
    def name(self) -> str:
        """RAW as the user named it: its URL, or its path."""
        return self.url or os.fspath(self.root)

    def entries(self) -> Iterator[Entry]:
        """RAW's listing in walk order (``dataprep.inputs.listing``), from the store for a remote RAW."""
        if self.url is None:
            return list_raw(self.root, follow_symlinks=self.follow_symlinks, exclude=self.exclude)
        return iter([_entry(meta) for meta in _listing(self)])

    def digest(self, progress: PhaseProgress = SILENT) -> str:
        """Hex sha256 of RAW's listing (``listing.listing_digest`` of the same entries); ``progress`` told of the
        walk ("walking RAW")."""
        digest = hashlib.sha256()
        progress.begin("walking RAW", None, "entries")
        for entry in counted(self.entries(), progress):
            digest.update(entry.encode())
        progress.end()
        return digest.hexdigest()

    def named(self, detail: str) -> str:
        """``detail`` naming a remote RAW's objects by their URL, not by their path in this machine's mirror."""
        return detail if self.url is None else detail.replace(f"{self.root}/", f"{self.url}/")


def mirror_raw(raw: RawSource, progress: PhaseProgress = SILENT) -> None:
    """Bring the mirror ``raw.root`` to the remote RAW's listing (module docstring); nothing for a local RAW.

    ``progress``: told of the listing ("listing RAW", objects) and the downloads ("mirroring RAW", files
    and bytes of those to fetch).
    """
    if raw.url is None:
        return
    progress.begin("listing RAW", None, "objects")
    listing = _listing(raw, progress)
    progress.end()
    root = raw.root
    root.mkdir(parents=True, exist_ok=True)
    wanted = {meta.name for meta in listing}
    for path in [p for p in root.rglob("*") if p.is_file() or p.is_symlink()]:
        if path.relative_to(root).as_posix() not in wanted:
            path.unlink()
    stale = [meta for meta in listing if not _is_current(root / meta.name, meta)]
    store = _store(raw)
    progress.begin("mirroring RAW", len(stale), "files")
    with ThreadPoolExecutor(MIRROR_THREADS, thread_name_prefix="raw-mirror") as pool:
        for nbytes in pool.map(lambda meta: _download(store, root, meta), stale):
            progress.advance(1, nbytes)
    progress.end()


def check_planned_here(raw: RawSource, units: Iterable[Unit]) -> None:
    """Refuse to resume a run whose plan (``units``) names RAW's files in another mirror (``--staging`` changed)."""
    if raw.url is None:
        return
    for unit in units:
        paths = _paths(unit)
        if paths:
            if not paths[0].startswith(f"{raw.root}/"):
                planned = paths[0].partition("/dataprep-staging-")[0] or paths[0]
                raise UsageError(f"this run was planned with RAW {raw.url} mirrored under {planned}, not under "
                                 f"{raw.root.parent.parent}: rerun with the same --staging, or pass --overwrite")
            return


def stage_units(raw: RawSource, units: Iterable[Unit]) -> None:
    """Download the RAW files of ``units`` that this node lacks (a range task of a remote RAW, on any node).

    The plan names RAW's files by their path in the driver's mirror (``raw.root``); a task
    on another node puts each file its range reads at that path (the same staging folder
    there), so a node holds its ranges' inputs, not the whole of RAW. Nothing for a local RAW.
    """
    if raw.url is None:
        return
    missing = sorted({path for unit in units for path in _paths(unit) if not os.path.exists(path)})
    if not missing:
        return
    with _store(raw) as store:
        for path in missing:
            meta = store.head(Path(path).relative_to(raw.root).as_posix())
            _download(store, raw.root, meta)


def _paths(unit: Unit) -> list[str]:
    if isinstance(unit, FilePart):
        return [unit.path]
    return list(unit.files.values()) if isinstance(unit, RawRecord) else []


class MirroredRaw:
    """Removes the staging folder of a remote RAW when a run whose OUT is a folder ends (a context manager)."""

    def __init__(self, raw: RawSource, *, out_is_remote: bool) -> None:
        self.folder = raw.root.parent if raw.url is not None and not out_is_remote else None

    def __enter__(self) -> MirroredRaw:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def _store(raw: RawSource) -> RemoteStore:
    if raw.url is None:
        raise ValueError("RAW is not a store URL (raw.url is None)")
    from dataprep.output.object_store import output_config
    from dataprep.remote import RemoteStore

    return RemoteStore(raw.url, output_config(raw.timeout_s))


def _listing(raw: RawSource, progress: PhaseProgress = SILENT) -> list[ObjectMeta]:
    """The objects of RAW in walk order (sorted by their keys' path components); a usage error if none."""
    from dataprep.remote import RemoteNotFoundError

    with _store(raw) as store:
        try:
            found = [m for m in counted(store.list(), progress) if m.name and not m.name.endswith("/")]
        except RemoteNotFoundError as err:
            raise UsageError(f"RAW {raw.url}: the bucket {store.url.bucket!r} does not exist; fix the URL") from err
    if not found:
        raise UsageError(f"RAW {raw.url} holds no objects: check the URL (RAW is a prefix, a folder of objects)")
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


def _download(store: RemoteStore, root: Path, meta: ObjectMeta) -> int:
    """Fetch object ``meta`` to its path under ``root`` (a temporary name, then renamed); the bytes written."""
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
    return meta.size
