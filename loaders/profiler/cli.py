"""``shardfeed-profile``: argument parsing only; ``loaders.profiler.session.profile`` does the run.

::

    shardfeed-profile [--out DIR] [--interval S] [--swap-torch] script.py [args...]
    shardfeed-profile [--out DIR] [--interval S] [--swap-torch] -m module [args...]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from loaders.profiler.run import Target
from loaders.profiler.session import profile

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shardfeed-profile",
        description="Run a training script unchanged and report where its loop's time goes: the share spent "
                    "waiting for data over time, each data stage's cost, the bottleneck, what-ifs (more workers, "
                    "pre-resized shards, device decode); a JSON report and a PNG timeline.")
    p.add_argument("--out", default="shardfeed-profile", help="folder for report.json and timeline.png "
                   "(default: ./shardfeed-profile)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="seconds between samples of each loader's stats() (default 1)")
    p.add_argument("--swap-torch", action="store_true",
                   help="make torch.utils.data.DataLoader loaders.DataLoader for the run (a script written for "
                        "torch's loader, profiled unchanged)")
    p.add_argument("-m", dest="module", action="store_true", help="run the target as a module (python -m)")
    p.add_argument("target", help="the training script (or, with -m, the module)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The command's entry point: the script's own exit status."""
    args = parser().parse_args(argv)
    if not args.interval > 0:
        parser().error(f"--interval must be a positive number of seconds (got {args.interval})")
    target = Target(args.target, tuple(args.args), module=args.module)
    return profile(target, out_dir=args.out, swap_torch=args.swap_torch, interval_s=args.interval)
