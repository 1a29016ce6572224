"""What OUT may hold, what a run may remove from it, and whether a run starts, resumes or is done.

A finished OUT holds shards, their index sidecars, ``rejects.jsonl`` and ``manifest.json``.
While a run is in progress it also holds ``.dataprep/`` (plan, checkpoint, partial rejects,
duplicate set) and at most one shard under its temporary name. A range-parallel run
(``--engine ray``) writes every attempt at a range in a folder of its own in
``.dataprep/ranges/attempts/`` and only its driver moves shards into OUT, so OUT itself
holds no temporary shard of it; a file written under a temporary name unique to its
writer (``fsutil.unique_tmp_path_for``: ``.NAME.TOKEN.tmp``) is recognised like ``.NAME.tmp``.
A token shard is two files, ``.bin`` then ``.idx`` (the commit point): a ``.bin`` without its
``.idx`` is not in the checkpoint, so it is removed like any shard written after it.

Nothing else is ever removed. ``--overwrite`` removes only files dataprep wrote (those the
manifest or the checkpoint names, shards of the run's own prefix written after its last
checkpoint, their temporary names, and ``.dataprep/``), and only from a folder that holds
dataprep's state (a manifest written by ``dataprep shard``, or ``.dataprep/``). If OUT
holds anything else the run refuses before removing anything.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataprep.plan.checkpoint import (CHECKPOINT_NAME, PARTIAL_REJECTS_NAME, STATE_DIR, Checkpoint, load_checkpoint,
                                      state_dir)
from dataprep.errors import FormatError, OutputExistsError, UsageError
from dataprep.formats.durable import TMP_SUFFIX, fsync_dir
from dataprep.formats.manifest import LAYOUT_ADOPTED, MANIFEST_NAME, REJECTS_NAME, Manifest, read_manifest
from dataprep.plan.fingerprint import option_differences
from dataprep.plan.run_plan import PLAN_NAME, RunPlanInfo

MAX_NAMES_SHOWN = 5


@dataclass(frozen=True)
class OutputState:
    """What ``open_output`` found: a finished run, a run to resume (its plan info and checkpoint), or a fresh start."""

    finished: Manifest | None = None
    plan: RunPlanInfo | None = None
    checkpoint: Checkpoint | None = None


def check_paths(raw: Path, out: Path) -> None:
    """Refuse RAW and OUT inside one another (or the same), and a RAW that does not exist or holds shards."""
    check_raw(raw)
    raw_real, out_real = raw.resolve(), out.resolve()
    if raw_real == out_real:
        raise UsageError(f"RAW and OUT are the same folder ({raw}); choose an OUT outside RAW")
    if raw.is_dir() and out_real.is_relative_to(raw_real):
        raise UsageError(f"OUT {out} is inside RAW {raw}; its shards would become inputs. Choose an OUT outside RAW")
    if raw_real.is_relative_to(out_real):
        raise UsageError(f"RAW {raw} is inside OUT {out}; OUT holds only dataprep's output. Choose an OUT outside RAW")


def check_raw(raw: Path) -> None:
    """Refuse a RAW that does not exist, or that is a dataprep output (a folder with a manifest)."""
    if not raw.exists():
        raise UsageError(f"RAW {raw} does not exist")
    if raw.is_dir() and (raw / MANIFEST_NAME).is_file():
        raise UsageError(f"RAW {raw} holds {MANIFEST_NAME}: it is a dataprep output (shards), not raw data. Were RAW "
                         "and OUT swapped? To read shards use loaders; to reshard, shard the original RAW again")


class OutputLock:
    """An exclusive lock on OUT for one run (``flock`` on the folder itself: nothing is written).

    A second ``dataprep shard`` into the same OUT is refused at once, naming the pid that
    holds it; the lock goes with the process (also when it is killed).
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        self._fd = -1

    def __enter__(self) -> OutputLock:
        out = self.out
        if out.exists() and not out.is_dir():
            raise OutputExistsError(f"OUT {out} exists and is not a folder")
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            holder = _lock_holder(os.fstat(fd).st_ino)
            os.close(fd)
            raise OutputExistsError(f"OUT {out} is in use by another dataprep run ({holder}); wait for it to end, "
                                    "or stop it (a rerun of its command resumes it), or choose another OUT") from err
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _lock_holder(inode: int) -> str:
    """'pid N' of the process holding a flock on ``inode`` (from /proc/locks), or 'pid unknown'."""
    try:
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 5 and parts[1] == "FLOCK" and parts[5].rsplit(":", 1)[-1] == str(inode):
                    return f"pid {parts[4]}"
    except OSError:
        pass
    return "pid unknown"


