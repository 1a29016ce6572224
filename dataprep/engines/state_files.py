"""The files of a range-parallel run in OUT's state folder (``.dataprep/ranges/``), by name; its rejects joined.

Written by the range tasks of ``--engine ray`` (``range_tasks``) and by the writer processes
of ``--engine local`` (``local_writers``), in the same formats, and removed with the state
folder when the run ends::

    digests-RRRRR.bin     the dedup digests of range R's kept records, by partition (``grouping``)
    dups-PP.npy           the duplicates in partition P, of every range (``grouping``): P is grouped
    dups.done             every range's duplicates are known
    rejects-RRRRR.jsonl   rejects of range R, in plan order
    spill-RRRRR.bin       range R's cleaned records (``spill``), until R is written
    attempts/KIND-N-TOKEN/ what one attempt at a Ray task wrote (``range_tasks``)
    probe/                one file per node: OUT is shared (``range_tasks.probe_node``)

An ordinal counts the raw records of a range in plan order, from 0.
"""

from __future__ import annotations

import shutil

from dataprep.output.store import STATE_DIR, OutputStore

RANGES_DIR = f"{STATE_DIR}/ranges"
ATTEMPTS_DIR = f"{RANGES_DIR}/attempts"
PROBE_DIR = f"{RANGES_DIR}/probe"
DUPS_DONE = f"{RANGES_DIR}/dups.done"
# Digests are split by their first byte: a digest lives in one partition only, so the result
# does not depend on the number of partitions, and partitions are grouped in parallel.
DIGEST_PARTITIONS = 16


def digests_name(index: int) -> str:
    return f"{RANGES_DIR}/digests-{index:05d}.bin"


def dups_name(part: int) -> str:
    return f"{RANGES_DIR}/dups-{part:02d}.npy"


def rejects_name(index: int) -> str:
    return f"{RANGES_DIR}/rejects-{index:05d}.jsonl"


def spill_name(index: int) -> str:
    return f"{RANGES_DIR}/spill-{index:05d}.bin"


def join_rejects(store: OutputStore, partial_name: str, num_ranges: int) -> None:
    """The run's rejects file ``partial_name``: every range's rejects file, in range order (the bytes a run
    that wrote the ranges one after another appends). A range without one has no reject: a rejects file is
    made durable only once something is in it."""
    with store.writer(partial_name) as dst:
        for index in range(num_ranges):
            if not store.exists(rejects_name(index)):
                continue
            with store.open_read(rejects_name(index)) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
