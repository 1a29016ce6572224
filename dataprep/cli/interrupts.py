"""The command line's interrupt handling: a Ctrl-C inside a finaliser still stops the command."""

from __future__ import annotations

import _thread
import sys
import time

_REINTERRUPT_DELAY_S = 0.01  # long enough for the hook that schedules it to return


def _interrupt_main_soon() -> None:
    time.sleep(_REINTERRUPT_DELAY_S)
    _thread.interrupt_main()


def keep_interrupts() -> None:
    """Make a Ctrl-C that lands inside a finaliser or weakref callback stop the command.

    Python reports an exception raised there as "Exception ignored in ..." with a traceback
    on stderr and drops it, so the interrupt would be printed and lost. This hook (for
    the command line only; inherited by forked workers) re-raises it in the main thread
    instead, where ``main`` ends with the resume hint and exit status 130.
    """
    if getattr(sys.unraisablehook, "keeps_interrupts", False):
        return  # installed already
    previous = sys.unraisablehook

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # From another thread, a moment later: raised in the hook it would be dropped again.
            try:
                _thread.start_new_thread(_interrupt_main_soon, ())
            except RuntimeError:  # interpreter shutting down: nothing left to stop
                pass
            return
        previous(unraisable)

    hook.keeps_interrupts = True  # type: ignore[attr-defined]  # a marker attribute on a function
    sys.unraisablehook = hook
