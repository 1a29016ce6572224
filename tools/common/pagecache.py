"""Page-cache and block-device helpers shared by the tools: evict files, count cached pages, find the disk.

``drop_cache`` evicts files from the page cache without root (``fdatasync`` then
``posix_fadvise(DONTNEED)``); ``warm_page_cache`` reads files once so they are cached;
``resident_fraction`` measures with ``mincore`` how much of them is cached, without
faulting anything in (``evenly_sampled`` keeps that cheap for large trees); ``device_of``
names the mount and block device under a path; ``files_under`` lists a tree in sorted
walk order. Linux; elsewhere they raise ``ToolError`` or report unknown.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools.common.report import ToolError

__all__ = ["DeviceInfo", "device_of", "drop_cache", "evenly_sampled", "files_under", "resident_fraction",
           "warm_page_cache"]

RESIDENCY_MAX_FILES = 1000  # mincore costs 3 syscalls a file: a large tree is sampled evenly
_CHUNK = 1 << 20


@dataclass(frozen=True)
class DeviceInfo:
    """Where a path lives: its mount, and the block device under it when there is one.

    dev: "MAJ:MIN" of the file system (``st_dev``). block_device: kernel name ("nvme0n1p2"),
    None for tmpfs, overlay, network file systems. rotational: as the kernel reports it
    (virtual disks often claim 1), None when unknown.
    """

    path: str
    mount_point: str | None
    fs_type: str
    source: str | None
    dev: str
    block_device: str | None
    rotational: bool | None
    model: str | None

    def describe(self) -> str:
        kind = {True: "rotational", False: "non-rotational", None: "rotational unknown"}[self.rotational]
        model = f", {self.model}" if self.model else ""
        where = f"{self.block_device} ({kind}{model})" if self.block_device else "no block device"
        return f"{self.fs_type} on {self.source or '?'} mounted at {self.mount_point or '?'}, {where}"


def drop_cache(paths: Sequence[str | os.PathLike[str]]) -> None:
    """Ask the kernel to evict the files' pages from the page cache (no root needed).

    Dirty pages cannot be dropped, so each file is ``fdatasync``'d first. Pages mapped by
    another process stay resident. Raises ``ToolError`` where ``posix_fadvise`` is missing.
    """
    if not hasattr(os, "posix_fadvise"):
        raise ToolError("cold-cache reads need os.posix_fadvise (Linux); run with --no-cold")
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            with contextlib.suppress(OSError):  # some file systems refuse it: dirty pages then stay
                os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def files_under(root: Path) -> list[Path]:
    """Every regular file under ``root``, in sorted walk order (the order a naive loader lists files)."""
    out: list[Path] = []
    for parent, dirs, names in os.walk(root):
        dirs.sort()
        out.extend(p for p in (Path(parent) / n for n in sorted(names)) if p.is_file())
    return out


def evenly_sampled(paths: Sequence[Path], at_most: int = RESIDENCY_MAX_FILES) -> list[Path]:
    """``paths`` itself when there are at most ``at_most``, else every k-th of them (at most ``at_most``)."""
    return list(paths) if len(paths) <= at_most else list(paths)[:: -(-len(paths) // at_most)]


def warm_page_cache(paths: Sequence[Path]) -> float | None:
    """Read every file once so its pages are cached; the fraction resident afterwards (None: unknown),
    measured on ``evenly_sampled(paths)``."""
    buf = bytearray(_CHUNK)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    probe = evenly_sampled(paths)
    return resident_fraction(probe) if probe else None


def resident_fraction(paths: Sequence[str | os.PathLike[str]]) -> float | None:
    """Fraction (0..1) of the files' pages now in the page cache; None if mincore is unavailable."""
    libc = _libc()
    if libc is None:
        return None
    page = mmap.PAGESIZE
    resident = total = 0
    for path in paths:
        size = os.path.getsize(path)
        if size == 0:
            continue
        counted = _resident_pages(libc, path, size, page)
        if counted is None:
            return None
        resident, total = resident + counted, total + -(-size // page)
    return resident / total if total else None


def _resident_pages(libc: ctypes.CDLL, path: str | os.PathLike[str], size: int, page: int) -> int | None:
    # Mapping without touching faults nothing in, so the measurement does not disturb the cache.
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            return None
        try:
            vec = (ctypes.c_ubyte * (-(-size // page)))()
            if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                return None
            return int(np.count_nonzero(np.ctypeslib.as_array(vec) & 1))
        finally:
            libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    except (OSError, AttributeError):
        return None  # no mincore (not Linux/BSD): residency is reported as unknown
    return libc


def device_of(path: str | os.PathLike[str]) -> DeviceInfo:
    """The mount (from /proc/self/mountinfo) and block device (from /sys/dev/block) of ``path``."""
    real = os.path.realpath(path)
    st_dev = os.stat(real).st_dev
    dev = f"{os.major(st_dev)}:{os.minor(st_dev)}"
    mount_point, fs_type, source = _mount_of(real)
    sys_dir = Path("/sys/dev/block") / dev
    if not sys_dir.exists() and source and source.startswith("/dev/"):
        # btrfs, and some others, report an anonymous st_dev: the mount source names the disk.
        try:
            rdev = os.stat(source).st_rdev
            sys_dir = Path("/sys/dev/block") / f"{os.major(rdev)}:{os.minor(rdev)}"
        except OSError:
            pass  # the source node is not visible here (containers): no block device then
    if not sys_dir.exists():
        return DeviceInfo(path=real, mount_point=mount_point, fs_type=fs_type, source=source, dev=dev,
                          block_device=None, rotational=None, model=None)
    block = sys_dir.resolve()
    # A partition has no queue/ of its own: its parent disk has.
    disk = block if (block / "queue").exists() else block.parent
    rotational = _read_sys(disk / "queue" / "rotational")
    model = _read_sys(disk / "device" / "model")
    return DeviceInfo(path=real, mount_point=mount_point, fs_type=fs_type, source=source, dev=dev,
                      block_device=block.name, rotational=None if rotational is None else rotational == "1",
                      model=model)


def _mount_of(real: str) -> tuple[str | None, str, str | None]:
    """(mount point, fs type, source) of the mount holding ``real``: longest prefix, last wins."""
    best: tuple[str | None, str, str | None] = (None, "unknown", None)
    try:
        lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return best  # not Linux: the mount is reported as unknown
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 5 or len(rest) < 2:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # "\040" is a space
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0] or ""):
            best = (point, rest[0], rest[1])
    return best


def _read_sys(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None
