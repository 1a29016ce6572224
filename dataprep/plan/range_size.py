"""How a plan is split into ranges when ``--range-size`` is ``auto`` (the default): ranges of equal bytes.

A range is the unit that writer processes (``--engine local``) and Ray tasks write in
parallel, so a run keeps at most as many writers busy as its plan has ranges, and ranges
of unequal work leave writers idle at the end. The split must not depend on ``--workers``
(the output bytes do not), so it is a function of the plan alone: ``auto_range_count``
ranges of about equal input bytes (``even_range_starts``: each ends at the unit nearest to
its share of the plan's bytes). The count is ``AUTO_RANGES`` (64), fewer when ranges would
hold under ``MIN_AUTO_RANGE_BYTES`` (4 MiB: each range costs a few milliseconds, a shard
closed and made durable, a checkpoint, and a RAW of a few MiB is written faster by one
process than shared), rounded down to a count in ``COUNTS`` that many core counts divide
(12 ranges keep 2, 3, 4, 6 or 12 writers busy to the end), and more above
``AUTO_RANGES x MAX_AUTO_RANGE_BYTES`` (ranges of at most 4 GiB). Each range ends with a
shard of its own, usually smaller than ``--shard-size``: a run writes at least as many
shards as ranges. Line-based files (JSONL, text by line) are cut into parts of
``AUTO_PART_BYTES`` so that one large file still splits evenly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

AUTO_RANGES = 64
MIN_AUTO_RANGE_BYTES = 4 * 2**20
MAX_AUTO_RANGE_BYTES = 4 * 2**30
COUNTS = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)
AUTO_PART_BYTES = 512 * 2**10


def auto_range_count(total_bytes: int) -> int:
    """How many ranges a plan of ``total_bytes`` input bytes has (module docstring)."""
    if total_bytes > AUTO_RANGES * MAX_AUTO_RANGE_BYTES:
        return -(-total_bytes // MAX_AUTO_RANGE_BYTES)
    fits = max(1, total_bytes // MIN_AUTO_RANGE_BYTES)
    return max(count for count in COUNTS if count <= fits)


def even_range_starts(unit_bytes: np.ndarray) -> np.ndarray:
    """int64 [R + 1]: the first position of each of ``auto_range_count`` ranges of about equal bytes, then N.

    unit_bytes: int64 [N], input bytes of each unit (a unit counts at least 1 byte). A range
    ends at the unit boundary nearest to its share of the bytes; a unit larger than a range
    makes its range larger (and the plan has fewer ranges). An empty plan has one empty range.
    """
    return even_range_starts_of_chunks(lambda: iter((unit_bytes,)))


def even_range_starts_of_chunks(chunks: Callable[[], Iterable[np.ndarray]]) -> np.ndarray:
    """``even_range_starts`` over unit sizes read in chunks, twice (``chunks()`` starts a pass).

    Holds one chunk and one int64 per range: a plan of 10^8 units is split without its sizes
    in memory. The first pass sums the bytes; the second finds each range's end.
    """
    total, count = 0, 0
    for chunk in chunks():
        total += int(np.maximum(chunk, 1).sum(dtype=np.int64))
        count += len(chunk)
    if count == 0:
        return np.zeros(2, dtype=np.int64)
    ranges = auto_range_count(total)
    targets = total * np.arange(1, ranges, dtype=np.float64) / ranges
    nearest: list[np.ndarray] = []
    done, first, previous_end = 0, 0, 0  # targets placed, the chunk's first position, the end before it
    for chunk in chunks():
        if not len(chunk):
            continue
        ends = previous_end + np.cumsum(np.maximum(chunk.astype(np.int64), 1))
        here = int(np.searchsorted(targets, ends[-1], side="right"))  # targets that end in this chunk
        wanted = targets[done:here]
        after = np.searchsorted(ends, wanted)  # the first unit whose end reaches the target
        before_end = np.where(after > 0, ends[np.maximum(after - 1, 0)], previous_end)
        closer_before = np.abs(before_end - wanted) <= np.abs(ends[after] - wanted)
        nearest.append(first + np.where(closer_before, after - 1, after))
        done, first, previous_end = here, first + len(chunk), int(ends[-1])
    inner = np.concatenate(nearest) + 1 if nearest else np.zeros(0, dtype=np.int64)
    starts = np.unique(np.clip(inner, 1, count - 1)) if count > 1 else np.zeros(0, dtype=np.int64)
    return np.concatenate([[0], starts, [count]]).astype(np.int64)


def part_bytes_for(range_bytes: int | None, max_part_bytes: int) -> int:
    """The largest part of a line-based file: never more than a range, nor than ``max_part_bytes``."""
    return min(max_part_bytes, AUTO_PART_BYTES if range_bytes is None else range_bytes)
