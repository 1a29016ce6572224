"""Runs python blocks as ``python block.py`` would, in a child forked from one interpreter that has torch imported.

A python block costs ~2 s of CPU to import torch; the docs have dozens. ``serve()`` (run in a subprocess of
its own, started once per test session) imports torch, numpy, Pillow and this repository's packages, then
reads one JSON request per line on stdin: ``{"script", "cwd", "env", "stdout", "stderr"}``. For each it forks a
child that becomes the script's interpreter: stdin from /dev/null, stdout and stderr to the given files, the
working directory, ``os.environ`` replaced by ``env``, ``sys.argv = [script]``, ``sys.path[0]`` the script's
folder, the script run as ``__main__`` (``runpy.run_path``), then the interpreter's normal exit (atexit
handlers, non-daemon threads joined), with the status ``python`` gives: 0, the ``SystemExit`` code, or 1 and
the traceback on stderr. The server answers ``{"pid": ...}`` when the child starts and ``{"status": ...}``
when it ends (a signal: minus its number), so the caller can kill a child that hangs.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
from typing import Any

PRELOADED = ("numpy", "PIL.Image", "torch", "torch.utils.data", "loaders", "loaders.augment", "loaders.tokens",
             "dataprep")


def _exit_status(code: object) -> int:
    """The status ``python`` exits with for ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _become_script(request: dict[str, Any]) -> int:
    """In the forked child: set the process up as ``python script`` would be, run it; returns the status."""
    stdin = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for source, target in ((stdin, 0), (out, 1), (err, 2)):
        os.dup2(source, target)
        os.close(source)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115  # the process's fd 0 for its whole life
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["script"]
    sys.argv = [script]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        return _exit_status(stop.code)
    except BaseException:  # noqa: BLE001  # what the interpreter does with an uncaught exception
        traceback.print_exc()
        return 1
    return 0


def _answer(message: dict[str, int]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve() -> None:
    """The request loop (module docstring); a forked child leaves it by ``SystemExit`` with the script's status."""
    for name in PRELOADED:
        __import__(name)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            status = _become_script(request)
            sys.stdout.flush()
            sys.stderr.flush()
            raise SystemExit(status)  # the interpreter's own exit: atexit, threads joined
        _answer({"pid": pid})
        _, wait_status = os.waitpid(pid, 0)
        _answer({"status": os.waitstatus_to_exitcode(wait_status)})


if __name__ == "__main__":
    serve()