def _differences(old: dict[str, Any], new: dict[str, Any]) -> str:
    return option_differences(old, new)


def _shown(names: list[str]) -> str:
    return ", ".join(sorted(names)[:MAX_NAMES_SHOWN]) + (" ..." if len(names) > MAX_NAMES_SHOWN else "")


def shard_pattern(prefix: str) -> re.Pattern[str]:
    """Names of the shards and index sidecars a run with ``prefix`` writes: ``{prefix}-RRRRR-NNNNNN.*``."""
    return re.compile(rf"{re.escape(prefix)}-\d{{5}}-\d{{6}}\.(tar|tar\.idx|parquet|bin|idx)")


_UNIQUE_TMP = re.compile(rf"\.(.+)\.[0-9a-f]{{32}}{re.escape(TMP_SUFFIX)}")


def _final_name(name: str) -> str:
    """The final name of a temporary file (``.x.tmp`` or ``.x.TOKEN.tmp`` -> ``x``), else ``name``."""
    unique = _UNIQUE_TMP.fullmatch(name)
    if unique is not None:
        return unique.group(1)
    if name.startswith(".") and name.endswith(TMP_SUFFIX):
        return name[1 : -len(TMP_SUFFIX)]
    return name


@dataclass(frozen=True)
class _Ownership:
    """What of OUT is dataprep's: the names recorded, and the prefix of shards written since."""

    named: frozenset[str]
    prefix: str | None

    def owns(self, name: str) -> bool:
        final = _final_name(name)
        if final in self.named or final in (MANIFEST_NAME, REJECTS_NAME):
            return True
        return self.prefix is not None and shard_pattern(self.prefix).fullmatch(final) is not None


def _names_of(shards: Any) -> set[str]:
    return {s.name for s in shards} | {s.index for s in shards if s.index}


def _ownership(out: Path, *, overwrite: bool = False,
               fallback_prefix: str | None = None) -> tuple[_Ownership | None, Manifest | None, RunPlanInfo | None]:
    """Who wrote OUT: (what is dataprep's or None if OUT holds no dataprep state, manifest, plan info).

    With ``overwrite``, a damaged plan or checkpoint in ``.dataprep/`` (a folder only dataprep
    makes) does not stop the run: shards named by what is readable, and shards of the run's
    prefix (``fallback_prefix`` when the plan cannot say), are taken as dataprep's.
    """
    manifest = plan = checkpoint = None
    named: set[str] = set()
    prefix: str | None = None
    if (out / MANIFEST_NAME).exists():
        manifest = read_manifest(out)
        if manifest.layout == LAYOUT_ADOPTED:
            raise OutputExistsError(f"{out} holds shards adopted by `dataprep index`, which dataprep did not write; "
                                    "choose another OUT (nothing was removed)")
        named |= _names_of(manifest.shards)
        prefix = manifest.options.get("prefix")
    damaged = False
    try:
        if (state_dir(out) / PLAN_NAME).exists():
            plan = RunPlanInfo.from_path(state_dir(out) / PLAN_NAME)
            prefix = plan.fingerprint.get("prefix", prefix)
        checkpoint = load_checkpoint(out) if state_dir(out).is_dir() else None
    except FormatError:
        if not overwrite:
            raise
        damaged = True  # --overwrite: everything of .dataprep goes anyway
    if checkpoint is not None:
        named |= _names_of(checkpoint.shards)
    if manifest is None and not state_dir(out).is_dir():
        return None, None, None
    if damaged and prefix is None:
        prefix = fallback_prefix
    return _Ownership(frozenset(named), prefix), manifest, plan


