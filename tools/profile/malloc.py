"""Run a command under jemalloc, tcmalloc or the system allocator (Linux, via LD_PRELOAD).

    python -m tools.profile.malloc --allocator jemalloc -- python train.py ...
    python -m tools.profile.malloc --allocator jemalloc --check   # is it really loaded?
    tools/profile/with-jemalloc python train.py ...                # the short form

glibc malloc fragments under the allocation pattern of a data loader (many threads and
processes freeing large, variably sized decode buffers), so RSS creeps up over an epoch;
jemalloc and tcmalloc keep it flat. The launcher sets ``LD_PRELOAD`` (and ``MALLOC_CONF``
for jemalloc), prints what it set on stderr, then replaces itself with the command
(``os.execvpe``), so signals and the exit status are the command's own. DataLoader worker
processes inherit the environment and therefore the allocator. Finding the library and
building that environment is ``tools.common.allocators``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from tools.common.allocators import (
    DEFAULT_MALLOC_CONF,
    LIBRARY_PATTERN,
    TCMALLOC_QUIET,
    Allocator,
    allocator_env,
    allocator_in,
    maps_of,
)
from tools.common.report import ToolError

# Prints the allocator mapped into the probe process itself; needs only the stdlib.
_PROBE = (f"import re; m = re.search({LIBRARY_PATTERN!r}, open('/proc/self/maps').read()); "
          "print(m.group(1) if m else 'system')")
_LOADED_WAIT_S = 5.0  # how long --check waits for the dynamic loader to map the child's libraries


def _check_probe(kind: Allocator, env: Mapping[str, str]) -> int:
    """Run a tiny Python under ``env`` and compare the allocator it maps with ``kind``."""
    result = subprocess.run([sys.executable, "-c", _PROBE], env=dict(env), capture_output=True, text=True, timeout=60,
                            check=False)
    got = result.stdout.strip()
    if result.returncode != 0 or got != kind:
        detail = result.stderr.strip().splitlines()[-1:] or [f"it reported {got or 'nothing'!r}"]
        print(f"malloc: FAILED: a child started with LD_PRELOAD={env.get('LD_PRELOAD', '')} does not use {kind}: "
              f"{detail[0]}", file=sys.stderr)
        return 1
    print(f"malloc: ok: child process uses {kind} (LD_PRELOAD={env.get('LD_PRELOAD', '')})")
    return 0


def _check_command(kind: Allocator, env: Mapping[str, str], command: Sequence[str]) -> int:
    """Start ``command``, confirm from its /proc/PID/maps that it maps ``kind``, then wait for it."""
    child = subprocess.Popen(list(command), env=dict(env))
    got, path = _wait_for_loader(child)
    if got != kind:
        child.terminate()
        child.wait()
        print(f"malloc: FAILED: {command[0]} (pid {child.pid}) maps {got}, not {kind}", file=sys.stderr)
        return 1
    print(f"malloc: ok: {command[0]} (pid {child.pid}) maps {path or kind}", file=sys.stderr)
    while True:
        try:
            code = child.wait()
            break
        except KeyboardInterrupt:
            continue  # Ctrl-C reached the child too (same process group): report its exit
    return code if code >= 0 else 128 - code  # killed by signal N: the shell's 128+N


def _wait_for_loader(child: subprocess.Popen[bytes]) -> tuple[str, str | None]:
    """The allocator ``child`` maps, once its dynamic loader has mapped its libraries."""
    # Popen returns once exec succeeded, but the loader maps libraries after that. It maps
    # preloaded ones before libc, so once libc shows, the answer is final.
    deadline = time.monotonic() + _LOADED_WAIT_S
    seen: tuple[str, str | None] = (Allocator.SYSTEM.value, None)
    while time.monotonic() < deadline and child.poll() is None:
        try:
            maps = maps_of(child.pid)
        except ProcessLookupError:
            break  # exited meanwhile: judged by what was seen so far
        seen = allocator_in(maps)
        if seen[1] is not None or "/libc.so" in maps or "/libc-" in maps:
            break
        time.sleep(0.01)
    return seen


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.profile.malloc",
        description="Run COMMAND with jemalloc, tcmalloc or the system allocator preloaded (Linux).",
        epilog=f"jemalloc's default MALLOC_CONF (unless set): {DEFAULT_MALLOC_CONF}",
    )
    parser.add_argument("--allocator", choices=[a.value for a in Allocator], default=Allocator.JEMALLOC.value)
    parser.add_argument("--malloc-conf", metavar="STR", help="jemalloc MALLOC_CONF (replaces the default)")
    parser.add_argument("--check", action="store_true",
                        help="verify the allocator is loaded in the child (a probe if no COMMAND)")
    parser.add_argument("--quiet", action="store_true", help="do not print the environment that was set")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; on success without ``--check`` it does not return (the command replaces it)."""
    args = _parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    kind = Allocator(args.allocator)
    try:
        env = allocator_env(kind, malloc_conf=args.malloc_conf)
    except ToolError as err:
        print(f"malloc: {err}", file=sys.stderr)
        return 2
    if not args.quiet:
        shown = [f"{k}={env[k]}" for k in ("LD_PRELOAD", "MALLOC_CONF", *TCMALLOC_QUIET) if k in env]
        print(f"malloc: {kind}: " + " ".join(shown or ["LD_PRELOAD unset"]), file=sys.stderr)
    if args.check:
        return _check_command(kind, env, command) if command else _check_probe(kind, env)
    if not command:
        print("malloc: no COMMAND given (usage: python -m tools.profile.malloc --allocator jemalloc -- COMMAND ...)",
              file=sys.stderr)
        return 2
    try:
        os.execvpe(command[0], command, env)
    except OSError as err:
        print(f"malloc: cannot run {command[0]!r}: {err.strerror}", file=sys.stderr)
        return 127 if isinstance(err, FileNotFoundError) else 126  # the shell's codes
    return 0  # not reached: execvpe returns only by raising


if __name__ == "__main__":
    sys.exit(main())
