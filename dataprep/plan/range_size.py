"""How many input bytes a range of the plan holds when ``--range-size`` is ``auto`` (the default).

A range is the unit that writer processes (``--engine local``) and Ray tasks write in
parallel, so a run has at most as many writers busy as its plan has ranges; the split must
not depend on ``--workers`` (the output bytes do not), so it is a function of the plan
alone: the planned input bytes over ``AUTO_RANGES``, within [``MIN_AUTO_RANGE_BYTES``,
``MAX_AUTO_RANGE_BYTES``]. 64 ranges keep 2, 4, 8, 16, 32 or 64 writers busy to the end
(no last wave with idle writers, ranges being of about equal bytes); each range ends with
a shard of its own, usually smaller than ``--shard-size``, so a run writes at least as many
shards as it has ranges. The lower bound keeps a small RAW in few ranges: each range costs
a few milliseconds (a shard closed and synced, a checkpoint), and a RAW of a few MiB is
written faster by one process than shared. Line-based files (JSONL, text by line) are cut
into parts of ``AUTO_PART_BYTES`` so that a single large file still makes many ranges.
"""

from __future__ import annotations

import numpy as np

AUTO_RANGES = 64
MIN_AUTO_RANGE_BYTES = 4 * 2**20
MAX_AUTO_RANGE_BYTES = 4 * 2**30
AUTO_PART_BYTES = MIN_AUTO_RANGE_BYTES


def auto_range_bytes(total_bytes: int) -> int:
    """The range size of a plan of ``total_bytes`` input bytes (module docstring)."""
    return int(min(MAX_AUTO_RANGE_BYTES, max(MIN_AUTO_RANGE_BYTES, -(-total_bytes // AUTO_RANGES))))


def range_bytes_of(unit_bytes: np.ndarray, range_bytes: int | None) -> int:
    """``range_bytes``, or for None (``auto``) the size that ``auto_range_bytes`` gives the plan's units.

    unit_bytes: int64 [N], input bytes of each unit (a unit counts at least 1, as ``split_ranges`` counts it).
    """
    if range_bytes is not None:
        return range_bytes
    return auto_range_bytes(int(np.maximum(unit_bytes, 1).sum()) if len(unit_bytes) else 0)


def part_bytes_for(range_bytes: int | None, max_part_bytes: int) -> int:
    """The largest part of a line-based file: never more than a range, nor than ``max_part_bytes``."""
    return min(max_part_bytes, AUTO_PART_BYTES if range_bytes is None else range_bytes)
