"""OUT in object storage for one run: the bucket checked, the staging folder locked, OUT opened and finished.

Opening (``ObjectOutput.open``): the objects under OUT are listed once and given an image in
the staging folder's ``out/``: the state folder's files (but the range tasks' ``ranges/``),
and with them the manifest and the rejects file, are downloaded; every other object becomes
a sparse file of its size (nothing downloaded). ``outdir.open_output`` decides on that image
exactly as for a folder (fresh, resume or finished; files dataprep did not write refused,
``--overwrite`` removing only what dataprep wrote, a resume tidied back to its checkpoint),
and what it changed is then done in the store: files it changed are uploaded, objects whose
file it removed are deleted, the records of what is ours (the state folder, then the
manifest) last, as ``outdir`` orders its own removals. A resumed run keeps a shard its
checkpoint names only if the store's object has the shard's size and its ``sha256`` attribute
(set when it was uploaded, ``dataprep.output.object_store``) is the checkpoint's: nothing is
uploaded again, nothing changed behind the run's back is kept.

A missing bucket is a usage error naming it (dataprep never creates buckets). Two runs of
one OUT on this machine are refused by the staging folder's lock; two machines writing one
prefix at once are not detected (object storage has no lock): run one at a time.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import TracebackType
from typing import Any

from dataprep.plan.checkpoint import STATE_DIR
from dataprep.errors import FormatError, OutputExistsError, UsageError
from dataprep.formats.manifest import MANIFEST_NAME, REJECTS_NAME, ShardInfo
from dataprep.output.object_store import SHA256_ATTRIBUTE, ObjectOutputStore, is_state, output_config, stamp
from dataprep.output.target import OutTarget
from dataprep.plan.outdir import OutputLock, OutputState, open_output
from dataprep.remote import ObjectMeta, RemoteNotFoundError, RemoteStore

RANGES_PREFIX = f"{STATE_DIR}/ranges/"  # the range tasks' files: read in the store, never mirrored


class ObjectOutput:
    """OUT at ``out.url``, staged in ``out.folder`` (module docstring); a context manager (the lock)."""

    def __init__(self, out: OutTarget) -> None:
        if out.url is None:
            raise ValueError("ObjectOutput needs a store URL as OUT (out.url is None)")
        self.url = out.url
        self.out = out.folder
        self._lock = OutputLock(out.folder.parent)
        self.store = ObjectOutputStore(RemoteStore(out.url, output_config(out.timeout_s)), out.folder)

    def __enter__(self) -> ObjectOutput:
        self._lock.__enter__()
        shutil.rmtree(self.out, ignore_errors=True)  # a killed run's staged files: the store holds the truth
        self.out.mkdir()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        try:
            shutil.rmtree(self.out.parent, ignore_errors=True)
            self.store.remote.close()
        finally:
            self._lock.__exit__(kind, error, tb)

    def open(self, fingerprint: dict[str, Any], *, overwrite: bool) -> OutputState:
        """What OUT holds (``outdir.OutputState``), with the store brought to what ``outdir`` decided."""
        listing = self._list()
        stamps = self._mirror(listing)
        try:
            state = open_output(self.out, fingerprint, overwrite=overwrite)
        except (OutputExistsError, FormatError) as err:
            raise type(err)(str(err).replace(os.fspath(self.out), self.url)) from err
        self._reconcile(listing, stamps)
        if state.checkpoint is not None:
            self._check_uploaded(state.checkpoint.shards)
        return state

    def finish(self) -> None:
        """Remove the state folder's objects (after the manifest is written)."""
        self.store.remove_tree(STATE_DIR)

    def _list(self) -> list[ObjectMeta]:
        try:
            return [m for m in self.store.remote.list() if m.name and not m.name.endswith("/")]
        except RemoteNotFoundError as err:
            url = self.store.remote.url
            raise UsageError(f"OUT {self.url}: the bucket {url.bucket!r} does not exist ({url.root}); create it "
                             "first (dataprep never creates buckets), or fix the URL") from err

    def _mirror(self, listing: list[ObjectMeta]) -> dict[str, tuple[int, int]]:
        """The image of OUT in ``out/`` (module docstring); (size, mtime_ns) of each file made."""
        has_state = any(is_state(m.name) for m in listing)
        fetched = [m.name for m in listing if _is_fetched(m.name, has_state)]
        try:
            self.store.fetch(fetched)
            for meta in listing:
                if meta.name not in fetched and not meta.name.startswith(RANGES_PREFIX):
                    path = self.out / meta.name
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with open(path, "wb") as f:
                        f.truncate(meta.size)
        except (FileExistsError, NotADirectoryError, IsADirectoryError) as err:
            raise OutputExistsError(f"{self.url} holds objects dataprep did not write ({err.filename}): dataprep "
                                    "never removes them: choose another OUT or move them away") from err
        return {name: stamp(self.out / name) for name in _files(self.out)}

    def _reconcile(self, listing: list[ObjectMeta], stamps: dict[str, tuple[int, int]]) -> None:
        """Upload what ``outdir`` changed in the image, then delete what it removed (ours last)."""
        now = {name: stamp(self.out / name) for name in _files(self.out)}
        self.store.publish(sorted(name for name, stamp in now.items() if stamps.get(name) != stamp))
        self.store.mark_stored(name for name in now if is_state(name))
        state_gone = not (self.out / STATE_DIR).is_dir()
        removed = [m.name for m in listing
                   if m.name not in now and (m.name in stamps or (state_gone and is_state(m.name)))]
        first = [n for n in removed if not is_state(n) and n != MANIFEST_NAME]
        self.store.remove(first)
        self.store.remove([n for n in removed if is_state(n)])
        if MANIFEST_NAME in removed:
            self.store.remove([MANIFEST_NAME])

    def _check_uploaded(self, shards: tuple[ShardInfo, ...]) -> None:
        """Refuse to resume over a shard the store holds in another version than the checkpoint's."""
        for shard in shards:
            for name, sha256 in ((shard.name, shard.sha256), (shard.index, shard.index_sha256)):
                if name is None or sha256 is None:
                    continue
                meta, attributes = self.store.remote.attributes(name)
                stored = attributes.get(SHA256_ATTRIBUTE)
                if stored != sha256:
                    raise OutputExistsError(
                        f"{self.store.remote.url_of(name)} (completed before the run stopped) is not what dataprep "
                        f"wrote: its sha256 attribute is {stored}, the checkpoint records {sha256}: OUT was changed "
                        "after dataprep wrote it; pass --overwrite to shard RAW again")


def _is_fetched(name: str, has_state: bool) -> bool:
    """Whether the image holds the object's bytes: state files, and the manifest and rejects of a run with state."""
    if name.startswith(RANGES_PREFIX):
        return False
    return is_state(name) or name == MANIFEST_NAME or (has_state and name == REJECTS_NAME)


def _files(root: Path) -> list[str]:
    """Every file under ``root`` as a ``/``-separated name relative to it (the range tasks' folder left out)."""
    names = []
    for folder, _, files in os.walk(root):
        for file in files:
            name = Path(os.path.relpath(os.path.join(folder, file), root)).as_posix()
            if not name.startswith(RANGES_PREFIX):
                names.append(name)
    return sorted(names)
