"""OUT of a run, one interface whatever it is: a folder (``LocalOutput``) or object storage (``ObjectOutput``).

``make_output(config)`` chooses (the one place that does); ``dataprep.commands.shard`` enters it (the
run's lock), asks ``open`` what OUT holds (``outdir.OutputState``), writes through its
``store`` (``dataprep.output.store.OutputStore``), and calls ``finish`` after the manifest.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol

from dataprep.commands.config import ShardConfig
from dataprep.commands.object_output import ObjectOutput
from dataprep.commands.outdir import OutputLock, OutputState, check_paths, check_raw, finish, open_output
from dataprep.output.store import LocalStore, OutputStore


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

    def __init__(self, config: ShardConfig) -> None:
        self.config = config
        self.store = LocalStore(config.out)
        self._lock = OutputLock(config.out)

    def __enter__(self) -> LocalOutput:
        if self.config.raw_url is None:  # a remote RAW is checked when it is listed
            check_paths(self.config.raw, self.config.out)
        self._lock.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._lock.__exit__(kind, error, tb)

    def open(self, fingerprint: dict[str, Any], *, overwrite: bool) -> OutputState:
        return open_output(self.config.out, fingerprint, overwrite=overwrite)

    def finish(self) -> None:
        finish(self.config.out)


def make_output(config: ShardConfig) -> RunOutput:
    """OUT of ``config``: object storage when it is a store URL (``config.out_url``), else a folder."""
    if config.out_url is None:
        return LocalOutput(config)
    if config.raw_url is None:
        check_raw(config.raw)
    return ObjectOutput(config)
