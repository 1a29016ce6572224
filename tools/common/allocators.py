"""Choosing a memory allocator for child processes (Linux, ``LD_PRELOAD``) and reading which one a process maps.

``allocator_env`` returns the environment that makes a child use jemalloc, tcmalloc or
glibc malloc (``MALLOC_CONF`` for jemalloc, see ``DEFAULT_MALLOC_CONF``); ``allocator_of``
reads ``/proc/PID/maps``. Standard library only (and ``tools.common.report``'s errors), so
that the ``tools/profile/with-jemalloc`` launcher starts fast. Used by
``tools.profile.malloc`` (the launcher) and ``tools.common.loader_run`` (configurations
run under an allocator).
"""

from __future__ import annotations

import enum
import os
import platform
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

from tools.common.report import ToolError


class Allocator(enum.StrEnum):
    JEMALLOC = "jemalloc"
    TCMALLOC = "tcmalloc"
    SYSTEM = "system"


class AllocatorNotFound(ToolError):
    """The allocator's shared library is not installed where the launcher looks."""


# Library file names in order of preference. tcmalloc_minimal comes first: it has the
# same allocator without the heap profiler and its libunwind dependency.
LIBRARY_NAMES: dict[str, tuple[str, ...]] = {
    Allocator.JEMALLOC: ("libjemalloc.so.2", "libjemalloc.so.1", "libjemalloc.so"),
    Allocator.TCMALLOC: ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"),
}
# Environment variable that names the library explicitly (a file, or a directory holding it).
PATH_ENV: dict[str, str] = {Allocator.JEMALLOC: "JEMALLOC_PATH", Allocator.TCMALLOC: "TCMALLOC_PATH"}
DEBIAN_PACKAGES: dict[str, tuple[str, ...]] = {
    Allocator.JEMALLOC: ("libjemalloc2",),
    Allocator.TCMALLOC: ("libtcmalloc-minimal4", "libgoogle-perftools4"),
}
_MULTIARCH = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
SEARCH_DIRS: tuple[Path, ...] = tuple(
    Path(d)
    for d in (f"/usr/lib/{_MULTIARCH}", f"/lib/{_MULTIARCH}", "/usr/lib64", "/lib64", "/usr/local/lib", "/usr/lib")
)
_LDCONFIG_ARCH = {"x86_64": "x86-64", "aarch64": "AArch64"}  # tag `ldconfig -p` gives 64-bit libraries

# Why these jemalloc settings (all documented in jemalloc's TUNING.md):
# - background_thread:true  purging freed pages happens on jemalloc's own thread, not inside
#   the free() of a decode worker, so workers do not stall on madvise calls.
# - metadata_thp:auto  jemalloc's metadata moves to transparent huge pages once it is large,
#   fewer TLB misses for big heaps, while small processes (many workers) stay small.
# - dirty_decay_ms / muzzy_decay_ms 10 s  freed pages stay reusable for about 10 s: a batch
#   buffer freed and reallocated every step is reused instead of faulted in again, yet an
#   idle process still returns its memory to the OS within seconds.
DEFAULT_MALLOC_CONF = "background_thread:true,metadata_thp:auto,dirty_decay_ms:10000,muzzy_decay_ms:10000"
# tcmalloc prints a line with a stack trace for every allocation above 1 GiB by default;
# large tensors make that noise routine. Raised only when the user has not set it.
TCMALLOC_QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 40)}

LIBRARY_PATTERN = r"(?:\S*/)?lib(jemalloc|tcmalloc)[^/\s]*\.so[^/\s]*"


def find_library(allocator: str) -> Path:
    """Path of the allocator's shared library; raises ``AllocatorNotFound`` naming the package.

    Looks at ``$JEMALLOC_PATH``/``$TCMALLOC_PATH`` first, then ``SEARCH_DIRS``, then the
    ``ldconfig -p`` cache. ``"system"`` has no library and raises ``ToolError``.
    """
    kind = _allocator(allocator)
    if kind is Allocator.SYSTEM:
        raise ToolError("the system allocator is glibc malloc itself: there is no library to preload")
    names = LIBRARY_NAMES[kind]
    var = PATH_ENV[kind]
    explicit = os.environ.get(var)
    if explicit:
        found = _existing(Path(explicit), names)
        if found is None:
            raise AllocatorNotFound(f"${var}={explicit} is neither a {kind} library nor a directory holding one of "
                                    f"{', '.join(names)}")
        return found
    for directory in SEARCH_DIRS:
        found = _existing(directory, names)
        if found is not None:
            return found
    cached = _ldconfig_libraries()
    for name in names:
        if name in cached:
            return cached[name]
    package, *others = DEBIAN_PACKAGES[kind]
    alternatives = "".join(f" (or {p})" for p in others)
    raise AllocatorNotFound(
        f"{kind} not found: looked for {', '.join(names)} in {', '.join(map(str, SEARCH_DIRS))} and the ldconfig "
        "cache. "
        f"Install it with `apt-get install {package}`{alternatives}, or set {var}=/path/to/{names[0]}"
    )


