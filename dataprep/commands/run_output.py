"""OUT of a run, one interface whatever it is: a folder (``LocalOutput``) or object storage (``ObjectOutput``).

``make_output(out, raw)`` chooses (the one place that does); ``dataprep.commands.shard`` enters it (the
run's lock), asks ``open`` what OUT holds (``outdir.OutputState``), writes through its
``store`` (``dataprep.output.store.OutputStore``), and calls ``finish`` after the manifest.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol

from dataprep.plan.outdir import OutputLock, OutputState, check_paths, check_raw, finish, open_output
from dataprep.inputs.raw_source import RawSource
from dataprep.output.store import LocalStore, OutputStore
from dataprep.output.target import OutTarget


class RunOutput(Protocol):
    """OUT as one run opens, writes and finishes it; a context manager that holds the run's lock."""

    @property
    def store(self) -> OutputStore: ...

    def __enter__(self) -> RunOutput: ...

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None: ...

    def open(self, fingerprint: dict[str, Any], *, overwrite: bool) -> OutputState:
        """Fresh, resume or finished (``outdir.open_output``), OUT tidied accordingly."""
        ...

    def finish(self) -> None:
        """Remove the state folder of a finished run (after the manifest)."""
        ...


class LocalOutput:
    """OUT as a folder: ``outdir``'s checks on RAW and OUT, ``OutputLock``, ``LocalStore``."""

    def __init__(self, out: OutTarget, raw: RawSource) -> None:
        self.out, self.raw = out.folder, raw
        self.store = LocalStore(out.folder)
        self._lock = OutputLock(out.folder)

    def __enter__(self) -> LocalOutput:
        if self.raw.url is None:  # a remote RAW is checked when it is listed
            check_paths(self.raw.root, self.out)
        self._lock.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._lock.__exit__(kind, error, tb)

    def open(self, fingerprint: dict[str, Any], *, overwrite: bool) -> OutputState:
        return open_output(self.out, fingerprint, overwrite=overwrite)

    def finish(self) -> None:
        finish(self.out)


def make_output(out: OutTarget, raw: RawSource) -> RunOutput:
    """OUT: object storage when it is a store URL (``out.url``), else a folder."""
    if out.url is None:
        return LocalOutput(out, raw)
    if raw.url is None:
        check_raw(raw.root)
    from dataprep.commands.object_output import ObjectOutput  # the store's client: loaded for a remote OUT only

    return ObjectOutput(out)