def open_output(out: Path, fingerprint: dict[str, Any], *, overwrite: bool) -> OutputState:
    """Decide between a fresh run, resuming, a finished run, or refusing; tidy OUT accordingly.

    Raises ``OutputExistsError`` when OUT holds anything dataprep did not write, or the
    output of different options without ``overwrite``.
    """
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"OUT {out} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    owner, manifest, plan = _ownership(out, overwrite=overwrite, fallback_prefix=fingerprint.get("prefix"))
    entries = [p.name for p in out.iterdir() if p.name != STATE_DIR]
    foreign = [n for n in entries if owner is None or not owner.owns(n)]
    if foreign:
        why = "holds files dataprep did not write" if owner is not None or overwrite else "is not empty"
        raise OutputExistsError(f"{out} {why} ({_shown(foreign)}); dataprep never removes them: choose another OUT "
                                "or move them away (--overwrite removes only what dataprep wrote)")
    if owner is None:
        return OutputState()
    if overwrite:
        _remove_ours(out, entries)
        return OutputState()
    if manifest is not None:
        if manifest.options != fingerprint:
            raise OutputExistsError(f"{out} holds the finished output of different options "
                                    f"({_differences(manifest.options, fingerprint)}); pass --overwrite to replace it")
        _check_recorded(out, manifest.shards, "a shard of the finished output")
        finish(out)  # a kill after the manifest may have left the state folder
        return OutputState(finished=manifest)
    if plan is None or not (state_dir(out) / CHECKPOINT_NAME).exists():
        # Killed while planning: no shard exists yet; plan again.
        _remove_ours(out, entries)
        return OutputState()
    return _resumed(out, plan, fingerprint, entries)


def _resumed(out: Path, plan: RunPlanInfo, fingerprint: dict[str, Any], entries: list[str]) -> OutputState:
    """An unfinished run of these options, put back as its checkpoint left it; refused if its options differ."""
    if plan.fingerprint != fingerprint:
        raise OutputExistsError(f"{out} holds an unfinished run of different options "
                                f"({_differences(plan.fingerprint, fingerprint)}); rerun it with the same options, "
                                "or pass --overwrite to start again")
    checkpoint = load_checkpoint(out)
    if checkpoint is None:
        raise FormatError(f"{state_dir(out) / CHECKPOINT_NAME}: missing; rerun with --overwrite")
    _tidy(out, checkpoint, entries)
    _check_recorded(out, checkpoint.shards, "completed before the run stopped")
    return OutputState(plan=plan, checkpoint=checkpoint)


def _check_recorded(out: Path, shards: Any, what: str) -> None:
    """Refuse when a shard recorded as complete is missing, of another size, or without its index sidecar."""
    for shard in shards:
        path = out / shard.name
        problem: str | None
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            problem = "is missing"
        else:
            problem = None if size == shard.bytes else f"has {size} bytes, {shard.bytes} were written"
        if problem is None and shard.index and not (out / shard.index).exists():
            problem = f"has lost its index sidecar {shard.index}"
        if problem is not None:
            raise OutputExistsError(f"{path} ({what}) {problem}: OUT was changed after dataprep wrote it; "
                                    "pass --overwrite to shard RAW again")


def _remove_ours(out: Path, entries: list[str]) -> None:
    """Remove dataprep's files (every entry was checked to be ours), then the state folder, then the manifest.

    The records of what is ours go last: a run killed while removing leaves files that the
    manifest or the checkpoint still names, so its rerun can remove them.
    """
    for name in entries:
        if name != MANIFEST_NAME:
            (out / name).unlink()
    fsync_dir(out)
    shutil.rmtree(state_dir(out), ignore_errors=True)
    if MANIFEST_NAME in entries:
        (out / MANIFEST_NAME).unlink()
    fsync_dir(out)


def _tidy(out: Path, checkpoint: Checkpoint, entries: list[str]) -> None:
    """Put OUT back as it was at ``checkpoint``: drop shards and temporary files written after it.

    The partial rejects file is cut back to the checkpoint's length; if a run stopped
    after publishing it as ``rejects.jsonl`` (a failed reject budget, or a kill before the
    manifest), that file is taken back first. A rejects file shorter than the checkpoint
    says is damaged state, refused rather than padded.
    """
    keep = _names_of(checkpoint.shards)
    for name in entries:
        if name not in keep and name != REJECTS_NAME:
            (out / name).unlink()
    partial = state_dir(out) / PARTIAL_REJECTS_NAME
    published = out / REJECTS_NAME
    if published.exists():
        if not partial.exists() or partial.stat().st_size < published.stat().st_size:
            os.replace(published, partial)
        else:
            published.unlink()
    size = partial.stat().st_size if partial.exists() else 0
    if size < checkpoint.rejects_bytes:
        raise FormatError(f"{partial}: {size} bytes, but the checkpoint counts {checkpoint.rejects_bytes}; "
                          "the run's state is damaged: rerun with --overwrite")
    with open(partial, "ab") as f:
        f.truncate(checkpoint.rejects_bytes)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(out)


def finish(out: Path) -> None:
    """Remove the state folder of a finished run (after the manifest is written)."""
    shutil.rmtree(state_dir(out), ignore_errors=True)
    fsync_dir(out)