def allocator_env(
    allocator: str, base_env: Mapping[str, str] | None = None, malloc_conf: str | None = None
) -> dict[str, str]:
    """A copy of ``base_env`` (default ``os.environ``) that makes children use ``allocator``.

    Any jemalloc/tcmalloc already in ``LD_PRELOAD`` is removed (two allocators in one
    process do not mix), then the chosen library is prepended to the rest. For jemalloc,
    ``MALLOC_CONF`` is ``malloc_conf`` if given, else the one already in the environment,
    else ``DEFAULT_MALLOC_CONF``. Raises ``AllocatorNotFound``, or ``ToolError`` when
    ``malloc_conf`` is given for an allocator other than jemalloc.
    """
    kind = _allocator(allocator)
    if malloc_conf is not None and kind is not Allocator.JEMALLOC:
        raise ToolError(f"--malloc-conf configures jemalloc only (got --allocator {kind})")
    env = dict(os.environ if base_env is None else base_env)
    kept = [p for p in re.split(r"[:\s]+", env.get("LD_PRELOAD", "")) if p and not re.fullmatch(LIBRARY_PATTERN, p)]
    if kind is not Allocator.SYSTEM:
        kept.insert(0, str(find_library(kind)))
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    else:
        env.pop("LD_PRELOAD", None)
    if kind is Allocator.JEMALLOC:
        env["MALLOC_CONF"] = malloc_conf if malloc_conf is not None else env.get("MALLOC_CONF", DEFAULT_MALLOC_CONF)
    elif kind is Allocator.TCMALLOC:
        env = {**TCMALLOC_QUIET, **env}
    return env


def allocator_of(pid: int) -> str:
    """``"jemalloc"``, ``"tcmalloc"`` or ``"system"``: the allocator mapped into process ``pid``.

    Reads ``/proc/PID/maps`` (Linux). An allocator linked statically into the executable
    is not a separate mapping and shows as ``"system"``. Raises ``ProcessLookupError``
    when the process does not exist (or is not readable).
    """
    return allocator_in(maps_of(pid))[0]


def maps_of(pid: int) -> str:
    """The text of ``/proc/PID/maps``; ``ProcessLookupError`` when it cannot be read."""
    try:
        return Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise ProcessLookupError(f"cannot read /proc/{pid}/maps: {err.strerror} (process gone, or not Linux?)") from err


def allocator_in(maps: str) -> tuple[str, str | None]:
    """(allocator, library path or None) found in the text of a /proc/PID/maps file."""
    match = re.search(LIBRARY_PATTERN, maps)
    return (match.group(1), match.group(0)) if match else (Allocator.SYSTEM.value, None)


def _allocator(name: str) -> Allocator:
    try:
        return Allocator(name)
    except ValueError as err:
        choices = ", ".join(a.value for a in Allocator)
        raise ToolError(f"'allocator' must be one of {choices} (got {name!r} that is a {type(name).__name__})") from err


def _existing(place: Path, names: Sequence[str]) -> Path | None:
    if place.is_file():
        return place
    for name in names:
        candidate = place / name
        if candidate.is_file():
            return candidate
    return None


def _ldconfig_libraries() -> dict[str, Path]:
    """Library name -> path from the dynamic linker cache, 64-bit entries for this machine."""
    exe = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)),
                                           None)
    if exe is None:
        return {}
    try:
        listing = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}  # the cache is the last resort; its absence only narrows the search
    arch = _LDCONFIG_ARCH.get(platform.machine())
    found: dict[str, Path] = {}
    for match in re.finditer(r"^\s*(\S+) \(([^)]*)\) => (\S+)$", listing, re.MULTILINE):
        name, tags, path = match.groups()
        if (arch is None or arch in tags) and name not in found and os.path.isfile(path):
            found[name] = Path(path)
    return found
