"""Running the user's training script in this process, unchanged: as ``python script.py args`` or ``python -m``.

``run_target`` sets ``sys.argv`` and ``sys.path[0]`` as the interpreter would, runs the script with
``runpy`` as ``__main__`` (worker processes under spawn or forkserver re-import it from its path, as
they do for ``python script.py``), and puts both back afterwards. A ``SystemExit`` becomes the exit
code; any other exception propagates (the caller writes its report first).

``swapped_torch_loader`` makes ``torch.utils.data.DataLoader`` (and ``torch.utils.data.dataloader.
DataLoader``) ``loaders.DataLoader`` for the run, as the test suite's import hook does
(``tools/suites/torch/child.py``); ``loaders`` is imported first, so its worker processes keep torch's
own loader inside (bound at import in ``loaders.loader.process_workers``).
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

__all__ = ["Target", "exit_code", "run_target", "swapped_torch_loader"]


@dataclass(frozen=True)
class Target:
    """What to run: a script's path, or a module's name (``module=True``, as ``python -m``), and its arguments."""

    name: str
    args: tuple[str, ...] = ()
    module: bool = False

    @property
    def argv(self) -> list[str]:
        return [self.name, *self.args]


def exit_code(code: object) -> int:
    """The process exit status of ``SystemExit(code)``, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    sys.stderr.write(f"{code}\n")  # the interpreter prints a non-integer exit code, then exits 1
    return 1


@contextmanager
def swapped_torch_loader() -> Iterator[None]:
    """``torch.utils.data.DataLoader`` is ``loaders.DataLoader`` inside the block (both names torch exports)."""
    import torch.utils.data
    import torch.utils.data.dataloader

    from loaders import DataLoader

    original = torch.utils.data.DataLoader, torch.utils.data.dataloader.DataLoader
    # Replacing torch's class with ours is the point of --swap-torch, which torch's stubs cannot allow.
    torch.utils.data.DataLoader = DataLoader  # type: ignore[misc]  # see the comment above
    torch.utils.data.dataloader.DataLoader = DataLoader  # type: ignore[misc]  # see the comment above
    try:
        yield
    finally:
        torch.utils.data.DataLoader, torch.utils.data.dataloader.DataLoader = original  # type: ignore[misc]  # as above


@contextmanager
def _as_main(target: Target) -> Iterator[None]:
    """``sys.argv`` and ``sys.path[0]`` as ``python script.py args`` (or ``python -m``) sets them."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = target.argv
    first = os.getcwd() if target.module else os.path.dirname(os.path.abspath(target.name))
    sys.path[:1] = [first]
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def run_target(target: Target, *, swap_torch: bool = False) -> int:
    """Run ``target`` in this process as ``__main__``; its exit status (0 when it returns)."""
    swap: AbstractContextManager[None] = swapped_torch_loader() if swap_torch else nullcontext()
    with swap, _as_main(target):
        try:
            if target.module:
                runpy.run_module(target.name, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target.name, run_name="__main__")
        except SystemExit as done:
            return exit_code(done.code)
    return 0
